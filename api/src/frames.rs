//! Numbered frames: many requests and their answers over one long-lived exchange (a submit
//! stream between an edge and a node). Each frame is its length (u32, little-endian, of what
//! follows), the number (u64, little-endian) its answer carries back, and a bincode payload.
//! Answers come back in the order they are ready, so a number is what pairs them.

use serde::{Deserialize, Serialize};

/// Where a node serves submit streams (`POST`, `BINARY_MEDIA_TYPE` both ways).
pub const SUBMIT_STREAM_PATH: &str = "/client/submit-stream";

/// Bytes taken by a frame's length and number.
const HEAD_BYTES: usize = 12;

/// `payload` framed under `number`.
pub fn numbered(number: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD_BYTES + payload.len());
    out.extend_from_slice(&((8 + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The bytes of a stream as they arrive, taken off as whole frames; a frame whose payload is
/// longer than the bound breaks the stream (nothing after it can be trusted to be a frame).
#[derive(Debug)]
pub struct Frames {
    buf: Vec<u8>,
    start: usize,
    payload_max: usize,
}

impl Frames {
    /// Frames whose payloads are at most `payload_max` bytes.
    pub fn new(payload_max: usize) -> Self {
        Frames { buf: Vec::new(), start: 0, payload_max }
    }

    /// Appends what arrived (what was taken before is let go here, in one move).
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame's number and payload; `Ok(None)` until one is whole.
    pub fn next_frame(&mut self) -> Result<Option<(u64, &[u8])>, String> {
        let rest = &self.buf[self.start..];
        let Some(head) = rest.get(..HEAD_BYTES) else { return Ok(None) };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if !(8..=8 + self.payload_max).contains(&len) {
            return Err(format!("a frame of {len} bytes (8..={})", 8 + self.payload_max));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let number = u64::from_le_bytes(head[4..HEAD_BYTES].try_into().expect("eight bytes"));
        let at = self.start + HEAD_BYTES;
        self.start += 4 + len;
        Ok(Some((number, &self.buf[at..self.start])))
    }

    /// Whether part of a frame is still waiting for the rest of it.
    pub fn is_partial(&self) -> bool {
        self.start < self.buf.len()
    }
}

/// One submit on a submit stream: the request and the caller's span, which the `traceparent`
/// header carries for a submit of its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamedSubmit<'a> {
    pub traceparent: Option<String>,
    pub request: std::borrow::Cow<'a, crate::dto::SubmitRequest>,
}

/// Longest payload of a submit on a stream: the bound of a submit's own body.
pub const SUBMIT_PAYLOAD_BYTES_MAX: usize = 1024 * 1024;

/// The answer to a [`StreamedSubmit`], under the same number.
pub type StreamedAnswer = Result<crate::dto::SubmitResponse, crate::Rejection>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let stream: Vec<u8> = [numbered(7, b"first"), numbered(u64::MAX, b""), numbered(9, &[1u8; 300])].concat();
        for cut in 0..stream.len() {
            let mut frames = Frames::new(1024);
            let mut got = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                frames.push(part);
                while let Some((n, payload)) = frames.next_frame().unwrap() {
                    got.push((n, payload.to_vec()));
                }
            }
            assert_eq!(got, vec![(7, b"first".to_vec()), (u64::MAX, vec![]), (9, vec![1u8; 300])], "cut at {cut}");
            assert!(!frames.is_partial());
        }
    }

    #[test]
    fn a_frame_over_the_bound_breaks_the_stream() {
        let mut frames = Frames::new(16);
        frames.push(&numbered(1, &[0u8; 17]));
        assert!(frames.next_frame().unwrap_err().contains("8..=24"));
        let mut short = Frames::new(16);
        short.push(&3u32.to_le_bytes());
        short.push(&[0u8; 8]);
        assert!(short.next_frame().is_err(), "a length that cannot hold the number");
    }
}
