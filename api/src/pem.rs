//! PEM armour (RFC 7468) for the certificates, requests and keys Writ's parts exchange: one
//! encoder and one decoder for every crate.

use base64::Engine;

/// `der` armoured as a PEM block labelled `label` (64-character lines).
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The DER contents of every well-formed block labelled `label` in `text`, in order (a block
/// whose base64 does not decode is left out).
pub fn blocks(text: &str, label: &str) -> Vec<Vec<u8>> {
    let (begin, end) = (format!("-----BEGIN {label}-----"), format!("-----END {label}-----"));
    text.split(&begin)
        .skip(1)
        .filter_map(|rest| rest.split_once(&end).map(|(body, _)| body))
        .filter_map(|body| {
            let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD.decode(compact).ok()
        })
        .collect()
}

/// The first block labelled `label` in `text`.
pub fn first(text: &str, label: &str) -> Option<Vec<u8>> {
    blocks(text, label).into_iter().next()
}

#[cfg(test)]
mod tests {
    #[test]
    fn blocks_round_trip_and_skip_other_labels() {
        let a = super::encode("CERTIFICATE", &[1u8; 100]);
        let b = super::encode("CERTIFICATE", b"two");
        let key = super::encode("PRIVATE KEY", b"secret");
        let text = format!("{a}{key}{b}");
        assert_eq!(super::blocks(&text, "CERTIFICATE"), vec![vec![1u8; 100], b"two".to_vec()]);
        assert_eq!(super::first(&text, "PRIVATE KEY"), Some(b"secret".to_vec()));
        assert!(a.lines().all(|l| l.len() <= 64));
        assert_eq!(super::first("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----", "CERTIFICATE"), None);
    }
}
