//! Upstream MCP servers (`crate::upstream`): configuration by the tenant's operator, observed
//! tool sets that become a pending diff, approval of exactly the set that was shown, and the
//! fuses edges record.

use crate::decide::prelude::*;
use crate::upstream::{validate_name, UpstreamV1, FUSE_REASON_BYTES_MAX, UPSTREAMS_PER_TENANT_MAX};

/// Longest edge id a fuse is recorded under.
pub const EDGE_ID_BYTES_MAX: usize = 128;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let tenant_id = cmd.stream();
    existing(state, tenant_id)?;
    let found = |name: &str| {
        state
            .upstream(tenant_id, name)
            .ok_or_else(|| Rejection::new(ReasonCode::UPSTREAM_NOT_FOUND, format!("no upstream '{name}'")))
    };
    let t = tenant_id.to_string();
    match cmd {
        Command::PutUpstream { name, spec, create, .. } => {
            validate_name(name)?;
            spec.validate()?;
            if let Some(tenant) = state.tenants.get(tenant_id) {
                spec.auth.owned_by(&tenant.name)?;
            }
            let upstream = match (state.upstream(tenant_id, name), create) {
                (Some(_), true) => {
                    let msg = format!("upstream '{name}' already exists");
                    return Err(Rejection::new(ReasonCode::UPSTREAM_ALREADY_EXISTS, msg));
                }
                (None, true) => {
                    let count = state.upstreams.get(tenant_id).map_or(0, |m| m.len());
                    if count >= UPSTREAMS_PER_TENANT_MAX {
                        let msg = format!("the tenant has {count} upstreams, the most allowed");
                        return Err(Rejection::new(ReasonCode::UPSTREAM_INVALID, msg));
                    }
                    UpstreamV1 {
                        name: name.clone(),
                        spec: spec.clone(),
                        config_version: 1,
                        created_at_ms: now,
                        updated_at_ms: now,
                        pinned: None,
                        pending: None,
                        fuses: Default::default(),
                    }
                }
                (Some(old), false) => UpstreamV1 {
                    spec: spec.clone(),
                    config_version: old.config_version + 1,
                    updated_at_ms: now,
                    ..old.clone()
                },
                (None, false) => found(name).cloned()?,
            };
            Ok(vec![Event::UpstreamSetV1 { tenant_id: t, upstream }])
        }
        Command::RemoveUpstream { name, .. } => {
            found(name)?;
            Ok(vec![Event::UpstreamRemovedV1 { tenant_id: t, name: name.clone() }])
        }
        Command::ObserveUpstreamTools { name, tools, .. } => {
            let upstream = found(name)?;
            tools.check()?;
            let same_as_pinned = upstream.pinned.as_ref().is_some_and(|p| p.digest == tools.digest);
            let pending = (!same_as_pinned).then(|| tools.clone());
            Ok(vec![Event::UpstreamToolsObservedV1 { tenant_id: t, name: name.clone(), pending }])
        }
        Command::ApproveUpstreamTools { name, digest, .. } => {
            let upstream = found(name)?;
            match &upstream.pending {
                Some(p) if &p.digest == digest => Ok(vec![Event::UpstreamToolsApprovedV1 {
                    tenant_id: t,
                    name: name.clone(),
                    digest: digest.clone(),
                }]),
                Some(p) => Err(Rejection::new(
                    ReasonCode::UPSTREAM_DIGEST_MISMATCH,
                    format!("the pending tool set of '{name}' is {}, not {digest}: review it again", p.digest),
                )),
                None => Err(Rejection::new(
                    ReasonCode::UPSTREAM_DIGEST_MISMATCH,
                    format!("nothing is pending for upstream '{name}': sync it first"),
                )),
            }
        }
        Command::SetUpstreamFuse { name, edge_id, fuse, .. } => {
            let upstream = found(name)?;
            if edge_id.is_empty() || edge_id.len() > EDGE_ID_BYTES_MAX || !edge_id.bytes().all(|b| b.is_ascii_graphic())
            {
                let msg = format!("edge id must be 1..={EDGE_ID_BYTES_MAX} visible characters");
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg));
            }
            validate_text("fuse reason", Some(&fuse.reason), FUSE_REASON_BYTES_MAX)?;
            if fuse.config_version != upstream.config_version {
                let msg = format!(
                    "the fuse is about configuration {} of '{name}', which is now at {}",
                    fuse.config_version, upstream.config_version
                );
                return Err(Rejection::new(ReasonCode::UPSTREAM_DIGEST_MISMATCH, msg));
            }
            let fuse = crate::upstream::FuseV1 { changed_at_ms: now, ..fuse.clone() };
            Ok(vec![Event::UpstreamFuseChangedV1 { tenant_id: t, name: name.clone(), edge_id: edge_id.clone(), fuse }])
        }
        other => Err(misrouted(other)),
    }
}
