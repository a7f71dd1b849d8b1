//! The desk's tenant pages: the tenants in the operator's scope, and each one's settings and
//! quotas against what it holds now, its principals and live tokens (revocable here), its
//! catalog versions with what each changed, its upstream MCP servers with tool changes waiting
//! for review (approvable here, bound to the digest shown), and its sites and devices with the
//! operation holding each device and its fencing token.

use axum::extract::{Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use writ_api::catalog::{ActionChange, CatalogDiff};
use writ_api::dto::{Query as LedgerQuery, TokenList};
use writ_api::ledger::{Command, Tenant};
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};

use super::pages::{in_scope, table, ChangeForm};
use super::{check_change, esc, page, refusal, utc, Desk};
use crate::service::{acting, query, submit, AdminState, Shared};

/// Most rows of each table on a tenant's page.
const ROWS_MAX: usize = 200;

pub(crate) async fn list(State(st): State<Shared>, desk: Desk) -> Response {
    let rows: Vec<String> = st.view.with_state(|s| {
        s.tenants
            .values()
            .filter(|t| in_scope(&desk, &t.id))
            .take(ROWS_MAX)
            .map(|t| {
                format!(
                    "<tr><td><a href=\"/console/tenants/{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
                    esc(&t.name),
                    esc(&t.name),
                    esc(t.display_name.as_deref().unwrap_or("")),
                    esc(&format!("{:?}", t.state).to_lowercase())
                )
            })
            .collect()
    });
    let body = table(&["Tenant", "Name", "State"], &rows, "No tenant is yours.");
    Html(page("Tenants", Some(&desk), &body)).into_response()
}

/// The tenant `name` (id or name) in the desk's scope.
fn tenant(st: &AdminState, desk: &Desk, name: &str) -> Result<Tenant, Rejection> {
    let found = st.view.with_state(|s| s.tenant(name).cloned());
    let t = found.ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, "no such tenant"))?;
    if !in_scope(desk, &t.id) {
        return Err(Rejection::new(ReasonCode::OPERATOR_SCOPE_VIOLATION, "this tenant is not yours"));
    }
    Ok(t)
}

pub(crate) async fn show(State(st): State<Shared>, Path(name): Path<String>, desk: Desk) -> Response {
    let shown = async {
        let t = tenant(&st, &desk, &name)?;
        let storage: writ_api::retention::TenantStorageV1 =
            query(&st, LedgerQuery::GetTenantStorage { tenant_id: t.id.clone() }, true).await?;
        let tokens: TokenList = query(
            &st,
            LedgerQuery::ListTokens {
                tenant_id: t.id.clone(),
                principal_id: None,
                after: None,
                limit: ROWS_MAX as u32,
            },
            true,
        )
        .await?;
        let (principals, devices, executors) =
            st.view.with_state(|s| (principals_html(s, &t), devices_html(s, &t), executors_html(s, &t)));
        let (catalogs, upstreams) = st.view.with_state(|s| (catalogs_html(s, &t), upstreams_html(s, &t, &desk)));
        let health = st.view.with_state(|s| health_html(s, &t));
        Ok::<_, Rejection>(format!(
            "<h2>Tool health</h2>{health}<h2>Settings and quotas</h2>{}<h2>What it holds</h2>{}\
             <h2>Principals</h2>{principals}<h2>Live tokens</h2>{}<h2>Catalog versions</h2>{catalogs}\
             <h2>Upstream MCP servers</h2>{upstreams}<h2>Sites and devices</h2>{devices}<h2>Executors</h2>{executors}",
            pairs_html(&serde_json::to_value(&t.settings).unwrap_or_default()),
            pairs_html(&serde_json::to_value(&storage).unwrap_or_default()),
            tokens_html(&st, &t, &tokens, &desk)
        ))
    };
    match shown.await {
        Ok(body) => Html(page(&format!("Tenant {name}"), Some(&desk), &body)).into_response(),
        Err(r) => refusal(Some(&desk), &r),
    }
}

/// An object's fields, one level deep (nested objects shown as their JSON).
fn pairs_html(value: &Value) -> String {
    let Some(fields) = value.as_object() else { return String::new() };
    let rows: String = fields
        .iter()
        .map(|(k, v)| {
            let shown = match v {
                Value::String(s) => s.clone(),
                Value::Null => "—".into(),
                other => other.to_string(),
            };
            format!("<dt>{}</dt><dd><code>{}</code></dd>", esc(k), esc(&shown))
        })
        .collect();
    format!("<dl>{rows}</dl>")
}

fn principals_html(s: &LedgerState, t: &Tenant) -> String {
    let rows: Vec<String> = of_tenant(&s.principals, t)
        .map(|p| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                esc(&format!("{:?}", p.kind).to_lowercase()),
                esc(&format!("{:?}", p.state).to_lowercase()),
                esc(&p.scopes.iter().cloned().collect::<Vec<_>>().join(" "))
            )
        })
        .collect();
    table(&["Principal", "Kind", "State", "Scopes"], &rows, "No principal.")
}

fn tokens_html(st: &AdminState, t: &Tenant, tokens: &TokenList, desk: &Desk) -> String {
    let now = writ_client::now_ms();
    let names = |id: &str| st.view.with_state(|s| s.principal(&t.id, id).map_or(id.to_string(), |p| p.name.clone()));
    let rows: Vec<String> = tokens
        .tokens
        .iter()
        .filter(|k| k.revoked_at_ms.is_none() && k.record.expires_at_ms > now)
        .map(|k| {
            format!(
                "<tr id=\"token-{jti}\"><td><code>{jti}</code></td><td>{}</td><td>{}</td><td>\
                 <form method=\"post\" action=\"/console/tenants/{}/tokens/{jti}/revoke\"><input type=\"hidden\" \
                 name=\"csrf\" value=\"{}\"><button type=\"submit\">Revoke</button></form></td></tr>",
                esc(&names(&k.record.principal_id)),
                utc(k.record.expires_at_ms),
                esc(&t.name),
                esc(&desk.csrf),
                jti = esc(&k.record.jti),
            )
        })
        .collect();
    table(&["Token", "Principal", "Expires (UTC)", "Revoke"], &rows, "No live token.")
}

/// The tenant's entries of a per-tenant map, at most [`ROWS_MAX`] of them.
fn of_tenant<'a, V>(
    map: &'a std::collections::BTreeMap<String, std::collections::BTreeMap<String, V>>,
    t: &Tenant,
) -> impl Iterator<Item = &'a V> {
    map.get(&t.id).into_iter().flat_map(|m| m.values()).take(ROWS_MAX)
}

/// A site's name (its id when it is gone).
fn site_name<'a>(s: &'a LedgerState, t: &Tenant, site_id: &'a str) -> &'a str {
    s.sites.get(&t.id).and_then(|m| m.get(site_id)).map_or(site_id, |x| x.name.as_str())
}

fn devices_html(s: &LedgerState, t: &Tenant) -> String {
    let leases = s.device_leases.get(&t.id);
    let rows: Vec<String> = of_tenant(&s.devices, t)
        .map(|d| {
            let site = site_name(s, t, &d.site_id);
            let held = leases
                .and_then(|m| m.get(&d.id))
                .map_or("free".to_string(), |l| format!("{} (fencing token {})", l.operation_id, l.fencing_token));
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                esc(&d.name),
                esc(site),
                esc(&d.device_class),
                esc(&held)
            )
        })
        .collect();
    table(&["Device", "Site", "Class", "Held by"], &rows, "No device.")
}

fn executors_html(s: &LedgerState, t: &Tenant) -> String {
    let now = writ_client::now_ms();
    let presence = s.executor_presence.get(&t.id);
    let rows: Vec<String> = of_tenant(&s.executors, t)
        .map(|x| {
            let site = site_name(s, t, &x.site_id);
            let state = x.revoked_at_ms.map_or("enrolled".to_string(), |at| format!("revoked {}", utc(at)));
            let p = presence.and_then(|m| m.get(&x.id));
            let liveness = p.map_or("never connected".to_string(), |p| p.liveness(now));
            let last = p.and_then(|p| p.last_dispatch.as_ref()).map_or("—".to_string(), |(op, at)| {
                format!("<a href=\"/console/operations/{}/{}\">{}</a> {} UTC", esc(&t.name), esc(op), esc(op), utc(*at))
            });
            format!(
                "<tr id=\"executor-{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{last}</td><td>{}</td><td>{}</td></tr>",
                esc(&x.id),
                esc(&x.id),
                esc(site),
                x.device_ids.len(),
                esc(&liveness),
                utc(x.cert.not_after_ms),
                esc(&state)
            )
        })
        .collect();
    let heads = ["Executor", "Site", "Devices", "Connection", "Last dispatch", "Certificate expires (UTC)", "State"];
    table(&heads, &rows, "No executor.")
}

/// Each tool of the tenant's current catalog as a state, with why (`writ_api::health`).
fn health_html(s: &LedgerState, t: &Tenant) -> String {
    let health = writ_api::health::tenant_health(s, &t.id, writ_client::now_ms());
    let rows: Vec<String> = health
        .tools
        .iter()
        .take(ROWS_MAX)
        .map(|h| {
            format!(
                "<tr id=\"tool-{}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&h.tool),
                esc(&h.tool),
                h.state.as_str(),
                esc(&h.why)
            )
        })
        .collect();
    table(&["Tool", "State", "Why"], &rows, "No catalog published.")
}

/// Catalog versions shown, newest first.
const VERSIONS_SHOWN: usize = 20;

/// The tenant's catalog versions, newest first, each with what it changed from the one before.
fn catalogs_html(s: &LedgerState, t: &Tenant) -> String {
    let versions: Vec<&writ_api::catalog::CatalogVersion> =
        s.catalogs.get(&t.id).into_iter().flat_map(|m| m.values().rev()).take(VERSIONS_SHOWN + 1).collect();
    let rows: Vec<String> = versions
        .iter()
        .take(VERSIONS_SHOWN)
        .enumerate()
        .map(|(i, v)| {
            let changes = versions.get(i + 1).map_or("first version".to_string(), |before| {
                let d = CatalogDiff::between(before, v);
                diff_text(&d.added, &d.removed, &d.changed)
            });
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                v.version,
                utc(v.published_at_ms),
                v.catalog.actions.len(),
                esc(&v.catalog.digest.chars().take(16).collect::<String>()),
                esc(&changes)
            )
        })
        .collect();
    table(&["Version", "Published (UTC)", "Actions", "Digest", "Changes"], &rows, "No catalog published.")
}

/// A diff in words: `+added −removed ~changed (fields)`.
fn diff_text(added: &[String], removed: &[String], changed: &[ActionChange]) -> String {
    let mut parts: Vec<String> = added.iter().map(|a| format!("+{a}")).collect();
    parts.extend(removed.iter().map(|r| format!("−{r}")));
    parts.extend(changed.iter().map(|c| format!("~{} ({})", c.id, c.fields.join(", "))));
    if parts.is_empty() {
        "no action changed".into()
    } else {
        parts.join(" ")
    }
}

/// The tenant's upstreams: what is pinned, which edges' fuses are open, and a tool change
/// waiting for review with its diff and an approval bound to the pending set's digest.
fn upstreams_html(s: &LedgerState, t: &Tenant, desk: &Desk) -> String {
    let rows: Vec<String> = of_tenant(&s.upstreams, t)
        .map(|u| {
            let view = writ_api::upstream::UpstreamView::of(u.clone());
            let review = match (&u.pending, &view.pending_diff) {
                (Some(p), Some(d)) => format!(
                    "{} <form method=\"post\" action=\"/console/tenants/{}/upstreams/{}/approve\"><input type=\"hidden\" \
                     name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"digest\" value=\"{}\">\
                     <button type=\"submit\">Approve these tools</button></form>",
                    esc(&diff_text(&d.added, &d.removed, &d.changed)),
                    esc(&t.name),
                    esc(&u.name),
                    esc(&desk.csrf),
                    esc(&p.digest)
                ),
                _ => "nothing waits".into(),
            };
            let open: Vec<&str> = u.fuses.iter().filter(|(_, f)| f.open).map(|(edge, _)| edge.as_str()).collect();
            format!(
                "<tr id=\"upstream-{}\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{review}</td></tr>",
                esc(&u.name),
                esc(&u.name),
                esc(&u.spec.url),
                u.pinned.as_ref().map_or(0, |p| p.tools.len()),
                if open.is_empty() { "none".to_string() } else { esc(&open.join(", ")) },
            )
        })
        .collect();
    table(&["Upstream", "URL", "Pinned tools", "Open fuses", "Tool changes"], &rows, "No upstream.")
}

/// An approval of an upstream's pending tools: the digest of the set the page showed.
#[derive(Deserialize)]
pub(crate) struct ReviewForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    digest: String,
}

/// Pins the upstream's pending tool set, as the signed-in operator, if it is still the set
/// whose digest the page showed (the ledger refuses UPSTREAM_DIGEST_MISMATCH otherwise).
pub(crate) async fn approve_upstream(
    State(st): State<Shared>,
    Path((name, upstream)): Path<(String, String)>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ReviewForm>,
) -> Response {
    let digest = form.digest;
    let approve = |tenant_id| Command::ApproveUpstreamTools { tenant_id, name: upstream, digest };
    change(&st, &desk, &headers, (&name, &form.csrf), approve).await
}

/// Revokes a token (and its delegated children), as the signed-in operator.
pub(crate) async fn revoke_token(
    State(st): State<Shared>,
    Path((name, jti)): Path<(String, String)>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ChangeForm>,
) -> Response {
    change(&st, &desk, &headers, (&name, form.csrf()), |tenant_id| Command::RevokeToken { tenant_id, jti }).await
}

/// Submits the command `make` forms for tenant `name` (in the desk's scope; the form carries
/// `csrf`) as the signed-in operator, then shows the tenant's page again.
async fn change(
    st: &Shared,
    desk: &Desk,
    headers: &HeaderMap,
    (name, csrf): (&str, &str),
    make: impl FnOnce(String) -> Command,
) -> Response {
    let done = async {
        check_change(desk, headers, csrf)?;
        let t = tenant(st, desk, name)?;
        acting(desk.actor.clone(), submit(st, make(t.id))).await.map(|_| ())
    };
    match done.await {
        Ok(()) => {
            (StatusCode::SEE_OTHER, [(header::LOCATION, format!("/console/tenants/{}", t_path(name)))]).into_response()
        }
        Err(r) => refusal(Some(desk), &r),
    }
}

/// A tenant name as a path segment (names are lower-case letters, digits and dashes).
fn t_path(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}
