//! The cluster tier in one binary: real `writ` processes (nodes, edges, executors, `writ dev`),
//! real clients and tools against them, faults and deployments. Each module is one area.

mod admin_api;
mod audit;
mod authority;
mod catalog;
mod cluster;
mod conformance;
mod console;
mod corruption;
mod deploy_files;
mod deploy_script;
mod dev;
mod edge;
mod edge_cluster;
mod enroll;
mod executor;
mod federation;
mod hosts;
mod legacy_clients;
mod loadtest;
mod netns;
mod nimi_matrix;
mod operations_cluster;
mod prometheus;
mod schemathesis;
mod sim;
mod submit_stream;
mod tenant_idp;
mod traces;
mod trust;
