//! Tenant settings (SPEC D1): quotas, audit retention and mode, idempotency retention, token
//! TTL bounds and allowed origins. Persisted inside events, so the shape is versioned (`V1`).

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Default number of audit events a tenant retains (FIFO beyond it).
pub const AUDIT_MAX_EVENTS_DEFAULT: u64 = 20_000;
/// Largest per-tenant audit count a tenant may retain.
pub const AUDIT_MAX_EVENTS_MAX: u64 = 10_000_000;
/// Idempotency records are kept at least this long (24 h).
pub const IDEMPOTENCY_RETENTION_S_MIN: u64 = 24 * 3600;
/// Longest token lifetime a tenant may allow (30 days).
pub const TOKEN_TTL_S_MAX: u64 = 30 * 24 * 3600;
/// Most allowed origins per tenant.
pub const ALLOWED_ORIGINS_MAX: usize = 32;
/// Longest origin accepted.
pub const ORIGIN_BYTES_MAX: usize = 253 + 16;

/// Whether allowed reads may be audited in group commits or only synchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuditMode {
    /// Denials and effectful calls synchronously; allowed reads within a bounded window.
    #[default]
    Standard,
    /// Every decision audited before its response.
    Strict,
}

impl AuditMode {
    /// Every mode.
    pub const ALL: [AuditMode; 2] = [AuditMode::Standard, AuditMode::Strict];

    /// The mode's name as it travels in JSON (`strict`); also the tenant-class metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditMode::Standard => "standard",
            AuditMode::Strict => "strict",
        }
    }
}

/// Per-tenant limits; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotasV1 {
    pub requests_per_minute: Option<u64>,
    pub operations_per_minute: Option<u64>,
    pub cost_units_per_day: Option<u64>,
    pub concurrent_operations: Option<u64>,
}

impl QuotasV1 {
    /// The limits a tenant gets when its creation names none: generous for one tenant's
    /// agents, yet bounded, so no tenant can turn requests into unbounded ledger commits.
    /// `{}` at creation (or in a settings patch) means no limits.
    pub fn fresh_tenant() -> QuotasV1 {
        QuotasV1 {
            requests_per_minute: Some(60_000),
            operations_per_minute: Some(6_000),
            cost_units_per_day: None,
            concurrent_operations: Some(1_000),
        }
    }
}

/// The full settings of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSettingsV1 {
    pub audit_max_events: u64,
    /// Oldest audit event kept, in seconds; `None` keeps by count only.
    pub audit_max_age_s: Option<u64>,
    pub audit_mode: AuditMode,
    pub idempotency_retention_s: u64,
    pub token_ttl_min_s: u64,
    pub token_ttl_max_s: u64,
    /// Exact origins (`scheme://host[:port]`) browsers may call from; sorted, unique.
    pub allowed_origins: Vec<String>,
    pub quotas: QuotasV1,
}

impl Default for TenantSettingsV1 {
    fn default() -> Self {
        TenantSettingsV1 {
            audit_max_events: AUDIT_MAX_EVENTS_DEFAULT,
            audit_max_age_s: None,
            audit_mode: AuditMode::Standard,
            idempotency_retention_s: IDEMPOTENCY_RETENTION_S_MIN,
            token_ttl_min_s: 60,
            token_ttl_max_s: 24 * 3600,
            allowed_origins: Vec::new(),
            quotas: QuotasV1::default(),
        }
    }
}

/// A partial update: only the fields present change. `quotas` fields set to `0` are rejected;
/// use `clear_quotas` to remove limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSettingsPatch {
    #[serde(default)]
    pub audit_max_events: Option<u64>,
    #[serde(default)]
    pub audit_max_age_s: Option<u64>,
    #[serde(default)]
    pub audit_mode: Option<AuditMode>,
    #[serde(default)]
    pub idempotency_retention_s: Option<u64>,
    #[serde(default)]
    pub token_ttl_min_s: Option<u64>,
    #[serde(default)]
    pub token_ttl_max_s: Option<u64>,
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
    #[serde(default)]
    pub quotas: Option<QuotasV1>,
}

fn invalid(message: String) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

/// Checks an origin: `http(s)://host[:port]` with nothing after the authority.
fn validate_origin(origin: &str) -> Result<(), Rejection> {
    let rest = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
    let ok = match rest {
        Some(authority) => {
            !authority.is_empty()
                && origin.len() <= ORIGIN_BYTES_MAX
                && authority.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("allowed origin '{origin}' must be http(s)://host[:port] with no path")))
    }
}

impl TenantSettingsV1 {
    /// Applies a patch and validates the result as a whole.
    pub fn patched(&self, patch: &TenantSettingsPatch) -> Result<TenantSettingsV1, Rejection> {
        let mut s = self.clone();
        if let Some(v) = patch.audit_max_events {
            s.audit_max_events = v;
        }
        if let Some(v) = patch.audit_max_age_s {
            s.audit_max_age_s = Some(v);
        }
        if let Some(v) = patch.audit_mode {
            s.audit_mode = v;
        }
        if let Some(v) = patch.idempotency_retention_s {
            s.idempotency_retention_s = v;
        }
        if let Some(v) = patch.token_ttl_min_s {
            s.token_ttl_min_s = v;
        }
        if let Some(v) = patch.token_ttl_max_s {
            s.token_ttl_max_s = v;
        }
        if let Some(origins) = &patch.allowed_origins {
            let mut o = origins.clone();
            o.sort();
            o.dedup();
            s.allowed_origins = o;
        }
        if let Some(q) = &patch.quotas {
            s.quotas = q.clone();
        }
        s.validate()?;
        Ok(s)
    }

    /// Every rule the settings must satisfy, with a precise message for the first that fails.
    pub fn validate(&self) -> Result<(), Rejection> {
        if !(1..=AUDIT_MAX_EVENTS_MAX).contains(&self.audit_max_events) {
            return Err(invalid(format!("audit_max_events must be 1..={AUDIT_MAX_EVENTS_MAX}")));
        }
        if self.audit_max_age_s == Some(0) {
            return Err(invalid("audit_max_age_s must be at least 1 second".into()));
        }
        if self.idempotency_retention_s < IDEMPOTENCY_RETENTION_S_MIN {
            return Err(invalid(format!(
                "idempotency_retention_s must be at least {IDEMPOTENCY_RETENTION_S_MIN} (24 h); got {}",
                self.idempotency_retention_s
            )));
        }
        if self.token_ttl_min_s == 0 || self.token_ttl_min_s > self.token_ttl_max_s {
            return Err(invalid(format!(
                "token TTL bounds must satisfy 1 <= token_ttl_min_s ({}) <= token_ttl_max_s ({})",
                self.token_ttl_min_s, self.token_ttl_max_s
            )));
        }
        if self.token_ttl_max_s > TOKEN_TTL_S_MAX {
            return Err(invalid(format!("token_ttl_max_s must be at most {TOKEN_TTL_S_MAX} (30 days)")));
        }
        if self.allowed_origins.len() > ALLOWED_ORIGINS_MAX {
            return Err(invalid(format!("at most {ALLOWED_ORIGINS_MAX} allowed origins")));
        }
        for o in &self.allowed_origins {
            validate_origin(o)?;
        }
        let q = &self.quotas;
        for (name, v) in [
            ("requests_per_minute", q.requests_per_minute),
            ("operations_per_minute", q.operations_per_minute),
            ("cost_units_per_day", q.cost_units_per_day),
            ("concurrent_operations", q.concurrent_operations),
        ] {
            if v == Some(0) {
                return Err(invalid(format!("quotas.{name} must be at least 1 (omit it for no limit)")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_mode_names_are_their_json_names() {
        for mode in AuditMode::ALL {
            assert_eq!(serde_json::to_value(mode).unwrap(), serde_json::json!(mode.as_str()));
        }
    }

    #[test]
    fn patch_rules() {
        let base = TenantSettingsV1::default();
        assert!(base.validate().is_ok());
        let bad: Vec<TenantSettingsPatch> = vec![
            TenantSettingsPatch { idempotency_retention_s: Some(3600), ..Default::default() },
            TenantSettingsPatch { audit_max_events: Some(0), ..Default::default() },
            TenantSettingsPatch { audit_max_age_s: Some(0), ..Default::default() },
            TenantSettingsPatch { token_ttl_min_s: Some(7200), token_ttl_max_s: Some(3600), ..Default::default() },
            TenantSettingsPatch { token_ttl_max_s: Some(TOKEN_TTL_S_MAX + 1), ..Default::default() },
            TenantSettingsPatch { allowed_origins: Some(vec!["https://a.example/path".into()]), ..Default::default() },
            TenantSettingsPatch { allowed_origins: Some(vec!["ftp://a.example".into()]), ..Default::default() },
            TenantSettingsPatch {
                quotas: Some(QuotasV1 { requests_per_minute: Some(0), ..Default::default() }),
                ..Default::default()
            },
        ];
        for p in bad {
            let err = base.patched(&p).expect_err(&format!("{p:?} must be rejected"));
            assert_eq!(err.reason, ReasonCode::INPUT_INVALID);
        }
        let ok = base
            .patched(&TenantSettingsPatch {
                audit_mode: Some(AuditMode::Strict),
                allowed_origins: Some(vec![
                    "https://b.example".into(),
                    "http://127.0.0.1:3000".into(),
                    "https://b.example".into(),
                ]),
                ..Default::default()
            })
            .expect("valid patch");
        assert_eq!(ok.audit_mode, AuditMode::Strict);
        assert_eq!(ok.allowed_origins, ["http://127.0.0.1:3000", "https://b.example"]);
        assert_eq!(ok.audit_max_events, AUDIT_MAX_EVENTS_DEFAULT, "untouched fields keep their values");
    }
}
