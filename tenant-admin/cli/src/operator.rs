//! `writ admin operator`: the named people who run Writ, their roles and sessions. A session's
//! credential (`wos_…`) is a bearer token of the admin API like the shared operator token, and
//! every act made with it is recorded under the operator's name.

use clap::Subcommand;
use reqwest::Method;
use writ_api::dto::{
    CloseOperatorSessionsRequest, OpenOperatorSessionRequest, OperatorList, OperatorSessionAnswer, OperatorWhoAmI,
    SetOperatorRequest,
};
use writ_api::operator::{ConsoleSignInV1, OperatorRole, OperatorV1, SignInV1};
use writ_client::AdminClient;

use super::{failed, parse_duration_s, print_table, show, Failure, Output};

#[derive(Debug, Subcommand)]
pub enum OperatorCmd {
    /// Create or change an operator: viewer reads; operator configures and cancels; approver
    /// decides operations and authorization requests; admin does everything.
    Set {
        name: String,
        #[arg(long, value_parser = parse_role)]
        role: OperatorRole,
        /// The one tenant (name or id) the operator works on (default: the whole cluster).
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        display_name: Option<String>,
        /// The OpenID provider the operator signs in with (issuer URL), with --sign-in-subject.
        #[arg(long, requires = "sign_in_subject")]
        sign_in_issuer: Option<String>,
        /// The operator's `sub` at that provider.
        #[arg(long, requires = "sign_in_issuer")]
        sign_in_subject: Option<String>,
    },
    List,
    Show {
        name: String,
    },
    /// Remove an operator and close its sessions.
    Remove {
        name: String,
    },
    /// Open a session for an operator and print its credential (shown once).
    Session {
        name: String,
        /// Lifetime (e.g. 8h; at most 12h).
        #[arg(long, value_parser = parse_duration_s)]
        ttl: Option<u64>,
        /// How long it may go unused before it ends (e.g. 30m; default: no idle limit).
        #[arg(long, value_parser = parse_duration_s)]
        idle: Option<u64>,
    },
    /// Close one session of an operator, or all of them (sign out everywhere).
    SignOut {
        name: String,
        #[arg(long)]
        session: Option<String>,
    },
    /// Who the credential in use is.
    Whoami,
    /// The OpenID provider operators sign in to the console with.
    #[command(subcommand)]
    Provider(ProviderCmd),
}

#[derive(Debug, Subcommand)]
pub enum ProviderCmd {
    /// Set it: its issuer URL and the console's client id there (a public client, PKCE).
    Set {
        #[arg(long)]
        issuer: String,
        #[arg(long)]
        client_id: String,
        /// Let the provider live at a loopback or private address.
        #[arg(long)]
        allow_private_network: bool,
    },
    Show,
}

fn parse_role(s: &str) -> Result<OperatorRole, String> {
    s.parse::<OperatorRole>().map_err(|r| r.message)
}

fn print_operators(list: &[OperatorV1]) {
    let rows = list
        .iter()
        .map(|o| {
            let sign_in = o.sign_in.as_ref().map_or("-".to_string(), |s| format!("{} {}", s.issuer, s.subject));
            vec![o.name.clone(), o.role.as_str().into(), o.tenant_id.clone().unwrap_or("*".into()), sign_in]
        })
        .collect();
    print_table(&["OPERATOR", "ROLE", "TENANT", "SIGN-IN"], rows);
}

pub(super) async fn operator_cmd(c: &AdminClient, out: Output, cmd: &OperatorCmd) -> Result<(), Failure> {
    match cmd {
        OperatorCmd::Set { name, role, tenant, display_name, sign_in_issuer, sign_in_subject } => {
            let sign_in = sign_in_issuer
                .as_ref()
                .zip(sign_in_subject.as_ref())
                .map(|(issuer, subject)| SignInV1 { issuer: issuer.clone(), subject: subject.clone() });
            let request = SetOperatorRequest {
                name: name.clone(),
                role: *role,
                tenant: tenant.clone(),
                display_name: display_name.clone(),
                sign_in,
            };
            let set: OperatorV1 = c.call(Method::PUT, "/v1/operators", Some(&request)).await.map_err(failed)?;
            show(out, &set, |o| print_operators(std::slice::from_ref(o)))
        }
        OperatorCmd::List => {
            let list: OperatorList = c.call(Method::GET, "/v1/operators", None::<&()>).await.map_err(failed)?;
            show(out, &list, |l| print_operators(&l.operators))
        }
        OperatorCmd::Show { name } => {
            let path = format!("/v1/operators/{name}");
            let one: OperatorV1 = c.call(Method::GET, &path, None::<&()>).await.map_err(failed)?;
            show(out, &one, |o| print_operators(std::slice::from_ref(o)))
        }
        OperatorCmd::Remove { name } => {
            let path = format!("/v1/operators/{name}");
            let gone: OperatorV1 = c.call(Method::DELETE, &path, None::<&()>).await.map_err(failed)?;
            show(out, &gone, |o| say!("removed operator {}", o.name))
        }
        OperatorCmd::Session { name, ttl, idle } => {
            let path = format!("/v1/operators/{name}/sessions");
            let request = OpenOperatorSessionRequest { ttl_s: *ttl, idle_s: *idle };
            let answer: OperatorSessionAnswer = c.call(Method::POST, &path, Some(&request)).await.map_err(failed)?;
            show(out, &answer, |a| say!("{}", a.credential))
        }
        OperatorCmd::SignOut { name, session } => {
            let path = format!("/v1/operators/{name}/sessions/close");
            let request = CloseOperatorSessionsRequest { session_id: session.clone() };
            let answer: serde_json::Value = c.call(Method::POST, &path, Some(&request)).await.map_err(failed)?;
            show(out, &answer, |_| say!("signed {name} out"))
        }
        OperatorCmd::Provider(ProviderCmd::Set { issuer, client_id, allow_private_network }) => {
            let provider = ConsoleSignInV1 {
                issuer: issuer.clone(),
                client_id: client_id.clone(),
                allow_private_network: *allow_private_network,
            };
            let set: ConsoleSignInV1 =
                c.call(Method::PUT, "/v1/console/sign-in", Some(&provider)).await.map_err(failed)?;
            show(out, &set, |p| say!("operators sign in at {} as client {}", p.issuer, p.client_id))
        }
        OperatorCmd::Provider(ProviderCmd::Show) => {
            let p: ConsoleSignInV1 = c.call(Method::GET, "/v1/console/sign-in", None::<&()>).await.map_err(failed)?;
            show(out, &p, |p| say!("operators sign in at {} as client {}", p.issuer, p.client_id))
        }
        OperatorCmd::Whoami => {
            let me: OperatorWhoAmI = c.call(Method::GET, "/v1/operators/me", None::<&()>).await.map_err(failed)?;
            show(out, &me, |m| {
                say!("{} ({}) on {}", m.actor, m.role.as_str(), m.tenant_id.as_deref().unwrap_or("the whole cluster"))
            })
        }
    }
}
