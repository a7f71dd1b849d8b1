//! Writ's admin API service (`/v1`) and the `writ admin` CLI client.
//!
//! Architecture invariant: this crate talks to the ledger only through
//! `writ_client::Ledger`; it never touches Raft or RocksDB.
#![recursion_limit = "256"]

mod audit;
mod catalogs;
pub mod cli;
pub mod client_config;
mod console;
pub mod context;
mod credentials;
pub mod enroll;
pub mod error;
mod health;
mod oauth;
mod openapi;
mod operations;
mod operators;
mod refusals;
pub mod service;
pub mod signing;
mod tokens;
pub mod upstreams;
mod work;

pub use service::{router, AdminConfig, BackupChunks, BackupSource};
