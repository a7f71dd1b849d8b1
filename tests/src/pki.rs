//! The tests' cluster PKI: one CA per test process (in a temp dir kept for the process's life)
//! and credentials issued on demand with `writ_node::pki`, as `writ pki` issues them.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use writ_api::role::{Identity, Role};
use writ_client::{ClientTls, HttpLedger, NodeHttp};
use writ_node::config::TlsConfig;

/// The edge identity the harness itself uses to read `/client/*` (status, watch).
pub const HARNESS_EDGE: &str = "harness";

fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("pki temp dir");
        writ_node::pki::init(dir.path()).expect("test CA");
        dir
    })
    .path()
}

/// The test CA's certificate file.
pub fn ca_file() -> PathBuf {
    dir().join(writ_node::pki::CA_CERT_FILE)
}

/// The credential of `role`/`id` (issued for 127.0.0.1 and localhost on first use).
pub fn credential(role: Role, id: &str) -> TlsConfig {
    static ISSUING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = ISSUING.lock().unwrap_or_else(|e| e.into_inner());
    let identity = Identity::new(role, id).expect("identity");
    let files = writ_node::pki::credential(dir(), &identity);
    if !files.cert.exists() {
        let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
        writ_node::pki::issue(dir(), &identity, &hosts, 30).expect("issue test credential");
    }
    files
}

/// Trusts the test CA and presents `role`/`id`'s credential.
pub fn client_tls(role: Role, id: &str) -> ClientTls {
    let c = credential(role, id);
    ClientTls::with_identity(&c.ca, &c.cert, &c.key).expect("client tls")
}

/// Trusts the test CA and presents nothing (an operator with a token, a probe, an attacker).
pub fn trust() -> ClientTls {
    ClientTls::trusting(&ca_file()).expect("trust")
}

/// An HTTP client for node listeners: trusts the test CA, presents `identity` if given.
pub fn http(identity: Option<(Role, &str)>) -> reqwest::Client {
    let tls = identity.map_or_else(trust, |(role, id)| client_tls(role, id));
    tls.apply(reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20))).build().expect("http client")
}

/// The ledger at `urls` as an edge named `edge` sees it.
pub fn edge_ledger(urls: Vec<String>, edge: &str) -> HttpLedger {
    HttpLedger::with_http(urls, NodeHttp::with_tls(Some(&client_tls(Role::Edge, edge))))
}

/// Serves `app` over HTTPS on a loopback port (0: any), with a certificate of the test CA for
/// 127.0.0.1 and localhost; its port. Processes trust it with `SSL_CERT_FILE` = [`ca_file`].
pub async fn serve_https(app: axum::Router) -> u16 {
    use writ_node::tls::{spawn, Accept, ClientAuth, Drain, ServerTls};
    let files = credential(Role::Edge, "https-fixture");
    let credential = writ_client::tls::CredentialFiles::load(&files.cert, &files.key, None).expect("credential");
    let tls = ServerTls::new(credential, None, ClientAuth::None).expect("server tls");
    // Never drained: the server lives as long as the test process.
    let drain = Box::leak(Box::new(Drain::default()));
    let addr = "127.0.0.1:0".parse().expect("address");
    let (bound, _) = spawn(addr, app, Accept::tls(tls, "fixture"), drain, Duration::from_secs(1)).await.expect("bind");
    bound.port()
}
