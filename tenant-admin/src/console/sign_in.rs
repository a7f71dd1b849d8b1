//! Signing in to the desk through the cluster's OpenID provider (authorization code with PKCE
//! S256, a public client): the provider's answer comes back to `/console/callback` with the
//! state this browser was given, the code is redeemed with the verifier only this browser's
//! sign-in cookie holds, the ID token is verified (keys, issuer, client, nonce, expiry), and
//! the operator who signs in as that subject of that issuer gets a new session.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use writ_api::operator::ConsoleSignInV1;
use writ_api::{ReasonCode, Rejection};
use writ_client::discovery::{redeem_sign_in_code, sign_in_provider};
use writ_client::now_ms;

use super::{esc, keyed, page, refusal, session_cookie, SESSION_TTL_MS};
use crate::service::{AdminState, Shared};

/// The cookie holding a sign-in under way: state, nonce, PKCE verifier, expiry, and their MAC.
const SIGN_IN_COOKIE: &str = "writ_sign_in";
/// How long a sign-in may take at the provider.
const SIGN_IN_TTL_MS: u64 = 10 * 60_000;

fn failed(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::OPERATOR_SIGN_IN_FAILED, message)
}

fn provider(st: &AdminState) -> Result<ConsoleSignInV1, Rejection> {
    st.view
        .with_state(|s| s.operators.console_sign_in.clone())
        .ok_or_else(|| failed("no sign-in provider is set (writ admin operator provider set)"))
}

/// The sign-in page: a button to the provider (when one is set), and a form for a session
/// credential an admin handed out (`writ admin operator session`: a first admin, `writ dev`).
pub(crate) async fn sign_in_page(State(st): State<Shared>) -> Response {
    let provider = match provider(&st) {
        Ok(p) => format!(
            "<p>Sign in with your organization's account at <code>{}</code>.</p>\
             <p><a class=\"button\" href=\"/console/sign-in/start\">Sign in</a></p>",
            esc(&p.issuer)
        ),
        Err(r) => format!("<p><code>{}</code> {}</p>", r.reason.as_str(), esc(&r.message)),
    };
    let credential = "<form method=\"post\" action=\"/console/sign-in/credential\">\
        <label for=\"credential\">Or a session credential (<code>writ admin operator session</code>)</label>\
        <input type=\"password\" id=\"credential\" name=\"credential\" autocomplete=\"off\" required>\
        <p><button type=\"submit\">Sign in with the credential</button></p></form>";
    Html(page("Sign in", None, &format!("{provider}{credential}"))).into_response()
}

#[derive(Deserialize)]
pub(crate) struct CredentialForm {
    #[serde(default)]
    credential: String,
}

/// Signs in with a session credential posted from the sign-in page of this origin.
pub(crate) async fn with_credential(
    State(st): State<Shared>,
    headers: HeaderMap,
    axum::extract::Form(form): axum::extract::Form<CredentialForm>,
) -> Response {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let from_here = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) == Some(&format!("https://{host}"));
    if !from_here {
        let forged = Rejection::new(ReasonCode::CONSOLE_REQUEST_FORGED, "a sign-in comes from this console's page");
        return refusal(None, &forged);
    }
    let credential = form.credential.trim();
    match crate::operators::session_actor(&st, credential).await {
        Ok(crate::service::Actor::Operator { .. }) => {
            let session = session_cookie(credential, SESSION_TTL_MS);
            (StatusCode::SEE_OTHER, [(header::LOCATION, "/console".to_string()), (header::SET_COOKIE, session)])
                .into_response()
        }
        Ok(_) => refusal(None, &Rejection::new(ReasonCode::OPERATOR_SESSION_INVALID, "not a session credential")),
        Err(r) => refusal(None, &r),
    }
}

/// This listener's own callback URL, from the host the browser used.
fn callback_url(headers: &HeaderMap) -> Result<String, Rejection> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let plain = !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    if !plain {
        return Err(failed("the request names no usable host"));
    }
    Ok(format!("https://{host}/console/callback"))
}

fn random_hex() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Sends the browser to the provider, with a fresh state, nonce and PKCE challenge.
pub(crate) async fn start(State(st): State<Shared>, headers: HeaderMap) -> Response {
    match redirect_to_provider(&st, &headers).await {
        Ok(resp) => resp,
        Err(r) => refusal(None, &r),
    }
}

async fn redirect_to_provider(st: &AdminState, headers: &HeaderMap) -> Result<Response, Rejection> {
    let config = provider(st)?;
    let endpoints =
        sign_in_provider(&config.issuer, config.allow_private_network).await.map_err(|r| failed(r.message))?;
    let (state, nonce, verifier) = (random_hex(), random_hex(), random_hex());
    let expires = now_ms() + SIGN_IN_TTL_MS;
    let sealed = format!("{state}.{nonce}.{verifier}.{expires}");
    let cookie = format!(
        "{SIGN_IN_COOKIE}={sealed}.{}; Path=/console; Max-Age={}; Secure; HttpOnly; SameSite=Lax",
        keyed(st, "sign-in", &sealed),
        SIGN_IN_TTL_MS / 1000
    );
    let query = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", config.client_id.as_str()),
        ("redirect_uri", callback_url(headers)?.as_str()),
        ("scope", "openid"),
        ("state", state.as_str()),
        ("nonce", nonce.as_str()),
        ("code_challenge", writ_api::oauth::s256_challenge(&verifier).as_str()),
        ("code_challenge_method", "S256"),
    ])
    .map_err(|e| failed(e.to_string()))?;
    let location = format!("{}?{query}", endpoints.authorization_endpoint);
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, location), (header::SET_COOKIE, cookie)]).into_response())
}

#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// The provider's answer: a new session for the operator it names, then the desk.
pub(crate) async fn callback(State(st): State<Shared>, headers: HeaderMap, Query(answer): Query<Callback>) -> Response {
    match signed_in(&st, &headers, answer).await {
        Ok(credential) => {
            let session = session_cookie(&credential, SESSION_TTL_MS);
            let done = format!("{SIGN_IN_COOKIE}=; Path=/console; Max-Age=0; Secure; HttpOnly; SameSite=Lax");
            // A page of this origin moves on to the desk: a redirect chain that began at the
            // provider would not carry the SameSite=Strict cookie.
            let body =
                "<meta http-equiv=\"refresh\" content=\"0;url=/console\"><p><a href=\"/console\">To the desk</a></p>";
            let page = Html(page("Signed in", None, body));
            let mut resp = page.into_response();
            for c in [session, done] {
                if let Ok(v) = c.parse() {
                    resp.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            resp
        }
        Err(r) => refusal(None, &r),
    }
}

/// Checks the provider's answer against this browser's sign-in and opens the session of the
/// operator it names: the session's credential.
async fn signed_in(st: &AdminState, headers: &HeaderMap, answer: Callback) -> Result<String, Rejection> {
    if let Some(error) = answer.error {
        return Err(failed(format!("the provider answered {}", writ_api::audit::truncated(&error, 64))));
    }
    let sealed =
        writ_client::cookie(headers, SIGN_IN_COOKIE).ok_or_else(|| failed("this browser started no sign-in"))?;
    let (sealed, mac) = sealed.rsplit_once('.').ok_or_else(|| failed("the sign-in cookie is malformed"))?;
    if !crate::operators::same_digest(mac.as_bytes(), keyed(st, "sign-in", sealed).as_bytes()) {
        return Err(failed("the sign-in cookie was not made here"));
    }
    let parts: Vec<&str> = sealed.split('.').collect();
    let [state, nonce, verifier, expires] = parts[..] else { return Err(failed("the sign-in cookie is malformed")) };
    if expires.parse::<u64>().unwrap_or(0) <= now_ms() || answer.state.as_deref() != Some(state) {
        return Err(failed("the sign-in expired or its state does not match"));
    }
    let code = answer.code.ok_or_else(|| failed("the provider answered no code"))?;
    let config = provider(st)?;
    let endpoints =
        sign_in_provider(&config.issuer, config.allow_private_network).await.map_err(|r| failed(r.message))?;
    let redirect_uri = callback_url(headers)?;
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect_uri.as_str()),
        ("client_id", config.client_id.as_str()),
        ("code_verifier", verifier),
    ];
    let id_token =
        redeem_sign_in_code(&endpoints, config.allow_private_network, &form).await.map_err(|r| failed(r.message))?;
    let subject = writ_api::operator::verify_id_token(
        &id_token,
        &endpoints.jwks,
        &config.issuer,
        &config.client_id,
        nonce,
        now_ms(),
    )?;
    let operator = st.view.with_state(|s| s.operators.signing_in(&config.issuer, &subject).map(|o| o.name.clone()));
    let operator = operator.ok_or_else(|| {
        failed(format!("no operator signs in as '{}' of this provider", writ_api::audit::truncated(&subject, 128)))
    })?;
    let (answer, _) = crate::operators::open(st, &operator, SESSION_TTL_MS, super::SESSION_IDLE_MS).await?;
    Ok(answer.credential)
}
