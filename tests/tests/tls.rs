//! Mutual TLS on a node's listener: a 3-node cluster whose Raft and client traffic is all
//! mTLS; a client without a certificate from the cluster CA is refused at the handshake.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType};
use writ_node::config::{NodeConfig, TlsConfig};
use writ_node::ledger::RaftSettings;
use writ_tests::procs::{free_port, TEST_OPERATOR_TOKEN};

struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "writ test CA");
        let key = KeyPair::generate().expect("ca key");
        let cert = params.self_signed(&key).expect("ca cert");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).expect("write ca");
        Pki { dir, ca_pem: cert.pem(), issuer: Issuer::new(params, key) }
    }

    /// Issues a node certificate valid for 127.0.0.1 as both server and client.
    fn issue(&self, name: &str) -> TlsConfig {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let cert_path = self.dir.path().join(format!("{name}.pem"));
        let key_path = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        TlsConfig { cert: cert_path, key: key_path, ca: self.dir.path().join("ca.pem") }
    }
}

fn client(tls: Option<&TlsConfig>, ca_pem: &str) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("ca")]);
    if let Some(t) = tls {
        let mut pem = std::fs::read(&t.cert).expect("cert");
        pem.extend(std::fs::read(&t.key).expect("key"));
        b = b.identity(reqwest::Identity::from_pem(&pem).expect("identity"));
    }
    b.build().expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_cluster_replicates_and_refuses_clients_without_a_certificate() {
    writ_tests::init_test_log();
    let pki = Pki::new();
    let data = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let members: std::collections::BTreeMap<u64, String> =
        ports.iter().enumerate().map(|(i, p)| (i as u64 + 1, format!("https://127.0.0.1:{p}"))).collect();
    let mut nodes = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let id = i as u64 + 1;
        let cfg = NodeConfig {
            node_id: id,
            listen: format!("127.0.0.1:{port}").parse().expect("addr"),
            advertise_url: None,
            data_dir: data.path().join(format!("n{id}")),
            operator_token: TEST_OPERATOR_TOKEN.into(),
            bootstrap: id == 1,
            members: members.clone(),
            raft: RaftSettings { heartbeat_ms: 100, election_min_ms: 800, election_max_ms: 1600, ..Default::default() },
            tls: Some(pki.issue(&format!("node{id}"))),
            authority: writ_node::config::AuthorityConfig {
                signing_key_file: data.path().join(format!("n{id}/signing-key.pem")),
                token_audience: writ_node::config::TOKEN_AUDIENCE_DEFAULT.into(),
            },
        };
        nodes.push(writ_node::start_node(&cfg).await.expect("start tls node"));
    }
    let operator = pki.issue("operator");
    let good = client(Some(&operator), &pki.ca_pem);
    let url = nodes[1].url.clone();
    assert!(url.starts_with("https://"));
    // A write through a follower: forwarded to the leader over mTLS, replicated over mTLS.
    writ_tests::eventually("a create through mTLS", Duration::from_secs(30), || {
        let good = good.clone();
        let url = url.clone();
        async move {
            let r = good
                .post(format!("{url}/v1/tenants"))
                .bearer_auth(TEST_OPERATOR_TOKEN)
                .json(&serde_json::json!({"name": "secure"}))
                .send()
                .await
                .ok()?;
            (r.status().as_u16() == 201).then_some(())
        }
    })
    .await;
    for n in &nodes {
        let u = n.url.clone();
        writ_tests::eventually("replicated to every node", Duration::from_secs(20), || {
            let good = good.clone();
            let u = u.clone();
            async move {
                let body =
                    serde_json::json!({"query": {"query": "get_tenant", "tenant": "secure"}, "consistency": "stale"});
                let r = good.post(format!("{u}/client/query")).json(&body).send().await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;
    }
    // No client certificate: the handshake is refused, nothing is served.
    let anonymous = client(None, &pki.ca_pem);
    assert!(
        anonymous.get(format!("{url}/healthz")).send().await.is_err(),
        "server accepted a client without a certificate"
    );
    for n in nodes {
        n.shutdown().await;
    }
}
