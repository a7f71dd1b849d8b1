//! W3C trace context (`traceparent`, `tracestate`): what a request names as its trace and
//! parent span, read strictly and bounded. Anything malformed, oversized or repeated is ignored
//! and the request starts a trace of its own — never an error, never a label or an unbounded
//! attribute. Writ's trace id is the W3C trace id (32 lowercase hex digits), so the audit,
//! the logs, the operations and the exported spans name one trace the same way.

/// Longest trace id a request, a command or a search may name.
pub const TRACE_ID_BYTES_MAX: usize = 64;
/// A `tracestate` longer than this is dropped (the W3C limit is 32 members of at most 256
/// characters; 512 bytes is what vendors must propagate at least).
pub const TRACESTATE_BYTES_MAX: usize = 512;
/// Members a `tracestate` may have.
pub const TRACESTATE_MEMBERS_MAX: usize = 32;

/// A span's place in a trace: its trace id, its own span id, the span it continues (if any)
/// and whether the trace is sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The caller's span, when the request named one.
    pub parent_span_id: Option<[u8; 8]>,
    pub sampled: bool,
    /// The caller's `tracestate`, passed on unchanged (bounded).
    pub tracestate: Option<String>,
}

/// A parsed `traceparent`: trace id, parent span id, sampled flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl Parent {
    /// A `traceparent` of version `00` (or a later version's first four fields): 55 bytes,
    /// lowercase hex, neither id all zeros. `None` for anything else.
    pub fn parse(text: &str) -> Option<Parent> {
        let text = text.trim();
        let parts: Vec<&str> = text.splitn(5, '-').collect();
        let [version, trace, span, flags] = parts.get(..4)?.try_into().ok()?;
        let exact = version == "00" && parts.len() == 4 && text.len() == 55;
        let later = version != "00" && version != "ff" && text.len() >= 55;
        if !(exact || later) || version.len() != 2 || !is_hex(version) || flags.len() != 2 {
            return None;
        }
        let trace_id: [u8; 16] = hex_bytes(trace)?;
        let span_id: [u8; 8] = hex_bytes(span)?;
        let flags = u8::from_str_radix(flags, 16).ok().filter(|_| is_hex(flags))?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Parent { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// This span as the one work continues in (a callee's spans are its children), with its
    /// `tracestate` when well formed and bounded.
    pub fn as_current(self, tracestate: Option<&str>) -> TraceContext {
        TraceContext {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: None,
            sampled: self.sampled,
            tracestate: tracestate.filter(|s| tracestate_ok(s)).map(str::to_string),
        }
    }
}

impl TraceContext {
    /// The context of a new span: continuing `parent` when given (its trace, `tracestate`
    /// kept only if well formed and bounded), else the first span of a new sampled trace.
    pub fn child_of(
        parent: Option<Parent>,
        tracestate: Option<&str>,
        ids: impl FnOnce() -> ([u8; 16], [u8; 8]),
    ) -> Self {
        let (fresh_trace, span_id) = ids();
        match parent {
            Some(p) => TraceContext {
                trace_id: p.trace_id,
                span_id,
                parent_span_id: Some(p.span_id),
                sampled: p.sampled,
                tracestate: tracestate.filter(|s| tracestate_ok(s)).map(str::to_string),
            },
            None => {
                TraceContext { trace_id: fresh_trace, span_id, parent_span_id: None, sampled: true, tracestate: None }
            }
        }
    }

    /// A context whose span is `span_id` in `self`'s trace, with `self` as parent.
    pub fn child(&self, span_id: [u8; 8]) -> TraceContext {
        TraceContext { span_id, parent_span_id: Some(self.span_id), ..self.clone() }
    }

    /// The trace id as Writ names it everywhere: 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        crate::hex(&self.trace_id)
    }

    /// This span as the parent a callee continues: `00-<trace>-<span>-<flags>`.
    pub fn traceparent(&self) -> String {
        let flags = if self.sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", crate::hex(&self.trace_id), crate::hex(&self.span_id))
    }
}

/// The span id an operation's submission span has in its trace: derived from the trace and
/// the operation, so that whoever performs the operation later (an executor, an edge calling an
/// upstream) continues the trace under it from the operation's record alone.
pub fn operation_span_id(trace_id: &str, operation_id: &str) -> [u8; 8] {
    let digest = crate::sha256_hex(format!("writ-operation\0{trace_id}\0{operation_id}").as_bytes());
    let mut id: [u8; 8] = hex_bytes(&digest[..16]).unwrap_or([1; 8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// The `traceparent` under which an operation of trace `trace_id` is performed, when the trace
/// id is a W3C one (operations recorded before carry other ids: no parent).
pub fn operation_traceparent(trace_id: &str, operation_id: &str) -> Option<String> {
    let trace: [u8; 16] = hex_bytes(trace_id)?;
    (trace != [0; 16] && trace_id.len() == 32)
        .then(|| format!("00-{trace_id}-{}-01", crate::hex(&operation_span_id(trace_id, operation_id))))
}

/// Whether a `tracestate` is one to pass on: bounded, at most 32 `key=value` members of
/// printable ASCII.
pub fn tracestate_ok(text: &str) -> bool {
    text.len() <= TRACESTATE_BYTES_MAX
        && text.split(',').count() <= TRACESTATE_MEMBERS_MAX
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.split(',').map(str::trim).filter(|m| !m.is_empty()).all(|m| m.split_once('=').is_some())
}

fn is_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !is_hex(text) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_traceparent_is_continued() {
        let p = Parent::parse(GOOD).unwrap();
        assert!(p.sampled);
        let cx = TraceContext::child_of(Some(p), Some("congo=t61rcWkgMzE"), || ([9; 16], [7; 8]));
        assert_eq!(cx.trace_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.parent_span_id, Some(p.span_id));
        assert_eq!(cx.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-0707070707070707-01");
        assert_eq!(cx.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        // A later version may add fields; its first four are read.
        assert!(Parent::parse(&format!("cc{}-what-the-future-holds", &GOOD[2..])).is_some());
    }

    #[test]
    fn anything_malformed_starts_a_trace_of_its_own() {
        let long = format!("{GOOD}{}", "0".repeat(10_000));
        let upper = GOOD.to_uppercase();
        let bad = [
            "",
            "garbage",
            &upper,
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            &long,
        ];
        for text in bad {
            assert_eq!(Parent::parse(text), None, "{text:.80}");
        }
        let cx = TraceContext::child_of(Parent::parse("nope"), Some("a=b"), || ([9; 16], [7; 8]));
        assert_eq!((cx.trace_id, cx.parent_span_id, cx.tracestate), ([9; 16], None, None), "new trace, no state");
    }

    #[test]
    fn tracestate_is_bounded() {
        assert!(tracestate_ok("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
        assert!(!tracestate_ok(&format!("a={}", "x".repeat(TRACESTATE_BYTES_MAX))));
        assert!(!tracestate_ok(&(0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",")));
        assert!(!tracestate_ok("a=b\n"));
        assert!(!tracestate_ok("novalue"));
        let p = Parent::parse(GOOD);
        let cx = TraceContext::child_of(p, Some(&"k=v,".repeat(40)), || ([9; 16], [7; 8]));
        assert_eq!(cx.tracestate, None, "dropped, the trace continued");
    }

    #[test]
    fn an_operation_is_performed_under_its_submission_span() {
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let parent = operation_traceparent(trace, "op-1").unwrap();
        let p = Parent::parse(&parent).unwrap();
        assert_eq!((hex::encode(p.trace_id), p.span_id), (trace.to_string(), operation_span_id(trace, "op-1")));
        assert_ne!(operation_span_id(trace, "op-1"), operation_span_id(trace, "op-2"));
        assert_eq!(operation_traceparent("8717eff1-77d8-42cd-8949-d3a85239289e", "op-1"), None, "not a W3C id");
    }
}
