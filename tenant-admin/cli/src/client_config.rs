//! `writ admin client-config`: what an agent host's own configuration must contain to reach a
//! tenant's principal through a Writ edge — the MCP URL, the bearer header (by environment
//! variable, or a token issued on the spot), and the CA note when the edge's certificate is
//! private. One renderer per host, in the host's own file format; the table of which protocol
//! era and auth each host speaks is in docs/clients.md.

use std::path::Path;

use serde_json::json;

/// The agent hosts a configuration can be printed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Host {
    /// Claude Code (`claude mcp add`, or `.mcp.json`).
    ClaudeCode,
    /// Claude Desktop (`claude_desktop_config.json`, through `mcp-remote` for a bearer header).
    ClaudeDesktop,
    /// VS Code (`.vscode/mcp.json`; the token asked for once and kept by VS Code).
    Vscode,
    /// Cursor (`~/.cursor/mcp.json`).
    Cursor,
    /// OpenAI Codex (`~/.codex/config.toml`).
    Codex,
    /// Anything else: the URL, the header and the versions served.
    Generic,
}

/// Where the configuration gets the bearer token from.
pub enum Bearer<'a> {
    /// An environment variable the host's process sees.
    Env(&'a str),
    /// The token itself (issued by the command).
    Literal(&'a str),
}

/// The configuration for `host`: the server named `name` at `url` with `bearer`; `ca` is the
/// CA file clients must trust when the edge's certificate is not publicly trusted.
pub fn render(host: Host, name: &str, url: &str, bearer: &Bearer<'_>, ca: Option<&Path>) -> String {
    let header = match bearer {
        Bearer::Env(var) => format!("Bearer ${{{var}}}"),
        Bearer::Literal(token) => format!("Bearer {token}"),
    };
    let pretty = |v: serde_json::Value| serde_json::to_string_pretty(&v).expect("JSON");
    let mut out = match host {
        Host::ClaudeCode => {
            let file = json!({"mcpServers": {name: {"type": "http", "url": url, "headers": {"Authorization": header}}}});
            let header_arg = match bearer {
                Bearer::Env(var) => format!("\"Authorization: Bearer ${var}\""),
                Bearer::Literal(token) => format!("\"Authorization: Bearer {token}\""),
            };
            format!(
                "# Claude Code: run once (user scope), or put the JSON below in the project's .mcp.json\n\
                 claude mcp add --transport http --scope user {name} {url} --header {header_arg}\n\n{}\n",
                pretty(file)
            )
        }
        Host::ClaudeDesktop => {
            let file = json!({"mcpServers": {name: {
                "command": "npx",
                "args": ["-y", "mcp-remote", url, "--header", "Authorization:${WRIT_AUTH_HEADER}"],
                "env": {"WRIT_AUTH_HEADER": header}}}});
            format!(
                "# Claude Desktop: merge into claude_desktop_config.json (Settings > Developer > Edit Config);\n\
                 # its connectors UI takes OAuth only, so a bearer token goes through mcp-remote.\n{}\n",
                pretty(file)
            )
        }
        Host::Vscode => {
            let (value, inputs) = match bearer {
                Bearer::Env(var) => (format!("Bearer ${{env:{var}}}"), json!([])),
                Bearer::Literal(_) => (
                    "Bearer ${input:writ-token}".to_string(),
                    json!([{"type": "promptString", "id": "writ-token", "description": "Writ bearer token",
                             "password": true}]),
                ),
            };
            let file = json!({"servers": {name: {"type": "http", "url": url, "headers": {"Authorization": value}}},
                              "inputs": inputs});
            let mut text = format!("# VS Code: .vscode/mcp.json (or the user mcp.json)\n{}\n", pretty(file));
            if let Bearer::Literal(token) = bearer {
                text.push_str(&format!("# paste when VS Code asks for writ-token:\n# {token}\n"));
            }
            text
        }
        Host::Cursor => {
            let value = match bearer {
                Bearer::Env(var) => format!("Bearer ${{env:{var}}}"),
                Bearer::Literal(token) => format!("Bearer {token}"),
            };
            let file = json!({"mcpServers": {name: {"url": url, "headers": {"Authorization": value}}}});
            format!("# Cursor: ~/.cursor/mcp.json (or the project's .cursor/mcp.json)\n{}\n", pretty(file))
        }
        Host::Codex => {
            let auth = match bearer {
                Bearer::Env(var) => format!("bearer_token_env_var = \"{var}\""),
                Bearer::Literal(token) => format!("http_headers = {{ \"Authorization\" = \"Bearer {token}\" }}"),
            };
            format!("# Codex: ~/.codex/config.toml\n[mcp_servers.{name}]\nurl = \"{url}\"\n{auth}\n")
        }
        Host::Generic => format!(
            "MCP endpoint: {url} (Streamable HTTP)\n\
             Protocol versions: 2026-07-28 (stateless, _meta), and 2025-11-25, 2025-06-18, 2025-03-26 (initialize + Mcp-Session-Id)\n\
             Header on every request: Authorization: {header}\n"
        ),
    };
    if let Bearer::Env(var) = bearer {
        out.push_str(&format!(
            "# the token comes from ${var} in the host's environment: writ admin token issue --tenant … PRINCIPAL --audience {url}\n"
        ));
    }
    if let Some(ca) = ca {
        let var = match host {
            Host::Codex => "SSL_CERT_FILE",
            _ => "NODE_EXTRA_CA_CERTS",
        };
        out.push_str(&format!(
            "# the edge's certificate is issued by a private CA: start the host with {var}={}\n",
            ca.display()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://edge.example/mcp";

    #[test]
    fn every_host_gets_its_own_format_with_the_url_and_the_header() {
        for host in [Host::ClaudeCode, Host::ClaudeDesktop, Host::Vscode, Host::Cursor, Host::Codex, Host::Generic] {
            let text = render(host, "writ", URL, &Bearer::Env("WRIT_TOKEN"), None);
            assert!(text.contains(URL), "{host:?}: {text}");
            assert!(text.contains("WRIT_TOKEN"), "{host:?}: {text}");
            let issued = render(host, "writ", URL, &Bearer::Literal("tok.en"), Some(Path::new("/ca.pem")));
            assert!(issued.contains("tok.en") && issued.contains("/ca.pem"), "{host:?}: {issued}");
        }
        // The JSON ones parse as the host reads them (after the comment lines).
        let json_of = |text: &str| -> serde_json::Value {
            let body: String = text.lines().filter(|l| !l.starts_with('#') && !l.starts_with("claude ")).collect();
            serde_json::from_str(&body).expect("JSON")
        };
        let code = json_of(&render(Host::ClaudeCode, "writ", URL, &Bearer::Env("T"), None));
        assert_eq!(code["mcpServers"]["writ"]["type"], "http");
        assert_eq!(code["mcpServers"]["writ"]["headers"]["Authorization"], "Bearer ${T}");
        let vscode = json_of(&render(Host::Vscode, "writ", URL, &Bearer::Literal("x"), None));
        assert_eq!(vscode["servers"]["writ"]["headers"]["Authorization"], "Bearer ${input:writ-token}");
        assert_eq!(vscode["inputs"][0]["password"], true);
        let desktop = json_of(&render(Host::ClaudeDesktop, "writ", URL, &Bearer::Env("T"), None));
        assert_eq!(desktop["mcpServers"]["writ"]["args"][2], URL);
        let codex = render(Host::Codex, "writ", URL, &Bearer::Env("T"), Some(Path::new("/ca.pem")));
        assert!(codex.contains("[mcp_servers.writ]") && codex.contains("bearer_token_env_var = \"T\""));
        assert!(codex.contains("SSL_CERT_FILE=/ca.pem"), "{codex}");
    }
}
