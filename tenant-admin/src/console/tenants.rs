//! The desk's tenant pages: the tenants in the operator's scope, and each one's settings and
//! quotas against what it holds now, its principals and live tokens (revocable here), and its
//! sites and devices with the operation holding each device and its fencing token.

use axum::extract::{Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;
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
        Ok::<_, Rejection>(format!(
            "<h2>Settings and quotas</h2>{}<h2>What it holds</h2>{}<h2>Principals</h2>{principals}\
             <h2>Live tokens</h2>{}<h2>Sites and devices</h2>{devices}<h2>Executors</h2>{executors}",
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
    let rows: Vec<String> = s
        .principals
        .get(&t.id)
        .into_iter()
        .flat_map(|m| m.values())
        .take(ROWS_MAX)
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

fn devices_html(s: &LedgerState, t: &Tenant) -> String {
    let leases = s.device_leases.get(&t.id);
    let rows: Vec<String> = s
        .devices
        .get(&t.id)
        .into_iter()
        .flat_map(|m| m.values())
        .take(ROWS_MAX)
        .map(|d| {
            let site =
                s.sites.get(&t.id).and_then(|m| m.get(&d.site_id)).map_or(d.site_id.as_str(), |x| x.name.as_str());
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
    let rows: Vec<String> = s
        .executors
        .get(&t.id)
        .into_iter()
        .flat_map(|m| m.values())
        .take(ROWS_MAX)
        .map(|x| {
            let site =
                s.sites.get(&t.id).and_then(|m| m.get(&x.site_id)).map_or(x.site_id.as_str(), |v| v.name.as_str());
            let state = x.revoked_at_ms.map_or("enrolled".to_string(), |at| format!("revoked {}", utc(at)));
            format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&x.id),
                esc(site),
                x.device_ids.len(),
                utc(x.cert.not_after_ms),
                esc(&state)
            )
        })
        .collect();
    table(&["Executor", "Site", "Devices", "Certificate expires (UTC)", "State"], &rows, "No executor.")
}

/// Revokes a token (and its delegated children), as the signed-in operator.
pub(crate) async fn revoke_token(
    State(st): State<Shared>,
    Path((name, jti)): Path<(String, String)>,
    desk: Desk,
    headers: HeaderMap,
    Form(form): Form<ChangeForm>,
) -> Response {
    let done = async {
        check_change(&desk, &headers, form.csrf())?;
        let t = tenant(&st, &desk, &name)?;
        let revoke = Command::RevokeToken { tenant_id: t.id, jti };
        acting(desk.actor.clone(), submit(&st, revoke)).await.map(|_| ())
    };
    match done.await {
        Ok(()) => {
            (StatusCode::SEE_OTHER, [(header::LOCATION, format!("/console/tenants/{}", t_path(&name)))]).into_response()
        }
        Err(r) => refusal(Some(&desk), &r),
    }
}

/// A tenant name as a path segment (names are lower-case letters, digits and dashes).
fn t_path(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}
