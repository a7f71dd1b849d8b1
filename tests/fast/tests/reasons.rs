//! Issue 21: every reason of the catalog (`api/src/reason.rs`, SPEC D11) has a path that emits
//! it. The product's sources (not its tests) are read and each `ReasonCode::NAME` they name
//! is an emitting path; a code named nowhere is a catalogued promise nothing keeps, and fails
//! here (numbers are never reused, so such a code would have to be implemented, not removed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use writ_api::ReasonCode;

/// The crates whose code runs in Writ (tests, benches and the load generator excluded).
const PRODUCT_SOURCES: &[&str] =
    &["api/src", "api/client/src", "raft-store/src", "node/src", "mcp-edge/src", "tenant-admin/src"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A source file without its unit tests (the `#[cfg(test)]` module that ends a file, or a file
/// that is one); the catalog itself is not an emitting path.
fn product_text(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name == "reason.rs" {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    Some(match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    })
}

/// The codes of `catalog` that no text in `sources` names as `ReasonCode::CODE`.
fn unemitted(catalog: &[&str], sources: &[String]) -> Vec<String> {
    let named: BTreeSet<&str> = sources
        .iter()
        .flat_map(|s| s.match_indices("ReasonCode::").map(move |(at, m)| &s[at + m.len()..]))
        .map(|rest| rest.split(|c: char| !(c.is_ascii_uppercase() || c == '_')).next().unwrap_or_default())
        .collect();
    catalog.iter().filter(|c| !named.contains(*c)).map(|c| c.to_string()).collect()
}

#[test]
fn every_catalogued_reason_has_an_emitting_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in PRODUCT_SOURCES {
        rust_files(&root.join(dir), &mut files);
    }
    let sources: Vec<String> = files.iter().filter_map(|f| product_text(f)).collect();
    assert!(sources.len() > 50, "the product's sources were found ({} files)", sources.len());
    let catalog: Vec<&str> = ReasonCode::ALL.iter().map(|r| r.as_str()).collect();
    let missing = unemitted(&catalog, &sources);
    assert!(missing.is_empty(), "catalogued reasons nothing emits: {missing:?}");
}

#[test]
fn the_checker_sees_a_code_nothing_names() {
    let sources = vec![
        "Err(Rejection::new(ReasonCode::STALE_REVISION, msg))".to_string(),
        "use crate::ReasonCode::{self}; ReasonCode::INPUT_INVALID".to_string(),
    ];
    assert_eq!(
        unemitted(&["STALE_REVISION", "INPUT_INVALID", "PRECONDITION_FAILED"], &sources),
        ["PRECONDITION_FAILED"]
    );
    assert_eq!(unemitted(&["STALE_REVISION"], &["ReasonCode::STALE_REVISION_X".to_string()]), ["STALE_REVISION"]);
}
