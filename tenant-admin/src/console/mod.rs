//! The operations desk: a console for the people who run Writ, served by the admin listener
//! under `/console`, beside `/v1` (same origin, HTTPS). Pages are rendered on the server; one
//! small script swaps in what changed when the ledger moves (server-sent events from this
//! node's replica), so there is no front-end build and nothing decided in the browser: every
//! role check is the admin API's and the ledger's, as for the CLI.
//!
//! Web security: the session is a cookie (`Secure`, `HttpOnly`, `SameSite=Strict`, path
//! `/console`) holding a named operator's session credential, made at sign-in only (no
//! fixation); every change is a POST carrying a CSRF token derived from the session, from this
//! origin; every answer carries a strict Content-Security-Policy (no inline script or style),
//! refuses framing and caching, and sends no referrer to other origins.

mod audit;
mod cluster;
mod evidence;
mod operation;
mod pages;
mod sign_in;
mod tenants;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use writ_api::{ReasonCode, Rejection};

use crate::service::{Actor, AdminState, Shared};

/// The session cookie: a named operator's session credential.
const SESSION_COOKIE: &str = "writ_session";
/// How long a console session lives.
const SESSION_TTL_MS: u64 = 8 * 3_600_000;
/// How long a console session may go unused.
const SESSION_IDLE_MS: u64 = 30 * 60_000;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/console", get(pages::now))
        .route("/console/now", get(pages::now_fragment))
        .route("/console/events", get(pages::events))
        .route("/console/sign-in", get(sign_in::sign_in_page))
        .route("/console/sign-in/start", get(sign_in::start))
        .route("/console/sign-in/credential", post(sign_in::with_credential))
        .route("/console/callback", get(sign_in::callback))
        .route("/console/sign-out", post(pages::sign_out))
        .route("/console/sign-out/everywhere", post(pages::sign_out_everywhere))
        .route("/console/oauth/{tenant}/{request}/{decision}", post(pages::decide_request))
        .route("/console/operations/{tenant}/{operation}", get(operation::show))
        .route("/console/audit", get(audit::search))
        .route("/console/audit/export", get(audit::export))
        .route("/console/cluster", get(cluster::show))
        .route("/console/tenants", get(tenants::list))
        .route("/console/tenants/{tenant}", get(tenants::show))
        .route("/console/tenants/{tenant}/tokens/{jti}/revoke", post(tenants::revoke_token))
        .route("/console/tenants/{tenant}/upstreams/{name}/approve", post(tenants::approve_upstream))
        .route("/console/operations/{tenant}/{operation}/{act}", post(operation::decide))
        .route("/console/operations/{tenant}/{operation}/evidence/{hash}", get(evidence::serve))
        .route("/console/static/desk.js", get(|| async { asset("text/javascript", include_str!("desk.js")) }))
        .route("/console/static/desk.css", get(|| async { asset("text/css", include_str!("desk.css")) }))
        .layer(middleware::map_response(secure_headers))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The headers every console answer carries.
async fn secure_headers(mut resp: Response) -> Response {
    let headers = resp.headers_mut();
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
               form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    for (name, value) in [
        ("content-security-policy", csp),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        // `same-origin`, not `no-referrer`: with no referrer, a browser sends `Origin: null` on
        // the desk's own form posts, and the origin check could not tell them from a forgery.
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// A signed-in operator at the desk: who, which session, the CSRF token of its forms.
pub(crate) struct Desk {
    pub(crate) actor: Actor,
    pub(crate) session_id: String,
    pub(crate) csrf: String,
}

/// A handler's signed-in desk; without one, the browser is sent to sign in.
impl axum::extract::FromRequestParts<Shared> for Desk {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, st: &Shared) -> Result<Desk, Response> {
        desk(st, &parts.headers).await
    }
}

/// The session cookie holding `credential` for `max_age_ms` (an empty one for 0: cleared).
pub(crate) fn session_cookie(credential: &str, max_age_ms: u64) -> String {
    format!(
        "{SESSION_COOKIE}={credential}; Path=/console; Max-Age={}; Secure; HttpOnly; SameSite=Strict",
        max_age_ms / 1000
    )
}

/// To the sign-in page, with the session cookie cleared.
pub(crate) fn to_sign_in() -> Response {
    let clear = session_cookie("", 0);
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/sign-in".to_string()), (header::SET_COOKIE, clear)])
        .into_response()
}

/// The desk of the caller's session cookie, or the way to the sign-in page.
pub(crate) async fn desk(st: &AdminState, headers: &HeaderMap) -> Result<Desk, Response> {
    let credential = writ_client::cookie(headers, SESSION_COOKIE).ok_or_else(to_sign_in)?;
    match crate::operators::session_actor(st, credential).await {
        Ok(actor @ Actor::Operator { .. }) => {
            let Actor::Operator { session_id, .. } = &actor else { unreachable!() };
            let (session_id, csrf) = (session_id.clone(), keyed(st, "csrf", session_id));
            Ok(Desk { actor, session_id, csrf })
        }
        _ => Err(to_sign_in()),
    }
}

/// A change's credentials: the form's CSRF token is the session's, and the request comes from
/// this origin (when the browser says where from).
pub(crate) fn check_change(desk: &Desk, headers: &HeaderMap, csrf: &str) -> Result<(), Rejection> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
    let same_origin = origin.is_none_or(|o| o == format!("https://{host}"));
    if !same_origin || !crate::operators::same_digest(csrf.as_bytes(), desk.csrf.as_bytes()) {
        return Err(Rejection::new(ReasonCode::CONSOLE_REQUEST_FORGED, "this change did not come from your console"));
    }
    Ok(())
}

/// HMAC-SHA256 (hex) of `purpose` and `text` under this node's console key (derived from its
/// CA secret): CSRF tokens and the sign-in cookie.
fn keyed(st: &AdminState, purpose: &str, text: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&st.ca_secret).expect("any key length");
    mac.update(b"writ-console\0");
    mac.update(purpose.as_bytes());
    mac.update(b"\0");
    mac.update(text.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// `text` safe in HTML text and attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: `title`, the signed-in operator's bar (when there is one), and `body`.
pub(crate) fn page(title: &str, desk: Option<&Desk>, body: &str) -> String {
    let bar = desk.map_or(String::new(), |d| {
        let role = match &d.actor {
            Actor::Operator { operator, .. } => operator.role.as_str(),
            Actor::BreakGlass => "admin",
        };
        format!(
            "<form class=\"bar\" method=\"post\" action=\"/console/sign-out\"><span>{} ({role})</span>\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button>\
             <button type=\"submit\" formaction=\"/console/sign-out/everywhere\">Sign out everywhere</button></form>",
            esc(&d.actor.name()),
            esc(&d.csrf)
        )
    });
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title} · Writ</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><link rel=\"stylesheet\" href=\"/console/static/desk.css\">\
         <script src=\"/console/static/desk.js\" defer></script></head><body><header><nav aria-label=\"Desk\">\
         <a href=\"/console\">Now</a> <a href=\"/console/tenants\">Tenants</a> <a href=\"/console/audit\">Audit</a> \
         <a href=\"/console/cluster\">Cluster</a></nav>{bar}</header><main><h1>{title}</h1>{body}</main></body></html>",
        title = esc(title)
    )
}

/// `ms` since the epoch as `YYYY-MM-DD hh:mm:ss` (UTC).
pub(crate) fn utc(ms: u64) -> String {
    let (days, secs) = ((ms / 86_400_000) as i64, (ms / 1000) % 86_400);
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let (day, month) = (doy - (153 * mp + 2) / 5 + 1, if mp < 10 { mp + 3 } else { mp - 9 });
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A refusal as a page: its reason code, message and status.
pub(crate) fn refusal(desk: Option<&Desk>, r: &Rejection) -> Response {
    let (status, _) = writ_client::http_answer(r);
    let body = format!(
        "<p role=\"alert\" class=\"refused\"><code>{}</code> {}</p><p><a href=\"/console\">Back to the desk</a></p>",
        r.reason.as_str(),
        esc(&r.message)
    );
    (status, Html(page("Refused", desk, &body))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_agent_controls_is_rendered_inert() {
        let hostile = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>&";
        let shown = esc(hostile);
        assert!(!shown.contains('<') && !shown.contains('>') && !shown.contains('"') && !shown.contains('\''));
        assert_eq!(shown.matches("&amp;").count(), 1, "{shown}");
    }

    #[test]
    fn times_are_shown_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    }

    #[test]
    fn cookies_are_read_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; writ_session_x=2; writ_session=wos_3"));
        assert_eq!(writ_client::cookie(&headers, SESSION_COOKIE), Some("wos_3"));
        assert_eq!(writ_client::cookie(&headers, "b"), None);
    }
}
