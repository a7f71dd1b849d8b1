//! A tenant issuer's keys, fetched by its URL: its discovery document (OpenID Connect discovery
//! at `{issuer}/.well-known/openid-configuration`, else RFC 8414 metadata at
//! `{origin}/.well-known/oauth-authorization-server{path}`), which must name the issuer, then
//! the key set at the document's `jwks_uri`.
//!
//! Every fetch is bounded: [`FETCH_TIMEOUT`] for the whole request, [`DOCUMENT_BYTES_MAX`] for
//! the body, no redirects, no proxy. Addresses follow `egress`'s rules, stricter unless the
//! operator allowed private networks for the issuer: a literal address must be public and a
//! name must resolve to public addresses only (checked at connect time, so a DNS answer cannot
//! turn an allowed URL); allowed, loopback and private addresses pass but never link-local ones
//! or Writ's own listeners.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use writ_api::token::{check_issuer_url, IssuerKeysV1, IssuerSourceV1, JWKS_BYTES_MAX};
use writ_api::{ReasonCode, Rejection};

use crate::egress::split_origin;

/// How long one fetch (connect, request, body) may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document or key set read.
pub const DOCUMENT_BYTES_MAX: usize = JWKS_BYTES_MAX;

fn failed(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::ISSUER_DISCOVERY_FAILED, message)
}

/// Fetches the keys of `source`'s issuer: discovery, then its `jwks_uri`.
pub async fn fetch_keys(source: &IssuerSourceV1) -> Result<IssuerKeysV1, Rejection> {
    source.validate()?;
    let client = client(source.allow_private_network)?;
    let document = discovery_document(&client, source).await?;
    let jwks_uri = document["jwks_uri"]
        .as_str()
        .ok_or_else(|| failed(format!("the discovery document of '{}' names no jwks_uri", source.issuer)))?;
    check_issuer_url(jwks_uri, source.allow_private_network)?;
    let jwks = fetch(&client, jwks_uri, source.allow_private_network)
        .await?
        .ok_or_else(|| failed(format!("{jwks_uri} answered 404")))?;
    let keys = IssuerKeysV1 { jwks_uri: jwks_uri.to_string(), jwks };
    // Checked here too, so a registration fails with the reason before anything is submitted.
    source.issuer_with(&keys)?;
    Ok(keys)
}

/// A client ID metadata document (the client's id is its URL): fetched like an issuer's
/// documents, it must name that very URL as its `client_id`.
pub async fn fetch_client_metadata(url: &str, allow_private: bool) -> Result<Value, Rejection> {
    let refused = |m: String| Rejection::new(ReasonCode::OAUTH_CLIENT_METADATA_FAILED, m);
    check_issuer_url(url, allow_private).map_err(|r| refused(r.message))?;
    let client = client(allow_private).map_err(|r| refused(r.message))?;
    let body = fetch(&client, url, allow_private).await.map_err(|r| refused(r.message))?;
    let body = body.ok_or_else(|| refused(format!("{url} answered 404")))?;
    let document: Value =
        serde_json::from_str(&body).map_err(|e| refused(format!("{url} is not a JSON document: {e}")))?;
    if document["client_id"].as_str() != Some(url) {
        return Err(refused(format!("{url} names client_id {}, not its own URL", document["client_id"])));
    }
    Ok(document)
}

/// What the console needs of the OpenID provider operators sign in with.
#[derive(Debug, Clone)]
pub struct SignInProvider {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    /// Its key set (JSON text), to verify ID tokens with.
    pub jwks: String,
}

/// Discovers the console's sign-in provider `issuer`: its endpoints and keys, each URL held to
/// the issuer's own rules.
pub async fn sign_in_provider(issuer: &str, allow_private: bool) -> Result<SignInProvider, Rejection> {
    let source =
        IssuerSourceV1 { issuer: issuer.to_string(), audience: String::new(), allow_private_network: allow_private };
    let client = client(allow_private)?;
    let document = discovery_document(&client, &source).await?;
    let endpoint = |name: &str| {
        let url = document[name].as_str().ok_or_else(|| failed(format!("'{issuer}' names no {name}")))?;
        check_issuer_url(url, allow_private)?;
        Ok::<String, Rejection>(url.to_string())
    };
    let (authorization_endpoint, token_endpoint, jwks_uri) =
        (endpoint("authorization_endpoint")?, endpoint("token_endpoint")?, endpoint("jwks_uri")?);
    let jwks =
        fetch(&client, &jwks_uri, allow_private).await?.ok_or_else(|| failed(format!("{jwks_uri} answered 404")))?;
    Ok(SignInProvider { authorization_endpoint, token_endpoint, jwks })
}

/// Redeems an authorization code at a sign-in provider's token endpoint (a public client with
/// PKCE): the ID token it answers.
pub async fn redeem_sign_in_code(
    provider: &SignInProvider,
    allow_private: bool,
    form: &[(&str, &str)],
) -> Result<String, Rejection> {
    let url = &provider.token_endpoint;
    check_literal(url, allow_private)?;
    let response = client(allow_private)?
        .post(url)
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(form).map_err(|e| failed(format!("the token request: {e}")))?)
        .send()
        .await
        .map_err(|e| failed(format!("{url}: {}", error_chain(&e))))?;
    let status = response.status();
    if response.content_length().is_some_and(|n| n > DOCUMENT_BYTES_MAX as u64) {
        return Err(failed(format!("{url} answered more than {DOCUMENT_BYTES_MAX} bytes")));
    }
    let body = response.bytes().await.map_err(|e| failed(format!("{url}: {e}")))?;
    if body.len() > DOCUMENT_BYTES_MAX || !status.is_success() {
        return Err(failed(format!("{url} answered {status}")));
    }
    let answer: Value = serde_json::from_slice(&body).map_err(|e| failed(format!("{url}: not JSON: {e}")))?;
    answer["id_token"].as_str().map(str::to_string).ok_or_else(|| failed(format!("{url} answered no id_token")))
}

/// The issuer's metadata: OpenID discovery first, RFC 8414 where that is absent; either must
/// name exactly this issuer (RFC 8414 §3.3, OpenID Discovery §4.3).
async fn discovery_document(client: &reqwest::Client, source: &IssuerSourceV1) -> Result<Value, Rejection> {
    let issuer = source.issuer.trim_end_matches('/');
    let (origin, path) = split_origin(issuer);
    let candidates = [
        format!("{issuer}/.well-known/openid-configuration"),
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
    ];
    for url in &candidates {
        let Some(body) = fetch(client, url, source.allow_private_network).await? else { continue };
        let document: Value =
            serde_json::from_str(&body).map_err(|e| failed(format!("{url} is not a JSON document: {e}")))?;
        if document["issuer"].as_str() != Some(source.issuer.as_str()) {
            return Err(failed(format!("{url} names issuer {}, not '{}'", document["issuer"], source.issuer)));
        }
        return Ok(document);
    }
    Err(failed(format!("'{}' serves no discovery document (tried {})", source.issuer, candidates.join(", "))))
}

/// An error with its causes (reqwest's own message omits why a connect failed).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text = format!("{text}: {cause}");
        next = cause.source();
    }
    text
}

/// GETs `url` as text: `None` for a 404, an error for any other non-success, a redirect, a
/// refused address, a timeout or a body over [`DOCUMENT_BYTES_MAX`].
async fn fetch(client: &reqwest::Client, url: &str, allow_private: bool) -> Result<Option<String>, Rejection> {
    check_literal(url, allow_private)?;
    let mut response = client.get(url).header("accept", "application/json").send().await.map_err(|e| {
        let why = if e.is_timeout() { "timed out".to_string() } else { error_chain(&e) };
        failed(format!("{url}: {why}"))
    })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if status.is_redirection() {
        return Err(failed(format!("{url} redirects ({status}): redirects are never followed")));
    }
    if !status.is_success() {
        return Err(failed(format!("{url} answered {status}")));
    }
    if response.content_length().is_some_and(|n| n > DOCUMENT_BYTES_MAX as u64) {
        return Err(failed(format!("{url} is larger than {DOCUMENT_BYTES_MAX} bytes")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(format!("{url}: {e}")))? {
        if body.len() + chunk.len() > DOCUMENT_BYTES_MAX {
            return Err(failed(format!("{url} is larger than {DOCUMENT_BYTES_MAX} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map(Some).map_err(|_| failed(format!("{url} is not UTF-8 text")))
}

/// A literal address in `url`: public, or (private networks allowed) anything `egress` lets an
/// operator's literal be.
fn check_literal(url: &str, allow_private: bool) -> Result<(), Rejection> {
    let refused = |r: Rejection| failed(r.message);
    crate::egress::check_literal(url).map_err(refused)?;
    match crate::egress::literal_host(url) {
        Some((ip, _)) if !allow_private && !crate::egress::is_public(ip) => {
            Err(failed(format!("{ip} is not a public address (the issuer does not allow private networks)")))
        }
        _ => Ok(()),
    }
}

fn client(allow_private: bool) -> Result<reqwest::Client, Rejection> {
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(IssuerResolver { allow_private }))
        .build()
        .map_err(|e| failed(format!("HTTP client: {e}")))
}

/// Resolves an issuer's names: public addresses only ([`crate::egress::vet_resolved`]) unless
/// private networks are allowed, and never one of this process's listeners.
#[derive(Debug, Clone, Copy)]
struct IssuerResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for IssuerResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (host, allow_private) = (name.as_str().to_string(), self.allow_private);
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let vetted = if allow_private {
                match found.iter().find(|a| crate::egress::is_own_listener(**a)) {
                    Some(a) => Err(failed(format!("'{host}' resolves to {a}, one of Writ's own listeners"))),
                    None => Ok(found),
                }
            } else {
                crate::egress::vet_resolved(&host, found)
            };
            let vetted = vetted.map_err(|r| std::io::Error::other(r.message))?;
            Ok(Box::new(vetted.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_private_addresses_need_the_operators_consent() {
        assert!(check_literal("https://10.0.0.1/jwks", false).is_err());
        assert!(check_literal("http://127.0.0.1:8080/jwks", false).is_err());
        assert!(check_literal("http://127.0.0.1:8080/jwks", true).is_ok());
        assert!(check_literal("http://169.254.169.254/latest", true).is_err(), "link-local never");
        assert!(check_literal("https://93.184.216.34/jwks", false).is_ok());
    }
}
