//! The core tier's integration tests in one binary: pinned encodings (golden samples), the
//! operation rules as properties, and the deterministic simulation, all on the pure core with
//! no runtime, store or network.

mod golden;
mod operations;
mod sim;
mod support;
