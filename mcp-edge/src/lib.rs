//! The stateless MCP Streamable HTTP edge (SPEC §4). Empty until the edge issue lands; the
//! crate exists so that the workspace has its fixed layout and dependency direction
//! (`api ← mcp-edge ← node`) from the start.
//!
//! Architecture invariant: `mcp-edge` never opens RocksDB; it reaches the ledger only through
//! `writ_api::client::Ledger`.
