//! The fast tier in one binary: the edge's and the admin API's routers on an in-memory ledger,
//! both MCP wires, the reason codes' documents and the tree's own rules. Nothing here starts a
//! process or links RocksDB (`make test-fast`).

mod architecture;
mod legacy_wire;
mod observability;
mod operators;
mod reasons;
mod routers;
