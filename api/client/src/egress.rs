//! Where Writ connects on a tenant's behalf (upstream MCP servers, their token endpoints): the
//! checks that keep a tenant's URL from being turned against the network Writ runs in.
//!
//! - Names are resolved by [`PublicResolver`]: a name that resolves to any address that is not
//!   public — loopback, private, link-local (cloud metadata), shared, unique-local,
//!   unspecified, multicast — or to one of Writ's own listeners is refused at connect time
//!   (so a DNS answer cannot turn an allowed URL), unless the operator allow-listed the name
//!   in `WRIT_UPSTREAM_PRIVATE_HOSTS` (comma-separated host names).
//! - A literal address is what the operator wrote ([`check_literal`]): loopback and private
//!   ones stay allowed, but never link-local, unspecified or multicast, nor Writ's own
//!   listeners ([`register_own_listener`]).
//! - Redirects are never followed (the client is built with `Policy::none()`), so an upstream
//!   cannot send Writ's request, and its credential, somewhere else.

use std::net::{IpAddr, SocketAddr};
use std::sync::{LazyLock, RwLock};

use writ_api::{ReasonCode, Rejection};

/// The environment variable naming host names that may resolve to private addresses.
pub const PRIVATE_HOSTS_ENV: &str = "WRIT_UPSTREAM_PRIVATE_HOSTS";

/// Addresses this process listens on (node, admin, probe, edge, executor endpoint).
static OWN_LISTENERS: LazyLock<RwLock<Vec<SocketAddr>>> = LazyLock::new(Default::default);

/// Most listeners remembered (a process has a handful).
const OWN_LISTENERS_MAX: usize = 64;

/// Records that this process listens on `addr`: no upstream URL may point at it.
pub fn register_own_listener(addr: SocketAddr) {
    let mut own = OWN_LISTENERS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if own.len() < OWN_LISTENERS_MAX && !own.contains(&addr) {
        own.push(addr);
    }
}

/// Whether `addr` is one of this process's listeners (one bound to every interface matches
/// any non-public address on its port).
pub fn is_own_listener(addr: SocketAddr) -> bool {
    let own = OWN_LISTENERS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    let any_local = |l: &SocketAddr| l.ip().is_unspecified() && !is_public(addr.ip());
    own.iter().any(|l| l.port() == addr.port() && (l.ip() == addr.ip() || any_local(l)))
}

/// Whether `ip` is a public unicast address (IPv4-mapped IPv6 judged as its IPv4 address).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space (RFC 6598)
                || (a == 198 && (b == 18 || b == 19)) // benchmarking (RFC 2544)
                || a >= 240)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00 // unique local
                    || (first & 0xffc0) == 0xfe80) // link-local
            }
        },
    }
}

fn refused(message: String) -> Rejection {
    Rejection::new(ReasonCode::UPSTREAM_FAILED, message)
}

pub use writ_api::token::split_origin;

/// The host and port of `url`'s authority (an IPv6 literal without its brackets).
fn host_port(url: &str) -> Option<(&str, Option<&str>)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            Some((h, after.strip_prefix(':')))
        }
        None => Some(authority.rsplit_once(':').map_or((authority, None), |(h, p)| (h, Some(p)))),
    }
}

/// The host of `url` as a literal address, if it is one.
pub fn literal_host(url: &str) -> Option<(IpAddr, Option<u16>)> {
    let (host, port) = host_port(url)?;
    Some((host.parse().ok()?, port.and_then(|p| p.parse().ok())))
}

/// Refuses a URL whose literal host Writ must never call: link-local, unspecified or multicast
/// addresses, and this process's own listeners. Names are checked when they resolve.
pub fn check_literal(url: &str) -> Result<(), Rejection> {
    let Some((ip, port)) = literal_host(url) else { return Ok(()) };
    let default_port = if url.starts_with("https://") { 443 } else { 80 };
    let addr = SocketAddr::new(ip, port.unwrap_or(default_port));
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local || ip.is_unspecified() || ip.is_multicast() {
        return Err(refused(format!("{ip} is a link-local, unspecified or multicast address: never an upstream")));
    }
    if is_own_listener(addr) {
        return Err(refused(format!("{addr} is one of Writ's own listeners: never an upstream")));
    }
    Ok(())
}

/// [`check_literal`], and for a name the addresses it resolves to now ([`vet_resolved`]): a
/// clear refusal before any request (the resolver checks again at every connect).
pub async fn check_url(url: &str) -> Result<(), Rejection> {
    check_literal(url)?;
    if literal_host(url).is_some() {
        return Ok(());
    }
    let (host, _) = host_port(url).ok_or_else(|| refused(format!("'{url}' names no host")))?;
    let found = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| refused(format!("'{host}' does not resolve: {e}")))?
        .collect();
    vet_resolved(host, found).map(|_| ())
}

/// Whether the operator allow-listed `host` to resolve to private addresses.
fn allow_listed(host: &str) -> bool {
    std::env::var(PRIVATE_HOSTS_ENV)
        .is_ok_and(|list| list.split(',').map(str::trim).any(|h| !h.is_empty() && h.eq_ignore_ascii_case(host)))
}

/// The addresses `host` resolves to, if every one may be called: public, or the host
/// allow-listed, and never one of this process's listeners.
pub fn vet_resolved(host: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Rejection> {
    if addrs.is_empty() {
        return Err(refused(format!("'{host}' resolves to no address")));
    }
    let private = addrs.iter().find(|a| !is_public(a.ip()));
    if let Some(a) = private.filter(|_| !allow_listed(host)) {
        return Err(refused(format!(
            "'{host}' resolves to {}, not a public address (allow it in {PRIVATE_HOSTS_ENV})",
            a.ip()
        )));
    }
    if let Some(a) = addrs.iter().find(|a| is_own_listener(**a)) {
        return Err(refused(format!("'{host}' resolves to {a}, one of Writ's own listeners")));
    }
    Ok(addrs)
}

/// A resolver that answers only addresses [`vet_resolved`] allows.
#[derive(Debug, Default, Clone, Copy)]
pub struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let vetted = vet_resolved(&host, found).map_err(|r| std::io::Error::other(r.message))?;
            Ok(Box::new(vetted.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass_and_literals_are_what_the_operator_wrote() {
        for private in
            ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0"]
        {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for private in ["::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::"] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        assert!(is_public("93.184.216.34".parse().unwrap()) && is_public("2606:2800:220:1::1".parse().unwrap()));
        let at = |ip: &str| vec![SocketAddr::new(ip.parse().unwrap(), 443)];
        assert!(vet_resolved("127.evil.example", at("127.0.0.1")).is_err(), "a name resolving to loopback");
        assert!(vet_resolved("meta.example", at("169.254.169.254")).is_err());
        assert!(vet_resolved("mixed.example", [at("93.184.216.34"), at("10.0.0.1")].concat()).is_err());
        assert!(vet_resolved("api.example", at("93.184.216.34")).is_ok());
        assert!(check_literal("http://127.0.0.1:9000/mcp").is_ok(), "an operator's literal loopback");
        assert!(check_literal("https://[fe80::1]/mcp").is_err());
        assert!(check_literal("http://169.254.169.254/latest").is_err());
        register_own_listener("127.0.0.1:47001".parse().unwrap());
        assert!(check_literal("http://127.0.0.1:47001/mcp").is_err(), "Writ's own listener");
        register_own_listener("0.0.0.0:47002".parse().unwrap());
        assert!(check_literal("https://127.0.0.1:47002/mcp").is_err(), "a listener on every interface");
        assert!(check_literal("http://127.0.0.1:47003/mcp").is_ok());
        assert_eq!(split_origin("https://idp.example/tenant/a"), ("https://idp.example", "/tenant/a"));
        assert_eq!(split_origin("https://idp.example"), ("https://idp.example", ""));
    }
}
