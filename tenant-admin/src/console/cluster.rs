//! The desk's cluster page: the members as the serving node sees them — leader, role, term,
//! how far each has applied, its ledger version, storage alarm and state digest — and the version the
//! cluster runs at (the oldest any member understands).

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use writ_api::dto::MemberStatus;

use super::{esc, page, refusal, Desk};
use crate::service::Shared;

pub(crate) async fn show(State(st): State<Shared>, desk: Desk) -> Response {
    if let crate::service::Actor::Operator { operator, .. } = &desk.actor {
        if operator.tenant_id.is_some() {
            let r = writ_api::Rejection::new(
                writ_api::ReasonCode::OPERATOR_SCOPE_VIOLATION,
                "the cluster is its cluster-wide operators'",
            );
            return refusal(Some(&desk), &r);
        }
    }
    let status = match st.ledger.cluster_status().await {
        Ok(s) => s,
        Err(e) => return refusal(Some(&desk), &e),
    };
    let newest =
        status.members.iter().filter_map(|m| m.status.as_ref().map(|s| s.last_applied_index.unwrap_or(0))).max();
    let version = status.members.iter().map(|m| m.status.as_ref().map_or(1, |s| s.ledger_version)).min().unwrap_or(1);
    let rows: String = status.members.iter().map(|m| member_html(m, status.leader, newest.unwrap_or(0))).collect();
    let leader = status.leader.map_or("none".to_string(), |l| l.to_string());
    let body = format!(
        "<p>Leader: node {leader}. The cluster runs ledger version {version} (this build's newest: {}).</p>\
         <table><thead><tr><th scope=\"col\">Node</th><th scope=\"col\">Address</th><th scope=\"col\">Role</th>\
         <th scope=\"col\">Term</th><th scope=\"col\">Applied</th><th scope=\"col\">Behind</th>\
         <th scope=\"col\">Ledger version</th><th scope=\"col\">Storage</th><th scope=\"col\">State digest</th></tr></thead><tbody>{rows}</tbody></table>",
        writ_api::ledger::LEDGER_VERSION
    );
    Html(page("Cluster", Some(&desk), &body)).into_response()
}

fn member_html(m: &MemberStatus, leader: Option<u64>, newest: u64) -> String {
    let Some(s) = &m.status else {
        let why = m.error.as_deref().unwrap_or("unreachable");
        return format!(
            "<tr><td>{}</td><td>{}</td><td colspan=\"7\">unreachable: {}</td></tr>",
            m.node_id,
            esc(&m.addr),
            esc(why)
        );
    };
    let applied = s.last_applied_index.unwrap_or(0);
    let role = if leader == Some(m.node_id) { "leader".to_string() } else { format!("{:?}", s.role).to_lowercase() };
    let digest: String = s.state_digest.chars().take(16).collect();
    format!(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{applied}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
        m.node_id,
        esc(&m.addr),
        esc(&role),
        s.term,
        newest.saturating_sub(applied),
        s.ledger_version,
        if s.storage_alarm { "short of space (alarm)" } else { "ok" },
        esc(&digest)
    )
}
