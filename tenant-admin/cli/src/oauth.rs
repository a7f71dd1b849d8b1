//! `writ admin oauth`: a tenant's own authorization server — its clients and the authorization
//! requests operators decide.

use clap::Subcommand;
use writ_api::dto::{AuthRequestList, OAuthClientList, OAuthClientRequest, RemoveOAuthClientRequest};
use writ_api::oauth::{OAuthClientV1, OAuthSettingsV1};
use writ_client::AdminClient;

use super::{failed, print_table, show, Failure, Output, EXIT_USAGE};

#[derive(Debug, Subcommand)]
pub enum OAuthCmd {
    /// Clients of the tenant's authorization server.
    #[command(subcommand)]
    Client(ClientCmd),
    /// Authorization requests waiting for an operator.
    #[command(subcommand)]
    Request(RequestCmd),
    /// Show, or change, the tenant's delegation depth and the claim naming its principals.
    Settings {
        #[arg(long)]
        tenant: String,
        /// How many delegation hops (token exchange, delegate) a token chain may have (0..=8).
        #[arg(long)]
        delegation_depth_max: Option<u32>,
        /// The claim of the tenant's own issuers' tokens that names the principal (default `sub`).
        #[arg(long)]
        principal_claim: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClientCmd {
    /// Register (or replace) a client acting as a principal. A client id that is an https URL,
    /// given without redirect URIs or keys, is read from its client ID metadata document.
    Set {
        #[arg(long)]
        tenant: String,
        client_id: String,
        /// The principal (name or id) it acts as.
        #[arg(long)]
        principal: String,
        /// The most it may be given (repeatable; default: the principal's scopes).
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// A redirect URI of the code flow (repeatable).
        #[arg(long = "redirect-uri")]
        redirect_uris: Vec<String>,
        /// A file holding its public keys (JWKS) for private_key_jwt.
        #[arg(long)]
        jwks_file: Option<std::path::PathBuf>,
        #[arg(long)]
        name: Option<String>,
        /// Let the metadata document live at a loopback or private address.
        #[arg(long)]
        allow_private_network: bool,
    },
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Remove a client with its open requests and refresh tokens.
    Remove {
        #[arg(long)]
        tenant: String,
        client_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum RequestCmd {
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Approve a request: the browser that made it gets its code.
    Approve {
        #[arg(long)]
        tenant: String,
        request: String,
    },
    /// Deny a request: the client is told `access_denied`.
    Deny {
        #[arg(long)]
        tenant: String,
        request: String,
    },
}

fn print_clients(list: &[OAuthClientV1]) {
    let rows = list
        .iter()
        .map(|c| {
            let flows = match (c.redirect_uris.is_empty(), c.jwks.is_none()) {
                (false, false) => "code, client_credentials",
                (false, true) => "code",
                _ => "client_credentials",
            };
            vec![c.client_id.clone(), c.principal_id.clone(), flows.to_string()]
        })
        .collect();
    print_table(&["CLIENT", "PRINCIPAL", "FLOWS"], rows);
}

pub(super) async fn oauth_cmd(c: &AdminClient, out: Output, cmd: &OAuthCmd) -> Result<(), Failure> {
    match cmd {
        OAuthCmd::Client(cmd) => client_cmd(c, out, cmd).await,
        OAuthCmd::Request(cmd) => request_cmd(c, out, cmd).await,
        OAuthCmd::Settings { tenant, delegation_depth_max, principal_claim } => {
            let path = format!("/v1/tenants/{tenant}/oauth/settings");
            let mut settings: OAuthSettingsV1 =
                c.call(reqwest::Method::GET, &path, None::<&()>).await.map_err(failed)?;
            if delegation_depth_max.is_some() || principal_claim.is_some() {
                settings.delegation_depth_max = delegation_depth_max.unwrap_or(settings.delegation_depth_max);
                if let Some(claim) = principal_claim {
                    settings.principal_claim = (claim != "sub").then(|| claim.clone());
                }
                settings = c.call(reqwest::Method::PUT, &path, Some(&settings)).await.map_err(failed)?;
            }
            show(out, &settings, |s| {
                let claim = s.principal_claim.as_deref().unwrap_or("sub");
                say!("delegation depth at most {}; principals named by claim '{claim}'", s.delegation_depth_max)
            })
        }
    }
}

async fn client_cmd(c: &AdminClient, out: Output, cmd: &ClientCmd) -> Result<(), Failure> {
    match cmd {
        ClientCmd::Set {
            tenant,
            client_id,
            principal,
            scopes,
            redirect_uris,
            jwks_file,
            name,
            allow_private_network,
        } => {
            let jwks = match jwks_file {
                Some(path) => Some(std::fs::read_to_string(path).map_err(|e| Failure {
                    exit: EXIT_USAGE,
                    message: format!("cannot read {}: {e}", path.display()),
                })?),
                None => None,
            };
            let request = OAuthClientRequest {
                client_id: client_id.clone(),
                principal: principal.clone(),
                scopes: scopes.clone(),
                redirect_uris: (!redirect_uris.is_empty()).then(|| redirect_uris.clone()),
                jwks,
                name: name.clone(),
                allow_private_network: *allow_private_network,
            };
            let path = format!("/v1/tenants/{tenant}/oauth/clients");
            let set: OAuthClientV1 = c.call(reqwest::Method::PUT, &path, Some(&request)).await.map_err(failed)?;
            show(out, &set, |c| print_clients(std::slice::from_ref(c)))
        }
        ClientCmd::List { tenant } => {
            let path = format!("/v1/tenants/{tenant}/oauth/clients");
            let list: OAuthClientList = c.call(reqwest::Method::GET, &path, None::<&()>).await.map_err(failed)?;
            show(out, &list, |l| print_clients(&l.clients))
        }
        ClientCmd::Remove { tenant, client_id } => {
            let path = format!("/v1/tenants/{tenant}/oauth/clients/remove");
            let request = RemoveOAuthClientRequest { client_id: client_id.clone() };
            let answer: serde_json::Value =
                c.call(reqwest::Method::POST, &path, Some(&request)).await.map_err(failed)?;
            show(out, &answer, |_| say!("removed client {client_id}"))
        }
    }
}

async fn request_cmd(c: &AdminClient, out: Output, cmd: &RequestCmd) -> Result<(), Failure> {
    let (tenant, path) = match cmd {
        RequestCmd::List { tenant } => {
            let path = format!("/v1/tenants/{tenant}/oauth/requests");
            let list: AuthRequestList = c.call(reqwest::Method::GET, &path, None::<&()>).await.map_err(failed)?;
            return show(out, &list, |l| {
                let rows = l
                    .requests
                    .iter()
                    .map(|r| vec![r.request_id.clone(), r.client_id.clone(), r.scopes.join(" "), r.status.clone()])
                    .collect();
                print_table(&["REQUEST", "CLIENT", "SCOPES", "STATUS"], rows);
            });
        }
        RequestCmd::Approve { tenant, request } => {
            (tenant, format!("/v1/tenants/{tenant}/oauth/requests/{request}/approve"))
        }
        RequestCmd::Deny { tenant, request } => (tenant, format!("/v1/tenants/{tenant}/oauth/requests/{request}/deny")),
    };
    let answer: serde_json::Value =
        c.call(reqwest::Method::POST, &path, Some(&serde_json::json!({}))).await.map_err(failed)?;
    show(out, &answer, |a| {
        say!("request {} of {tenant}: {}", a["request_id"].as_str().unwrap_or("?"), a["status"].as_str().unwrap_or("?"))
    })
}
