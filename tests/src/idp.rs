//! A real OpenID provider run by the tests (the certified npm `oidc-provider`, installed by
//! `make nodedeps`, driven by `tests/node/oidc_provider.mjs`): a tenant's own IdP, and the
//! provider operators sign in to the console with.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The provider, running until dropped (its stdin closes with it).
pub struct OpenIdProvider {
    child: tokio::process::Child,
    pub issuer: String,
}

impl OpenIdProvider {
    /// Starts the provider on `port` (0: any) signing with key id `kid`; `client` is the
    /// client-credentials client's id, secret and scopes; `resources` the audiences it issues
    /// access tokens for; `console_redirect` adds the console's client `writ-console`.
    pub async fn start(
        port: u16,
        kid: &str,
        client: &[&str; 3],
        resources: &[&str],
        console_redirect: Option<&str>,
    ) -> OpenIdProvider {
        let modules = crate::tools::dir().join("oidc/node_modules");
        assert!(modules.join("oidc-provider").exists(), "oidc-provider is not installed: run `make nodedeps`");
        let script = format!("{}/node/oidc_provider.mjs", env!("CARGO_MANIFEST_DIR"));
        let mut command = tokio::process::Command::new(crate::tools::node());
        command.arg(script).arg(modules).args([&port.to_string(), kid]).args(client).args(resources);
        if let Some(redirect) = console_redirect {
            command.env("CONSOLE_REDIRECT", redirect);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the OpenID provider starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let line = line.expect("the provider reports its issuer").expect("stdout").expect("a line");
        let issuer =
            serde_json::from_str::<Value>(&line).expect("JSON")["issuer"].as_str().expect("issuer").to_string();
        OpenIdProvider { child, issuer }
    }

    pub fn port(&self) -> u16 {
        self.issuer.rsplit(':').next().and_then(|p| p.parse().ok()).expect("issuer port")
    }

    pub async fn stop(mut self) {
        self.child.kill().await.expect("the provider stops");
    }
}
