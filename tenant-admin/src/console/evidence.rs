//! An operation's evidence at the desk: every blob stored for it — images shown, other media
//! offered as downloads — with who captured it, when, and its sha256, which the desk checks
//! against the bytes before it hands them out.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use writ_api::dto::{EvidenceContent, Query as LedgerQuery};
use writ_api::evidence::{EvidenceBlobV1, Uploader};
use writ_api::operation::Operation;
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};

use super::operation::tenant_id;
use super::{esc, refusal, utc, Desk};
use crate::service::{query, Shared};

/// The media types shown inline as images: raster formats only (an SVG can carry script).
const SHOWN_AS_IMAGES: &[&str] = &["image/png", "image/jpeg"];

/// The "Evidence" section of an operation's page: its stored blobs, and what its report says
/// of evidence kept elsewhere (by the executor).
pub(crate) fn evidence_html(s: &LedgerState, tenant: &str, op: &Operation) -> String {
    let id = &op.spec.operation_id;
    let blobs: Vec<EvidenceBlobV1> =
        s.cold.evidence_of(&op.tenant_id, id, writ_api::evidence::EVIDENCE_PER_OPERATION_MAX);
    let summary = |hash: &str| op.evidence.iter().find(|e| e.content_hash == hash).map(|e| e.summary.clone());
    let mut items: Vec<String> = blobs.iter().map(|b| blob_html(tenant, id, b, summary(&b.content_hash))).collect();
    for e in op.evidence.iter().filter(|e| !blobs.iter().any(|b| b.content_hash == e.content_hash)) {
        items.push(format!(
            "<li><code>{}</code> kept at <code>{}</code>: {}</li>",
            esc(&e.content_hash),
            esc(&e.evidence_return_ref),
            esc(&e.summary)
        ));
    }
    if items.is_empty() {
        return "<h2>Evidence</h2><p>None yet.</p>".into();
    }
    format!("<h2>Evidence</h2><ul class=\"evidence\">{}</ul>", items.concat())
}

fn blob_html(tenant: &str, operation: &str, b: &EvidenceBlobV1, summary: Option<String>) -> String {
    let url = format!("/console/operations/{}/{}/evidence/{}", esc(tenant), esc(operation), esc(&b.content_hash));
    let by = match &b.by {
        Uploader::Executor { executor_id } => format!("executor {executor_id}"),
        Uploader::Principal { principal_id } => format!("principal {principal_id}"),
    };
    let about = format!(
        "<code>{}</code> {}, {} bytes, from {}, {} UTC{}",
        esc(&b.content_hash),
        esc(&b.mime_type),
        b.size,
        esc(&by),
        utc(b.at_ms),
        summary.map_or(String::new(), |s| format!(": {}", esc(&s)))
    );
    let download = format!("<a href=\"{url}\" download=\"{}\">Download</a>", esc(&file_name(b)));
    if SHOWN_AS_IMAGES.contains(&b.mime_type.as_str()) {
        let hash: String = b.content_hash.chars().take(12).collect();
        format!(
            "<li><figure><img src=\"{url}\" alt=\"Evidence image {hash} of this operation\">\
             <figcaption>{about} {download}</figcaption></figure></li>"
        )
    } else {
        format!("<li>{about} {download}</li>")
    }
}

/// A download's file name: the hash's start and an extension for the media type.
fn file_name(b: &EvidenceBlobV1) -> String {
    let ext = match b.mime_type.as_str() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "application/json" => "json",
        "text/plain" => "txt",
        "text/csv" => "csv",
        "application/pdf" => "pdf",
        _ => "bin",
    };
    format!("evidence-{}.{ext}", b.content_hash.chars().take(16).collect::<String>())
}

/// `GET /console/operations/{tenant}/{operation}/evidence/{hash}`: the blob's bytes once their
/// sha256 is the name they are stored under; images inline, anything else as an attachment.
pub(crate) async fn serve(
    State(st): State<Shared>,
    Path((tenant, operation, hash)): Path<(String, String, String)>,
    desk: Desk,
) -> Response {
    let read = async {
        let tenant_id = tenant_id(&st, &desk, &tenant)?;
        let q = LedgerQuery::GetEvidence { tenant_id, operation_id: operation, content_hash: hash.clone() };
        let content: EvidenceContent = query(&st, q, false).await?;
        let bytes = writ_api::evidence::from_base64(&content.content_base64)
            .ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "the stored evidence is not base64"))?;
        if writ_api::hex(&Sha256::digest(&bytes)) != hash {
            tracing::error!(%hash, "stored evidence does not match its hash");
            return Err(Rejection::new(ReasonCode::INTERNAL, "the stored bytes do not match their sha256"));
        }
        Ok((content.blob, bytes))
    };
    match read.await {
        Ok((blob, bytes)) if SHOWN_AS_IMAGES.contains(&blob.mime_type.as_str()) => {
            ([(header::CONTENT_TYPE, blob.mime_type)], bytes).into_response()
        }
        Ok((blob, bytes)) => {
            let disposition = format!("attachment; filename=\"{}\"", file_name(&blob));
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                    (header::CONTENT_DISPOSITION, disposition),
                ],
                bytes,
            )
                .into_response()
        }
        Err(r) => refusal(Some(&desk), &r),
    }
}
