//! The dashboards and alert rules that ship under `deploy/` ask only for metrics Writ records
//! and documents (a renamed metric fails here, not in an operator's empty panel), and every
//! alert has its runbook section.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use writ_tests_fast::dashboard_queries;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The metric names `docs/metrics.md` documents.
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/metrics.md")).expect("docs/metrics.md");
    doc.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).map(str::to_string).collect()
}

/// `expr` without its label matchers (`{…}`) and grouping clauses (`by (…)`, `without (…)`):
/// what is left names series, not labels.
fn without_labels(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find(['{', '(']) {
        let (head, tail) = rest.split_at(i);
        let grouping = head.trim_end().ends_with(" by") || head.trim_end().ends_with(" without");
        out.push_str(head);
        if tail.starts_with('{') || grouping {
            let close = if tail.starts_with('{') { '}' } else { ')' };
            rest = tail.find(close).map_or("", |j| &tail[j + 1..]);
        } else {
            out.push('(');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The metric names a PromQL expression reads: its identifiers that name Writ's or the MCP
/// conventions' series, with a histogram's `_bucket`, `_sum` and `_count` taken off.
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let expr = &without_labels(expr);
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut in_quotes = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("writ_") || word.starts_with("mcp_") {
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| word.strip_suffix(s)).unwrap_or(&word);
            names.insert(base.to_string());
        }
        word.clear();
    }
    names
}

/// The `expr:` and `runbook:` values of the alert rules, by alert (the file is the
/// plain YAML of `promtool`: one rule per `- alert:` item).
fn alerts() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/writ-alerts.yml")).expect("alert rules");
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut in_expr = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            out.push((name.to_string(), String::new(), String::new()));
            in_expr = false;
        } else if let Some(expr) = trimmed.strip_prefix("expr: ") {
            in_expr = expr == "|";
            out.last_mut().expect("an alert").1.push_str(expr.trim_start_matches('|'));
        } else if in_expr && line.starts_with("          ") {
            out.last_mut().expect("an alert").1.push_str(trimmed);
        } else if let Some(runbook) = trimmed.strip_prefix("runbook: ") {
            out.last_mut().expect("an alert").2 = runbook.trim_matches('"').to_string();
            in_expr = false;
        } else {
            in_expr = false;
        }
    }
    out
}

#[test]
fn dashboards_and_alerts_read_only_documented_metrics() {
    let documented = documented();
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "four dashboards' queries: {}", queries.len());
    let dashboards: BTreeSet<&str> = queries.iter().map(|(d, ..)| d.as_str()).collect();
    assert_eq!(dashboards.len(), 4, "edge, ledger, executors, tenants: {dashboards:?}");
    let alerts = alerts();
    assert!(alerts.len() >= 10, "{alerts:?}");
    let exprs =
        queries.iter().map(|(d, p, e)| (format!("{d} / {p}"), e)).chain(alerts.iter().map(|(a, e, _)| (a.clone(), e)));
    for (what, expr) in exprs {
        let names = metrics_in(expr);
        assert!(!names.is_empty(), "{what}: reads no Writ metric: {expr}");
        for name in names {
            assert!(documented.contains(&name), "{what} reads `{name}`, which docs/metrics.md does not list");
        }
    }
}

#[test]
fn every_alert_has_its_runbook_section() {
    let runbook = std::fs::read_to_string(root().join("docs/runbook.md")).expect("docs/runbook.md");
    let sections: BTreeSet<String> =
        runbook.lines().filter_map(|l| l.strip_prefix("## ")).map(|h| h.trim().to_lowercase()).collect();
    for (alert, _, link) in alerts() {
        assert_eq!(link, format!("docs/runbook.md#{}", alert.to_lowercase()), "{alert}'s runbook annotation");
        assert!(sections.contains(&alert.to_lowercase()), "docs/runbook.md has no section for {alert}");
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    let promql = r#"histogram_quantile(0.99, sum by (le, mcp_label) (rate(writ_edge_request_seconds_bucket{method="writ_x", mcp_z="1"}[5m]))) / mcp_y_count"#;
    assert_eq!(metrics_in(promql).into_iter().collect::<Vec<_>>(), ["mcp_y", "writ_edge_request_seconds"]);
}
