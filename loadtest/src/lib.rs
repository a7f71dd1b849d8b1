//! `writ-loadtest` (SPEC §8). Empty until the load-test issue lands; it will drive a running
//! cluster only through its public MCP edge and the admin API.
