//! The desk's audit page: a tenant's trail searched by principal, operation (event or command
//! kind), outcome, reason, trace and time, a page at a time, and the same search exported as
//! NDJSON.

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use writ_api::audit::{AuditFilter, AuditRecord};
use writ_api::dto::{AuditPage, Query as LedgerQuery, PAGE_LIMIT_DEFAULT};
use writ_api::{ReasonCode, Rejection};

use super::pages::in_scope;
use super::{esc, page, refusal, utc, Desk};
use crate::service::{query, AdminState, Shared};

/// The search form's fields (an empty field is no condition).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Search {
    tenant: String,
    principal: String,
    operation: String,
    outcome: String,
    reason: String,
    trace: String,
    /// `YYYY-MM-DD` or `YYYY-MM-DD hh:mm`, UTC: records from then on.
    since: String,
    after: Option<u64>,
}

/// `YYYY-MM-DD` or `YYYY-MM-DD hh:mm` (or with a `T`), UTC, as ms since the epoch.
fn utc_ms(text: &str) -> Result<u64, Rejection> {
    let bad = || Rejection::new(ReasonCode::INPUT_INVALID, "a time is YYYY-MM-DD or YYYY-MM-DD hh:mm (UTC)");
    let (date, clock) = text.split_once([' ', 'T']).unwrap_or((text, "00:00"));
    let num = |s: &str| s.parse::<u16>().map_err(|_| bad());
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next().unwrap_or(""))?, num(d.next().unwrap_or(""))?, num(d.next().unwrap_or(""))?);
    let (h, min) = clock.split_once(':').ok_or_else(bad)?;
    let month = time::Month::try_from(u8::try_from(m).map_err(|_| bad())?).map_err(|_| bad())?;
    let date = time::Date::from_calendar_date(i32::from(y), month, u8::try_from(day).map_err(|_| bad())?);
    let at = date.map_err(|_| bad())?.with_hms(num(h)? as u8, num(min)? as u8, 0).map_err(|_| bad())?;
    u64::try_from(at.assume_utc().unix_timestamp()).map(|s| s * 1000).map_err(|_| bad())
}

fn some(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

impl Search {
    /// The tenant (id) searched, in the desk's scope, and the filter.
    fn resolve(&self, st: &AdminState, desk: &Desk) -> Result<(String, AuditFilter), Rejection> {
        let reason = match some(&self.reason) {
            Some(r) => Some(
                serde_json::from_value::<ReasonCode>(serde_json::Value::String(r))
                    .map_err(|_| Rejection::new(ReasonCode::INPUT_INVALID, "no such reason code"))?,
            ),
            None => None,
        };
        st.view.with_state(|s| {
            let tenant = s.tenant(&self.tenant).filter(|t| in_scope(desk, &t.id));
            let tenant =
                tenant.ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, "choose one of your tenants"))?;
            // A principal by name or id.
            let principal =
                some(&self.principal).map(|p| s.principal(&tenant.id, &p).map_or(p, |found| found.id.clone()));
            let filter = AuditFilter {
                principal_id: principal,
                operation: some(&self.operation),
                outcome: some(&self.outcome),
                reason_code: reason,
                trace_id: some(&self.trace),
                since_ms: some(&self.since).map(|t| utc_ms(&t)).transpose()?,
                ..AuditFilter::default()
            };
            filter.check()?;
            Ok((tenant.id.clone(), filter))
        })
    }

    fn query_string(&self, after: Option<u64>) -> String {
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let pairs = [
            ("tenant", self.tenant.as_str()),
            ("principal", self.principal.as_str()),
            ("operation", self.operation.as_str()),
            ("outcome", self.outcome.as_str()),
            ("reason", self.reason.as_str()),
            ("trace", self.trace.as_str()),
            ("since", self.since.as_str()),
            ("after", after.as_str()),
        ];
        serde_urlencoded::to_string(pairs.iter().filter(|(_, v)| !v.is_empty()).collect::<Vec<_>>()).unwrap_or_default()
    }
}

pub(crate) async fn search(State(st): State<Shared>, desk: Desk, Query(search): Query<Search>) -> Response {
    let form = form_html(&st, &desk, &search);
    if search.tenant.is_empty() {
        return Html(page("Audit", Some(&desk), &form)).into_response();
    }
    let found = match search.resolve(&st, &desk) {
        Ok((tenant_id, filter)) => {
            let q = LedgerQuery::ListAudit { tenant_id, after: search.after, limit: PAGE_LIMIT_DEFAULT, filter };
            query::<AuditPage>(&st, q, false).await
        }
        Err(r) => Err(r),
    };
    match found {
        Ok(found) => {
            let next = found.next_cursor.map_or(String::new(), |n| {
                format!("<p><a href=\"/console/audit?{}\">Next page</a></p>", esc(&search.query_string(Some(n))))
            });
            let export = format!(
                "<p><a href=\"/console/audit/export?{}\">Export NDJSON</a></p>",
                esc(&search.query_string(None))
            );
            let body = format!("{form}{export}{}{next}", records_html(&found.records));
            Html(page("Audit", Some(&desk), &body)).into_response()
        }
        Err(r) => refusal(Some(&desk), &r),
    }
}

/// The search as NDJSON, every matching record, streamed (`GET /v1/…/audit/export`'s body).
pub(crate) async fn export(State(st): State<Shared>, desk: Desk, Query(search): Query<Search>) -> Response {
    match search.resolve(&st, &desk) {
        Ok((tenant_id, filter)) => crate::audit::export_stream(st, tenant_id, filter, search.after),
        Err(r) => refusal(Some(&desk), &r),
    }
}

fn form_html(st: &AdminState, desk: &Desk, search: &Search) -> String {
    let tenants: String = st.view.with_state(|s| {
        s.tenants
            .values()
            .filter(|t| in_scope(desk, &t.id))
            .take(500)
            .map(|t| {
                let chosen = if t.name == search.tenant || t.id == search.tenant { " selected" } else { "" };
                format!("<option value=\"{}\"{chosen}>{}</option>", esc(&t.name), esc(&t.name))
            })
            .collect()
    });
    let field = |name: &str, label: &str, value: &str| {
        format!(
            "<label for=\"{name}\">{label}</label><input type=\"text\" id=\"{name}\" name=\"{name}\" value=\"{}\">",
            esc(value)
        )
    };
    format!(
        "<form method=\"get\" action=\"/console/audit\" class=\"search\"><label for=\"tenant\">Tenant</label>\
         <select id=\"tenant\" name=\"tenant\">{tenants}</select>{}{}{}{}{}{}<button type=\"submit\">Search</button></form>",
        field("principal", "Principal", &search.principal),
        field("operation", "Operation", &search.operation),
        field("outcome", "Outcome", &search.outcome),
        field("reason", "Reason", &search.reason),
        field("trace", "Trace", &search.trace),
        field("since", "Since (UTC)", &search.since)
    )
}

pub(crate) fn records_html(records: &[AuditRecord]) -> String {
    if records.is_empty() {
        return "<p class=\"empty\">No record matches.</p>".into();
    }
    let rows: String = records
        .iter()
        .map(|r| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
                r.seq,
                utc(r.at_ms),
                esc(&r.domain),
                esc(&r.operation),
                esc(&r.outcome),
                r.reason_code.map_or("", |c| c.as_str()),
                esc(r.principal_id.as_deref().unwrap_or("")),
                esc(&r.authority.as_ref().map(|a| a.summary()).unwrap_or_default()),
                esc(&r.detail)
            )
        })
        .collect();
    format!(
        "<table><thead><tr><th scope=\"col\">#</th><th scope=\"col\">At (UTC)</th><th scope=\"col\">Domain</th>\
         <th scope=\"col\">Operation</th><th scope=\"col\">Outcome</th><th scope=\"col\">Reason</th>\
         <th scope=\"col\">Principal</th><th scope=\"col\">Authority</th><th scope=\"col\">Detail</th></tr></thead>\
         <tbody>{rows}</tbody></table>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_utc_dates() {
        assert_eq!(utc_ms("1970-01-02"), Ok(86_400_000));
        assert_eq!(utc_ms("2026-12-03 20:15"), Ok(1_796_328_900_000));
        assert_eq!(utc_ms("2026-12-03T20:15").map(utc), Ok("2026-12-03 20:15:00".to_string()));
        for bad in ["yesterday", "2026-13-01", "2026-02-30", "2026-12-03 25:00", "2026-12"] {
            assert_eq!(utc_ms(bad).unwrap_err().reason, ReasonCode::INPUT_INVALID, "{bad}");
        }
    }
}
