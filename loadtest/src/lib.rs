//! `writ-loadtest` (SPEC T1, T2, P1–P4): drives a running Writ cluster only through its public
//! interfaces — the MCP edges with real bearer tokens, the admin API for setup and `--verify`
//! — and, with the same generator, etcd's v3 gateway and a bare MCP server for comparison.

pub mod cli;
pub mod engine;
pub mod etcd;
pub mod mcp;
pub mod report;
pub mod verify;
pub mod writ;
