//! CLI contexts: named clusters an operator works with, kept in a TOML file
//! (`$WRIT_CONFIG`, else `$XDG_CONFIG_HOME/writ/config.toml`, else `~/.config/writ/config.toml`):
//!
//! ```toml
//! current = "prod"
//! [contexts.prod]
//! urls = ["https://10.0.0.1:7443", "https://10.0.0.2:7443", "https://10.0.0.3:7443"]
//! ca = "/etc/writ/pki/ca.pem"
//! token_file = "/home/ops/.config/writ/prod-token"   # 0600; never the token itself
//! ```
//!
//! `writ admin --context NAME` (or the file's `current`) supplies the endpoints (tried in turn,
//! like `etcdctl --endpoints`), the CA and the operator credential; `--url`, `--token`, `--ca`
//! and their `WRIT_ADMIN_URL`, `WRIT_ADMIN_TOKEN`, `WRIT_CA_FILE` variables override it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Most contexts one file may hold, and most endpoints one context may list.
pub const CONTEXTS_MAX: usize = 64;
pub const ENDPOINTS_MAX: usize = 16;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextFile {
    pub current: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// Admin API endpoints of the cluster's nodes (https).
    pub urls: Vec<String>,
    /// The cluster CA the endpoints' certificates chain to.
    pub ca: Option<PathBuf>,
    /// A file holding the operator token (read at each use).
    pub token_file: Option<PathBuf>,
    /// The operator's certificate and key (`writ pki issue operator NAME`), presented to admin
    /// listeners that require one (`admin_require_client_certificate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// Where the context file is.
pub fn path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("WRIT_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base =
        env("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("writ").join("config.toml"))
}

impl ContextFile {
    /// The file at `path`, or an empty one when it does not exist.
    pub fn load(path: &Path) -> Result<ContextFile, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let file: ContextFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
                file.check().map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(file)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ContextFile::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.contexts.len() > CONTEXTS_MAX {
            return Err(format!("at most {CONTEXTS_MAX} contexts"));
        }
        for (name, c) in &self.contexts {
            if !valid_name(name) {
                return Err(format!("context name '{name}': 1-64 of [A-Za-z0-9._-]"));
            }
            if c.urls.is_empty() || c.urls.len() > ENDPOINTS_MAX || c.urls.iter().any(|u| !u.starts_with("https://")) {
                return Err(format!("context '{name}': list 1..={ENDPOINTS_MAX} https admin URLs"));
            }
        }
        if let Some(current) = &self.current {
            if !self.contexts.contains_key(current) {
                return Err(format!("current context '{current}' is not defined"));
            }
        }
        Ok(())
    }

    /// Writes the file (0600, created with its directory when missing), atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        self.check()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = toml::to_string(self).map_err(|e| e.to_string())?;
        writ_client::files::replace(path, &text, true).map_err(|e| e.to_string())
    }

    /// The context named `name`, else the current one.
    pub fn pick(&self, name: Option<&str>) -> Result<Option<(&str, &Context)>, String> {
        match name.or(self.current.as_deref()) {
            None => Ok(None),
            Some(n) => self
                .contexts
                .get_key_value(n)
                .map(|(k, c)| Some((k.as_str(), c)))
                .ok_or_else(|| format!("no context named '{n}' (see `writ admin context list`)")),
        }
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Context {
    /// The operator token from `token_file` (trimmed).
    pub fn token(&self) -> Result<Option<String>, String> {
        let Some(f) = &self.token_file else { return Ok(None) };
        let text = std::fs::read_to_string(f).map_err(|e| format!("token_file {}: {e}", f.display()))?;
        Ok(Some(text.trim().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writ/config.toml");
        assert_eq!(ContextFile::load(&path).unwrap(), ContextFile::default());
        let mut file = ContextFile::default();
        file.contexts.insert(
            "prod".into(),
            Context {
                urls: vec!["https://10.0.0.1:7443".into()],
                ca: Some("ca.pem".into()),
                token_file: None,
                cert_file: Some("alice.pem".into()),
                key_file: Some("alice-key.pem".into()),
            },
        );
        file.current = Some("prod".into());
        file.save(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let loaded = ContextFile::load(&path).unwrap();
        assert_eq!(loaded, file);
        assert_eq!(loaded.pick(None).unwrap().unwrap().0, "prod");
        assert!(loaded.pick(Some("staging")).is_err());
        file.contexts.get_mut("prod").unwrap().urls = vec!["http://plain:7443".into()];
        assert!(file.save(&path).is_err(), "plain http endpoints are refused");
        file.current = Some("nope".into());
        assert!(file.check().is_err());
    }
}
