//! Writ's clients: everything that talks to a ledger node over the network or reads a clock.
//!
//! - [`ledger`]: the [`Ledger`] trait the edge and the admin service are written against, and
//!   [`HttpLedger`], its implementation over a node's client API, whose [`CallError`] says
//!   whether a failed request may have executed.
//! - [`verifier`]: token verification against a watch-fed replica of the ledger state.
//! - [`admin`]: [`AdminClient`], the one typed client of the admin API.
//! - [`tls`]: [`ClientTls`], the CA a client trusts and the role credential it presents.
//! - [`memory`]: [`MemoryLedger`], the ledger in one process (no Raft, no RocksDB) for router
//!   tests of whatever is written against [`Ledger`].
//!
//! The pure core (`writ-api`) stays free of IO; this crate is where IO meets it.

pub mod admin;
pub mod discovery;
pub mod egress;
pub mod files;
pub mod ledger;
pub mod memory;
pub mod numbered;
pub mod tls;
pub mod trace;
pub mod upstream;
pub mod verifier;

pub use admin::{AdminClient, AdminError};
pub use ledger::{
    query_as, unavailable, CallError, HttpLedger, Ledger, NodeHttp, WatchStream, FORWARDED_HEADER, LEDGER_CALL_TIMEOUT,
    TRACEPARENT_HEADER, TRACESTATE_HEADER, TRACE_HEADER,
};
pub use memory::MemoryLedger;
pub use tls::ClientTls;
pub use verifier::Verifier;

/// The HTTP status `reason` answers with — the catalog's (`ReasonCode::http_status`): the one
/// mapping the node, the edge and the admin API answer by.
pub fn http_status(reason: writ_api::ReasonCode) -> reqwest::StatusCode {
    reqwest::StatusCode::from_u16(reason.http_status()).expect("the reason catalog holds valid HTTP statuses")
}

/// The value of cookie `name` in a request's headers (exact name; the first one).
pub fn cookie<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(reqwest::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then_some(v))
}

/// A rejection as an HTTP answer: its reason's status and the JSON error body.
pub fn http_answer(r: &writ_api::Rejection) -> (reqwest::StatusCode, writ_api::dto::ErrorBody) {
    let body = writ_api::dto::ErrorBody {
        reason: r.reason,
        code: r.reason.number(),
        message: r.message.clone(),
        leader_hint: None,
    };
    (http_status(r.reason), body)
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it). The ledger never
/// calls this: the leader stamps commands, and `apply` uses the stamp.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_reason_answers_with_a_valid_http_status() {
        for reason in writ_api::ReasonCode::ALL {
            assert!((400..=599).contains(&super::http_status(*reason).as_u16()), "{reason}");
        }
    }
}
