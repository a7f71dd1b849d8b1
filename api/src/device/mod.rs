//! Sites and devices (SPEC D5): where effects happen. Devices belong to one site of one tenant;
//! executors (enrolled later) serve a site and a set of its devices.

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::{validate_tenant_name, validate_text, Rejection, DISPLAY_NAME_BYTES_MAX};

/// Longest device class (e.g. `robot-arm.v2`).
pub const DEVICE_CLASS_BYTES_MAX: usize = 64;

/// A site of a tenant (a plant, lab, warehouse).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub display_name: Option<String>,
    pub created_at_ms: u64,
    pub revision: u64,
}

/// A device at a site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub id: String,
    pub tenant_id: String,
    pub site_id: String,
    pub name: String,
    /// What kind of device this is; catalog actions name the class they drive.
    pub device_class: String,
    pub created_at_ms: u64,
    pub revision: u64,
}

fn named(what: &str, name: &str) -> Result<(), Rejection> {
    validate_tenant_name(name).map_err(|_| {
        Rejection::new(ReasonCode::INPUT_INVALID, format!("{what} name must be 1..=63 characters of a-z, 0-9 and '-'"))
    })
}

fn id(what: &str, id: &str) -> Result<(), Rejection> {
    if id.is_empty() || id.len() > 64 {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("{what} id must be 1..=64 bytes")));
    }
    Ok(())
}

/// Checks a new site's fields.
pub fn validate_site(site_id: &str, name: &str, display_name: Option<&str>) -> Result<(), Rejection> {
    id("site", site_id)?;
    named("site", name)?;
    validate_text("display_name", display_name, DISPLAY_NAME_BYTES_MAX)
}

/// Checks a new device's fields.
pub fn validate_device(device_id: &str, name: &str, device_class: &str) -> Result<(), Rejection> {
    id("device", device_id)?;
    named("device", name)?;
    let class_ok = !device_class.is_empty()
        && device_class.len() <= DEVICE_CLASS_BYTES_MAX
        && device_class.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if class_ok {
        Ok(())
    } else {
        Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            format!("device_class must be 1..={DEVICE_CLASS_BYTES_MAX} characters of [A-Za-z0-9_.-]"),
        ))
    }
}

/// Longest an enrollment token may stay valid.
pub const ENROLLMENT_TTL_MAX_S: u64 = 7 * 24 * 3600;

/// A one-time enrollment the operator created for an executor of (tenant, site, devices)
/// (SPEC X1). Only the sha256 of the token is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentV1 {
    pub enrollment_id: String,
    pub site_id: String,
    pub device_ids: std::collections::BTreeSet<String>,
    pub token_sha256: String,
    pub ttl_s: u64,
}

/// An enrollment as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    pub id: String,
    pub tenant_id: String,
    pub site_id: String,
    pub device_ids: std::collections::BTreeSet<String>,
    pub token_sha256: String,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    /// Set when the token was used (it never works twice).
    pub used_at_ms: Option<u64>,
    pub executor_id: Option<String>,
}

/// A certificate issued at enrollment, as recorded (the certificate itself stays with the
/// executor; the private key never leaves it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorCertV1 {
    pub executor_id: String,
    /// sha256 of the certificate DER, hex.
    pub fingerprint: String,
    /// Certificate serial number, hex.
    pub serial: String,
    pub not_after_ms: u64,
    /// Fingerprint of the CA certificate that signed it.
    pub ca_fingerprint: String,
}

/// An enrolled executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    pub id: String,
    pub tenant_id: String,
    pub site_id: String,
    pub device_ids: std::collections::BTreeSet<String>,
    pub enrollment_id: String,
    pub cert: ExecutorCertV1,
    pub enrolled_at_ms: u64,
    pub revoked_at_ms: Option<u64>,
    pub revision: u64,
}

/// Whether an executor is connected to an edge, as the edges say (SPEC O3's executor
/// liveness): an edge records a dispatch stream when it opens and when it closes, and confirms
/// an open one every [`PRESENCE_CONFIRM_MS`]; a connection not confirmed for
/// [`PRESENCE_STALE_MS`] is reported as stale (its edge may be gone). The operation last
/// dispatched to the executor is kept with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorPresenceV1 {
    /// The edge whose dispatch stream the executor holds (or last held).
    pub edge_id: String,
    pub connected: bool,
    /// When the connection (or disconnection) began, ledger time.
    pub since_ms: u64,
    /// When an edge last said so.
    pub confirmed_at_ms: u64,
    /// The operation last dispatched to the executor and when.
    pub last_dispatch: Option<(String, u64)>,
}

/// How often an edge confirms an open dispatch stream.
pub const PRESENCE_CONFIRM_MS: u64 = 120_000;
/// Unconfirmed for this long, a connection is stale.
pub const PRESENCE_STALE_MS: u64 = 3 * PRESENCE_CONFIRM_MS;

impl ExecutorPresenceV1 {
    /// The executor's liveness in words at time `now`.
    pub fn liveness(&self, now: u64) -> String {
        let ago = |at: u64| format!("{} s ago", now.saturating_sub(at) / 1000);
        match self.connected {
            true if now.saturating_sub(self.confirmed_at_ms) > PRESENCE_STALE_MS => {
                format!("stale: edge {} last confirmed it {}", self.edge_id, ago(self.confirmed_at_ms))
            }
            true => format!("connected to edge {} (confirmed {})", self.edge_id, ago(self.confirmed_at_ms)),
            false => format!("disconnected from edge {} {}", self.edge_id, ago(self.since_ms)),
        }
    }
}

/// A tenant's executor CA certificate (one per node that signs enrollments; each node derives
/// its own CA key, and the ledger holds every CA certificate executors may chain to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorCaV1 {
    pub fingerprint: String,
    pub cert_der: Vec<u8>,
}

pub mod decide;
mod fold;
mod query;
