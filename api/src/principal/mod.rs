//! Principals and scopes (SPEC D2, D3): who may act in a tenant, and the prefixed scope strings
//! that say what they may do. Self-reported client information grants nothing; only scopes do.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Most explicit scopes per principal.
pub const SCOPES_MAX: usize = 256;
/// Longest scope string.
pub const SCOPE_BYTES_MAX: usize = 200;
/// Most metadata entries per principal.
pub const METADATA_ENTRIES_MAX: usize = 32;
/// Longest metadata key or value.
pub const METADATA_BYTES_MAX: usize = 512;

/// What kind of actor a principal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    Human,
    Agent,
    Device,
    Service,
}

impl PrincipalKind {
    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Human => "human",
            PrincipalKind::Agent => "agent",
            PrincipalKind::Device => "device",
            PrincipalKind::Service => "service",
        }
    }
}

/// Role presets: named scope bundles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RolePreset {
    #[serde(rename = "readOnly")]
    ReadOnly,
    #[serde(rename = "full")]
    Full,
    #[serde(rename = "delegate")]
    Delegate,
}

/// Scopes that stand alone.
const EXACT_SCOPES: &[&str] = &[
    "tools:list",
    "context:read",
    "resources:read",
    "ops:read",
    "work:read",
    "work:write",
    "ops:execute",
    "ops:cancel",
    "ops:accept",
    "ops:approve",
    "observe:capture",
    "audit:read",
    "tokens:delegate",
];

/// Scope families that take one argument after the prefix (`*` means any).
const PARAMETERIZED_PREFIXES: &[&str] = &["tools:call:", "devices:use:"];

/// What `readOnly` grants: look, never act.
const READ_ONLY_SCOPES: &[&str] = &["tools:list", "context:read", "resources:read", "ops:read"];
/// What `full` adds to `readOnly`: act on any tool and device.
const ACTING_SCOPES: &[&str] = &["tools:call:*", "devices:use:*", "ops:execute", "ops:cancel", "observe:capture"];
/// The scope that lets a token mint narrower children of itself.
pub const DELEGATE_SCOPE: &str = "tokens:delegate";
/// What `delegate` adds to `full`: mint child tokens.
const DELEGATING_SCOPES: &[&str] = &[DELEGATE_SCOPE];

impl RolePreset {
    /// The scopes a preset grants (`readOnly ⊂ full ⊂ delegate` by construction).
    pub fn scopes(self) -> Vec<&'static str> {
        let layers: &[&[&'static str]] = match self {
            RolePreset::ReadOnly => &[READ_ONLY_SCOPES],
            RolePreset::Full => &[READ_ONLY_SCOPES, ACTING_SCOPES],
            RolePreset::Delegate => &[READ_ONLY_SCOPES, ACTING_SCOPES, DELEGATING_SCOPES],
        };
        layers.iter().flat_map(|l| l.iter().copied()).collect()
    }
}

/// Checks one scope against the grammar: a known exact scope, or a known prefix followed by an
/// argument of `[A-Za-z0-9_.-]` (or `*`). Unknown prefixes are rejected at grant time.
pub fn validate_scope(scope: &str) -> Result<(), Rejection> {
    if scope.len() > SCOPE_BYTES_MAX {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("scope is longer than {SCOPE_BYTES_MAX} bytes")));
    }
    if EXACT_SCOPES.contains(&scope) {
        return Ok(());
    }
    for prefix in PARAMETERIZED_PREFIXES {
        if let Some(arg) = scope.strip_prefix(prefix) {
            let ok = arg == "*"
                || (!arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)));
            return if ok {
                Ok(())
            } else {
                Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("scope '{scope}': the part after '{prefix}' must be '*' or [A-Za-z0-9_.-]+"),
                ))
            };
        }
    }
    Err(Rejection::new(
        ReasonCode::INPUT_INVALID,
        format!(
            "unknown scope '{scope}': known scopes are {} and the prefixes {}",
            EXACT_SCOPES.join(", "),
            PARAMETERIZED_PREFIXES.iter().map(|p| format!("{p}<name>")).collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// Whether `granted` covers `wanted` (`tools:call:*` covers `tools:call:x`).
pub fn scope_covers(granted: &str, wanted: &str) -> bool {
    if granted == wanted {
        return true;
    }
    PARAMETERIZED_PREFIXES.iter().any(|p| granted.strip_prefix(p) == Some("*") && wanted.starts_with(p))
}

/// Lifecycle of a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalState {
    Active,
    Revoked,
}

/// What the operator asked for when creating a principal (persisted in the created event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalSpecV1 {
    pub principal_id: String,
    pub name: String,
    pub kind: PrincipalKind,
    pub preset: Option<RolePreset>,
    /// Explicit scopes on top of the preset.
    pub scopes: BTreeSet<String>,
    pub metadata: BTreeMap<String, String>,
}

impl PrincipalSpecV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        crate::rejection::validate_tenant_name(&self.name).map_err(|_| {
            Rejection::new(ReasonCode::INPUT_INVALID, "principal name must be 1..=63 characters of a-z, 0-9 and '-'")
        })?;
        if self.principal_id.is_empty() || self.principal_id.len() > 64 {
            return Err(Rejection::new(ReasonCode::INPUT_INVALID, "principal id must be 1..=64 bytes"));
        }
        if self.scopes.len() > SCOPES_MAX {
            return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("at most {SCOPES_MAX} scopes")));
        }
        for s in &self.scopes {
            validate_scope(s)?;
        }
        if self.preset.is_none() && self.scopes.is_empty() {
            return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a principal needs a preset or at least one scope"));
        }
        if self.metadata.len() > METADATA_ENTRIES_MAX
            || self
                .metadata
                .iter()
                .any(|(k, v)| k.is_empty() || k.len() > METADATA_BYTES_MAX || v.len() > METADATA_BYTES_MAX)
        {
            return Err(Rejection::new(
                ReasonCode::INPUT_INVALID,
                format!("metadata: at most {METADATA_ENTRIES_MAX} entries, keys 1..={METADATA_BYTES_MAX} and values ..={METADATA_BYTES_MAX} bytes"),
            ));
        }
        Ok(())
    }
}

/// The principal view, derived from principal events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub kind: PrincipalKind,
    pub preset: Option<RolePreset>,
    /// Preset scopes ∪ explicit scopes, minus revoked ones.
    pub scopes: BTreeSet<String>,
    pub revoked_scopes: BTreeSet<String>,
    pub metadata: BTreeMap<String, String>,
    pub state: PrincipalState,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub revision: u64,
}

impl Principal {
    /// Builds the view a created event describes.
    pub fn from_spec(tenant_id: &str, spec: &PrincipalSpecV1, at_ms: u64, revision: u64) -> Principal {
        let mut scopes: BTreeSet<String> = spec.scopes.clone();
        if let Some(p) = spec.preset {
            scopes.extend(p.scopes().iter().map(|s| s.to_string()));
        }
        Principal {
            id: spec.principal_id.clone(),
            tenant_id: tenant_id.to_string(),
            name: spec.name.clone(),
            kind: spec.kind,
            preset: spec.preset,
            scopes,
            revoked_scopes: BTreeSet::new(),
            metadata: spec.metadata.clone(),
            state: PrincipalState::Active,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            revision,
        }
    }
}

pub mod decide;
mod fold;
mod query;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_spelled_as_the_api_spells_it() {
        for kind in [PrincipalKind::Human, PrincipalKind::Agent, PrincipalKind::Device, PrincipalKind::Service] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }

    #[test]
    fn scope_grammar() {
        for ok in
            ["tools:list", "tools:call:*", "tools:call:move_arm", "devices:use:press-7", "ops:read", "tokens:delegate"]
        {
            assert!(validate_scope(ok).is_ok(), "{ok}");
        }
        for bad in ["tools:kill", "admin:*", "tools:call:", "tools:call:a b", "", "ops:read:x"] {
            assert_eq!(validate_scope(bad).map_err(|e| e.reason), Err(ReasonCode::INPUT_INVALID), "{bad}");
        }
    }

    #[test]
    fn presets_are_valid_and_nested() {
        for p in [RolePreset::ReadOnly, RolePreset::Full, RolePreset::Delegate] {
            for s in p.scopes() {
                assert!(validate_scope(s).is_ok(), "{s}");
            }
        }
        let full: BTreeSet<_> = RolePreset::Full.scopes().into_iter().collect();
        assert!(RolePreset::ReadOnly.scopes().iter().all(|s| full.contains(s)));
        assert!(RolePreset::Full.scopes().iter().all(|s| RolePreset::Delegate.scopes().contains(s)));
    }

    #[test]
    fn wildcard_covers_its_family_only() {
        assert!(scope_covers("tools:call:*", "tools:call:move_arm"));
        assert!(!scope_covers("tools:call:*", "devices:use:x"));
        assert!(!scope_covers("tools:call:a", "tools:call:b"));
        assert!(scope_covers("ops:read", "ops:read"));
    }
}
