//! Architecture invariants, checked on the resolved dependency graph (`cargo metadata`):
//! - `writ-api` (the pure core) depends on no async runtime, HTTP stack, storage engine or Raft;
//! - `writ-raft-store` depends on no network code;
//! - `writ-loadtest` (a client of public interfaces) never links the node or the store.
//!
//! Only normal (non-dev, non-build) dependencies count, transitively. The checker itself is
//! tested on a small graph so that a forbidden edge is seen to fail it.
//!
//! And one build invariant: building one crate alone (`cargo build -p writ-node`, `cargo test
//! -p writ-raft-store`) resolves RocksDB's build inputs exactly as the workspace build does, so
//! it reuses the compiled C++ instead of spending minutes on it again.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// package name → names of its normal dependencies, from `cargo metadata`'s resolve graph.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Runs `cargo <args> --locked --offline` on this workspace (with `env` set) and returns what it
/// prints; a failure fails the test with cargo's message.
fn cargo(args: &[&str], env: &[(&str, &str)]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args(args)
        .args(["--locked", "--offline", "--manifest-path", manifest])
        .envs(env.iter().copied())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn workspace_graph() -> Graph {
    // The graph as built here: only this host's platform (other platforms' crates are neither
    // built nor downloaded).
    let out = cargo(&["metadata", "--format-version", "1", "--filter-platform", &host_triple()], &[]);
    let meta: Value = serde_json::from_slice(&out).expect("cargo metadata prints JSON");
    graph_from_metadata(&meta)
}

fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc).arg("-vV").output().expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

fn graph_from_metadata(meta: &Value) -> Graph {
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("id"), p["name"].as_str().expect("name")))
        .collect();
    let mut graph = Graph::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let name = names[node["id"].as_str().expect("id")].to_string();
        let deps = graph.entry(name).or_default();
        for dep in node["deps"].as_array().expect("deps") {
            let normal = dep["dep_kinds"].as_array().expect("dep_kinds").iter().any(|k| k["kind"].is_null());
            let name = names[dep["pkg"].as_str().expect("pkg")];
            // The workspace-hack only unifies features (see `one_crate_alone_builds_rocksdb_as_the_workspace_does`);
            // it exports nothing, so a crate can use only what it names itself.
            if normal && name != WORKSPACE_HACK {
                deps.insert(name.to_string());
            }
        }
    }
    graph
}

/// The feature-unification crate every member but the pure core depends on (api/workspace-hack).
const WORKSPACE_HACK: &str = "writ-workspace-hack";

/// Every path from `root` to a package in `forbidden`, as "a → b → c".
fn forbidden_paths(graph: &Graph, root: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![root.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().expect("non-empty path").clone();
        if forbidden.contains(&last.as_str()) {
            found.push(path.join(" → "));
            continue;
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for dep in graph.get(&last).into_iter().flatten() {
            let mut next = path.clone();
            next.push(dep.clone());
            stack.push(next);
        }
    }
    found
}

/// The runtime, network, storage and consensus crates the pure core must never reach (and the
/// `rand` crate; JSON Schema's hasher seeds itself from the OS, which changes no result).
const NOT_IN_THE_CORE: &[&str] =
    &["tokio", "hyper", "axum", "reqwest", "rocksdb", "librocksdb-sys", "openraft", "rand"];
/// Network crates the storage layer must never reach.
const NO_NETWORK: &[&str] =
    &["hyper", "hyper-util", "axum", "reqwest", "h2", "tower", "tonic", "rustls", "writ-client"];

#[test]
fn the_pure_core_does_no_io() {
    let paths = forbidden_paths(&workspace_graph(), "writ-api", NOT_IN_THE_CORE);
    assert!(paths.is_empty(), "writ-api must stay pure, but depends on:\n{}", paths.join("\n"));
}

#[test]
fn the_store_has_no_network_code() {
    let paths = forbidden_paths(&workspace_graph(), "writ-raft-store", NO_NETWORK);
    assert!(paths.is_empty(), "writ-raft-store must not reach network code, but depends on:\n{}", paths.join("\n"));
}

#[test]
fn the_load_tester_is_a_client_of_public_interfaces() {
    let paths = forbidden_paths(&workspace_graph(), "writ-loadtest", &["writ-node", "writ-raft-store", "rocksdb"]);
    assert!(paths.is_empty(), "writ-loadtest must not link the node or the store:\n{}", paths.join("\n"));
}

/// The load tester speaks to the admin API through the typed client only: no route is spelled
/// in its sources, so a route that changes breaks its build, not a benchmark run.
#[test]
fn the_load_tester_spells_no_admin_route() {
    let spelled: Vec<String> = files_under(&root().join("loadtest/src"), ".rs")
        .into_iter()
        .filter(|f| std::fs::read_to_string(f).unwrap_or_default().contains("\"/v1"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(spelled.is_empty(), "admin routes spelled by hand (use writ_client::AdminClient): {spelled:?}");
}

/// The reference executor is a site's own trust domain: it reaches Writ through an edge's
/// executor API only, and links neither the ledger, the store nor the edge.
#[test]
fn the_executor_links_no_ledger_store_or_edge() {
    let heavy = ["writ-node", "writ-raft-store", "writ-mcp-edge", "writ-tenant-admin", "openraft", "librocksdb-sys"];
    let graph = workspace_graph();
    assert!(graph.get("writ-node").is_some_and(|d| d.contains("writ-executor")), "`writ executor` is its crate");
    let paths = forbidden_paths(&graph, "writ-executor", &heavy);
    assert!(paths.is_empty(), "writ-executor must stay a client of an edge:\n{}", paths.join("\n"));
}

/// The admin server and its CLI are apart: the CLI is a client of the API (no server code, no
/// axum), and the server links no argument parser.
#[test]
fn the_admin_cli_and_server_link_each_other_not() {
    let graph = workspace_graph();
    assert!(graph.get("writ-node").is_some_and(|d| d.contains("writ-admin-cli")), "`writ admin` is its crate");
    let cli = forbidden_paths(&graph, "writ-admin-cli", &["writ-tenant-admin", "axum", "writ-raft-store"]);
    assert!(cli.is_empty(), "writ-admin-cli must stay a client of the API:\n{}", cli.join("\n"));
    let server = forbidden_paths(&graph, "writ-tenant-admin", &["writ-admin-cli", "clap"]);
    assert!(server.is_empty(), "writ-tenant-admin must not link the CLI:\n{}", server.join("\n"));
}

/// The fast tier runs without the storage engine: `make test-fast` never waits for RocksDB's C++.
#[test]
fn the_fast_tier_links_no_node_store_or_rocksdb() {
    let paths =
        forbidden_paths(&workspace_graph(), "writ-tests-fast", &["writ-node", "writ-raft-store", "librocksdb-sys"]);
    assert!(paths.is_empty(), "writ-tests-fast must not build the node or the store:\n{}", paths.join("\n"));
}

#[test]
fn the_checker_finds_a_forbidden_dependency_added_anywhere_below() {
    let mut graph = Graph::new();
    graph.insert("writ-api".into(), ["serde".to_string(), "jsonschema".to_string()].into());
    graph.insert("jsonschema".into(), ["regex".to_string()].into());
    assert!(forbidden_paths(&graph, "writ-api", NOT_IN_THE_CORE).is_empty());
    graph.get_mut("jsonschema").expect("node").insert("reqwest".into());
    assert_eq!(forbidden_paths(&graph, "writ-api", NOT_IN_THE_CORE), ["writ-api → jsonschema → reqwest"]);
}

/// The layers of a domain folder above its types: its rules (`decide.rs`, one layer with the
/// `decide` dispatcher that routes to them), its fold and its lookups (`fold.rs`, `query.rs`:
/// above the state).
const DOMAIN_LAYERS: &[&str] = &["decide", "fold", "query"];

/// The node of the import graph a domain module's `layer` belongs to.
fn layer_node(module: &str, layer: Option<&str>) -> String {
    match layer {
        Some("decide") => "decide".into(),
        Some(l) => format!("{module}::{l}"),
        None => module.into(),
    }
}

/// Top-level modules of the pure core and the crate modules each one uses (`crate::x`), from
/// the source with comments and test modules left out.
fn core_module_imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api/src");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).expect("read api/src").map(|e| e.expect("entry").path()));
            continue;
        }
        let rel = path.strip_prefix(&src).expect("under api/src");
        let module = rel.iter().next().and_then(|c| c.to_str()).expect("name").trim_end_matches(".rs").to_string();
        if module == "lib" || rel.ends_with("tests.rs") || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        // A domain's folder holds layers: its types (below commands and events), its fold and
        // lookups (above the state) and its rules (on top).
        let layer = path.file_stem().and_then(|s| s.to_str()).filter(|s| DOMAIN_LAYERS.contains(s));
        let top = layer_node(&module, layer);
        let text = std::fs::read_to_string(&path).expect("read source");
        let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
        let uses = imports.entry(top.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut parts = name.split("::");
                let first = parts.next().unwrap_or_default();
                let name = layer_node(first, parts.next().filter(|l| DOMAIN_LAYERS.contains(l)));
                let is_module = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
                if is_module
                    && name != top
                    && !["encode", "decode", "decode_unbounded", "sha256_hex"].contains(&name.as_str())
                {
                    uses.insert(name);
                }
            }
        }
    }
    imports
}

/// A cycle in `graph`, if any, as "a → b → a".
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle.join(" → "));
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|start| visit(graph, start, &mut Vec::new(), &mut done))
}

/// The core's modules depend one way: rejection and reasons at the bottom, domain types, then
/// commands and events, the state and each domain's fold, and the rules (`decide`) on top.
#[test]
fn the_core_has_no_import_circle() {
    let imports = core_module_imports();
    assert!(imports.contains_key("decide") && imports["decide"].contains("state"), "{imports:?}");
    assert!(imports.get("operation::fold").is_some_and(|i| i.contains("state")), "{imports:?}");
    assert_eq!(find_cycle(&imports), None, "modules of writ-api import each other: {imports:#?}");
    let mut circular = imports.clone();
    circular.get_mut("rejection").expect("rejection module").insert("decide".into());
    assert!(find_cycle(&circular).is_some(), "the cycle finder sees an added circle");
}

/// The slim client binary (`writ` without the `server` feature: `writ admin`, `writ executor`,
/// `writ pki` for operators' laptops and site PCs) links no storage, consensus or edge code.
#[test]
fn the_slim_client_binary_links_no_storage_or_consensus() {
    let host = host_triple();
    let tree = |extra: &[&str]| {
        let args =
            ["tree", "-p", "writ-node", "-e", "normal", "--prefix", "none", "--format", "{p}", "--target", &host];
        let out = cargo(&[&args[..], extra].concat(), &[]);
        let text = String::from_utf8_lossy(&out).to_string();
        text.lines().filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect::<BTreeSet<String>>()
    };
    let slim = tree(&["--no-default-features"]);
    for heavy in ["rocksdb", "librocksdb-sys", "openraft", "writ-raft-store", "writ-mcp-edge"] {
        assert!(!slim.contains(heavy), "the slim client links {heavy}");
    }
    assert!(slim.contains("writ-tenant-admin") && slim.contains("rcgen"), "it still has the admin CLI and the PKI");
    // The check can fail: the full binary does link them.
    assert!(tree(&[]).contains("rocksdb"));
}

/// What cargo would build RocksDB's C++ from under `selection` (e.g. `build -p writ-node`): the
/// unit that runs librocksdb-sys's build script, with every unit below it — package, target,
/// mode, features, profile (its name aside: `test` and `dev` share artifacts) and platform — from
/// cargo's unit graph. Two selections with different answers compile the C++ twice. The unit
/// graph is the only faithful view: `cargo tree` shows features but not, say, that a build
/// dependency shared with a normal one is built with the normal one's debuginfo.
fn rocksdb_build_unit(selection: &[&str]) -> BTreeSet<String> {
    // `--unit-graph` is unstable; it only prints cargo's build plan and compiles nothing.
    let args = [selection, &["--unit-graph", "-Z", "unstable-options"]].concat();
    let out = cargo(&args, &[("RUSTC_BOOTSTRAP", "1")]);
    let graph: Value = serde_json::from_slice(&out).expect("the unit graph is JSON");
    let units = graph["units"].as_array().expect("units");
    let describe = |u: &Value| {
        let mut profile = u["profile"].clone();
        profile.as_object_mut().expect("profile").remove("name");
        let id = u["pkg_id"].as_str().expect("pkg_id");
        let package = id.rsplit('#').next().unwrap_or(id);
        format!("{package} {} {} {} {profile} {}", u["target"]["kind"], u["mode"], u["features"], u["platform"])
    };
    let root = units
        .iter()
        .position(|u| {
            u["pkg_id"].as_str().is_some_and(|id| id.contains("librocksdb-sys")) && u["mode"] == "run-custom-build"
        })
        .unwrap_or_else(|| panic!("{selection:?} builds RocksDB"));
    let mut below = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(at) = stack.pop() {
        if below.insert(at) {
            stack.extend(
                units[at]["dependencies"]
                    .as_array()
                    .expect("deps")
                    .iter()
                    .map(|d| d["index"].as_u64().expect("index") as usize),
            );
        }
    }
    // Every unit and every edge between them (the same units wired differently differ too).
    let mut plan: BTreeSet<String> = below.iter().map(|&at| describe(&units[at])).collect();
    for &at in &below {
        for dep in units[at]["dependencies"].as_array().expect("deps") {
            let to = &units[dep["index"].as_u64().expect("index") as usize];
            plan.insert(format!("{} → {}", describe(&units[at]), describe(to)));
        }
    }
    plan
}

/// `cargo build -p X` resolves features for X alone, so without the workspace-hack the build
/// tools of RocksDB's (bindgen, its `syn`, `regex`, `bitflags`…) are built differently than in
/// the workspace build and cargo compiles RocksDB's C++ again (about 12 minutes). Every member
/// that builds RocksDB depends on the hack, which carries the workspace's union of features.
#[test]
fn one_crate_alone_builds_rocksdb_as_the_workspace_does() {
    // The dependency rules above skip the hack's edges; that is sound only while it exports nothing.
    let hack = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../api/workspace-hack/src/lib.rs"))
        .expect("read the hack's lib.rs");
    assert!(hack.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with("//")), "{hack}");

    let workspace = rocksdb_build_unit(&["build", "--workspace"]);
    assert!(workspace.iter().any(|u| u.contains("bindgen@")), "RocksDB is built with bindgen: {workspace:#?}");
    let graph = workspace_graph();
    let builds_rocksdb: Vec<&String> = graph
        .keys()
        .filter(|p| p.starts_with("writ-") && !forbidden_paths(&graph, p, &["librocksdb-sys"]).is_empty())
        .collect();
    assert!(builds_rocksdb.len() >= 3, "the store, the node and the tests build RocksDB: {builds_rocksdb:?}");
    let mut selections = vec![vec!["test", "--workspace", "--no-run"]];
    for member in &builds_rocksdb {
        selections.push(vec!["build", "-p", member]);
        selections.push(vec!["test", "-p", member, "--no-run"]);
    }
    for selection in selections {
        let alone = rocksdb_build_unit(&selection);
        let differs: Vec<&String> = alone.symmetric_difference(&workspace).collect();
        assert!(differs.is_empty(), "cargo {selection:?} would compile RocksDB again; units that differ: {differs:#?}");
    }
}

/// Every metric the code records (`metrics::counter!`/`gauge!`/`histogram!("writ_…"`) is listed
/// in docs/metrics.md, and the list names nothing the code no longer records.
#[test]
fn every_metric_is_documented() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut recorded = BTreeSet::new();
    let mut stack: Vec<std::path::PathBuf> =
        ["api", "raft-store", "node", "mcp-edge", "tenant-admin"].iter().map(|d| root.join(d)).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                for kind in ["counter!(\"", "gauge!(\"", "histogram!(\""] {
                    for part in text.split(kind).skip(1) {
                        let name: String = part.chars().take_while(|c| *c != '"').collect();
                        if name.starts_with("writ_") {
                            recorded.insert(name);
                        }
                    }
                }
            }
        }
    }
    assert!(recorded.len() > 20, "the scan finds the metrics: {recorded:?}");
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
    let documented: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("writ_"))
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = recorded.difference(&documented).collect();
    let stale: Vec<&String> = documented.difference(&recorded).collect();
    assert!(missing.is_empty() && stale.is_empty(), "undocumented: {missing:?}; documented but gone: {stale:?}");
}

/// The workspace's root directory.
fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir` (recursively) whose name ends with `suffix`, outside `target/`.
fn files_under(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                out.push(path);
            }
        }
    }
    out
}

/// ARCHITECTURE.md stays a map: at most 300 lines, and every repository path it names exists
/// (detail goes to docs/design/, which it names too).
#[test]
fn the_architecture_document_is_a_map_of_paths_that_exist() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(
        text.lines().count() <= 300,
        "ARCHITECTURE.md has {} lines; move detail to docs/design/",
        text.lines().count()
    );
    let tops =
        ["api/", "raft-store/", "node/", "mcp-edge/", "tenant-admin/", "loadtest/", "tests/", "deploy/", "docs/"];
    let named: BTreeSet<&str> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().next().unwrap_or(""))
        .filter(|s| tops.iter().any(|t| s.starts_with(t)))
        .collect();
    assert!(named.len() > 30, "the scan finds the paths: {named:?}");
    let missing: Vec<&&str> = named.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
}

/// The source folders of every product crate (each workspace member outside `tests/` and the
/// workspace-hack): what the file and function checks read.
const PRODUCT_SOURCES: &[&str] = &[
    "api/src",
    "api/client/src",
    "api/telemetry/src",
    "raft-store/src",
    "node/src",
    "node/executor/src",
    "mcp-edge/src",
    "tenant-admin/src",
    "tenant-admin/cli/src",
    "loadtest/src",
];

/// A new product crate is read by the checks too: every workspace member's sources are listed.
#[test]
fn every_product_crate_is_checked() {
    let out = cargo(&["metadata", "--format-version", "1", "--no-deps"], &[]);
    let meta: Value = serde_json::from_slice(&out).expect("cargo metadata prints JSON");
    let root = root().canonicalize().expect("workspace root");
    let unlisted: Vec<String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| std::path::Path::new(p["manifest_path"].as_str()?).parent().map(|d| d.join("src")))
        .filter_map(|src| src.strip_prefix(&root).ok().map(|s| s.display().to_string()))
        .filter(|src| !src.starts_with("tests") && !src.contains("workspace-hack"))
        .filter(|src| !PRODUCT_SOURCES.contains(&src.as_str()))
        .collect();
    assert!(unlisted.is_empty(), "product crates the checks do not read (add them to PRODUCT_SOURCES): {unlisted:?}");
}

/// Every product source file opens with its `//!` documentation.
#[test]
fn every_product_file_says_what_it_is() {
    let mut undocumented = Vec::new();
    for dir in PRODUCT_SOURCES {
        for file in files_under(&root().join(dir), ".rs") {
            let text = std::fs::read_to_string(&file).expect("source");
            if !text.starts_with("//!") {
                undocumented.push(file.strip_prefix(root()).unwrap_or(&file).display().to_string());
            }
        }
    }
    assert!(undocumented.is_empty(), "files without a leading //! line: {undocumented:?}");
}

/// Every state format and ledger version this build knows has its row in the formats document.
#[test]
fn every_format_and_ledger_version_is_documented() {
    let doc = std::fs::read_to_string(root().join("docs/design/formats.md")).expect("docs/design/formats.md");
    let rows = |heading: &str| -> BTreeSet<u32> {
        let section = doc.split(heading).nth(1).expect("the section").split("\n## ").next().unwrap_or_default();
        section.lines().filter_map(|l| l.strip_prefix("| ")?.split(' ').next()?.parse().ok()).collect()
    };
    let formats: BTreeSet<u32> = (1..=writ_api::format::STATE_FORMAT_VERSION).collect();
    let versions: BTreeSet<u32> = (1..=writ_api::ledger::LEDGER_VERSION).collect();
    assert_eq!(rows("## State formats"), formats, "docs/design/formats.md: state formats");
    assert_eq!(rows("## Ledger versions"), versions, "docs/design/formats.md: ledger versions");
}

/// Longest a product function may be, in lines.
const FUNCTION_LINES_MAX: usize = 120;

/// The product functions longer than [`FUNCTION_LINES_MAX`]: only tables of literal data (the
/// OpenAPI document, the conformance catalog, the operation tools' definitions), each with the
/// lines it may have at most. An entry may only shrink, and leaves this list once it is within
/// the limit; code is split, never listed.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("tenant-admin/src/openapi.rs", "schemas", 202),
    ("mcp-edge/src/fixtures.rs", "conformance_catalog", 194),
    ("mcp-edge/src/operations.rs", "definitions", 163),
    ("tenant-admin/src/openapi.rs", "paths", 158),
];

/// Each function of `text` (outside its unit tests) with its length in lines: from its `fn`
/// line to the line closing it at the same indentation.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.split("\n#[cfg(test)]").next().unwrap_or_default().lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let after_qualifiers = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const ", "unsafe "]
            .iter()
            .fold(code, |rest, q| rest.strip_prefix(q).unwrap_or(rest));
        let Some(signature) = after_qualifiers.strip_prefix("fn ") else { continue };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let name: String = signature.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let closing = lines[at + 1..]
            .iter()
            .position(|l| l.len() > indent && l[..indent].trim().is_empty() && l[indent..].starts_with('}'));
        if let Some(end) = closing {
            found.push((name, end + 2));
        }
    }
    found
}

/// The product functions longer than [`FUNCTION_LINES_MAX`]: (file, function, lines).
fn long_functions() -> Vec<(String, String, usize)> {
    let mut long = Vec::new();
    for dir in PRODUCT_SOURCES {
        for file in files_under(&root().join(dir), ".rs") {
            let relative = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
            if relative.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("source");
            for (name, n) in function_lengths(&text) {
                if n > FUNCTION_LINES_MAX {
                    long.push((relative.clone(), name, n));
                }
            }
        }
    }
    long
}

/// No product function grows past 120 lines: a new long one fails here, a listed one may only
/// shrink, and one back within the limit must leave the list.
#[test]
fn functions_stay_short_enough_to_read_at_once() {
    let long = long_functions();
    let mut faults = Vec::new();
    for (file, name, n) in &long {
        match LONG_FUNCTIONS.iter().find(|(f, fun, _)| f == file && fun == name) {
            None => faults.push(format!("{file}: {name} has {n} lines (at most {FUNCTION_LINES_MAX}): split it")),
            Some((_, _, ceiling)) if n > ceiling => {
                faults.push(format!("{file}: {name} grew to {n} lines (it may only shrink from {ceiling})"))
            }
            Some(_) => {}
        }
    }
    for (file, name, _) in LONG_FUNCTIONS {
        if !long.iter().any(|(f, fun, _)| f == file && fun == name) {
            faults.push(format!(
                "{file}: {name} is within {FUNCTION_LINES_MAX} lines now: remove it from LONG_FUNCTIONS"
            ));
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

/// The length check sees a long function wherever it is, and nothing in unit tests.
#[test]
fn the_length_check_finds_a_long_function() {
    let body = "    let x = 1;\n".repeat(FUNCTION_LINES_MAX);
    let text = format!(
        "//! m\n\npub(crate) async fn short() {{\n}}\n\nimpl X {{\n    fn long(&self) {{\n{body}    }}\n}}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n"
    );
    let found = function_lengths(&text);
    assert_eq!(found, [("short".to_string(), 2), ("long".to_string(), FUNCTION_LINES_MAX + 2)]);
}
