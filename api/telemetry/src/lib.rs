//! Span export over OTLP (HTTP/protobuf) for every role of Writ: the edge, the ledger nodes and
//! the executors. Off unless a config line or the standard `OTEL_*` environment names an
//! endpoint; then spans are built with the W3C ids Writ already carries
//! ([`writ_api::trace::TraceContext`]), sampled by the OpenTelemetry SDK's sampler (from
//! `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG`, parent-based always-on by default), and
//! queued on a bounded queue that drops — and counts, `writ_trace_spans_dropped_total` — rather
//! than slows a request; one task sends them in batches. While off, a [`Span`] is inert: no
//! allocation, no clock read.

pub mod process;

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample, SpanData, SpanEvents, SpanExporter, SpanLinks};
use writ_api::trace::TraceContext;

/// Spans waiting to be sent; beyond, a span is dropped and counted.
pub const QUEUE_SPANS_MAX: usize = 2048;
/// Spans per export request.
pub const BATCH_SPANS_MAX: usize = 512;
/// Attributes a span keeps (more are dropped and counted on the span).
pub const SPAN_ATTRIBUTES_MAX: usize = 32;
/// Events a span keeps.
pub const SPAN_EVENTS_MAX: usize = 16;
/// The longest attribute value kept; longer ones are cut.
pub const ATTRIBUTE_BYTES_MAX: usize = 256;

/// Where and as whom this process exports.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The OTLP endpoint's base URL (`…/v1/traces` is appended), from the role's config; the
    /// `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` variables name one too.
    pub endpoint: Option<String>,
    /// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
    pub service: String,
    /// `writ.role`: node, edge, executor or dev.
    pub role: String,
    /// `service.instance.id`: the node id, the edge id, the executor id.
    pub instance: String,
}

struct Pipeline {
    sampler: Box<dyn ShouldSample>,
    queue: tokio::sync::mpsc::Sender<SpanData>,
    scope: InstrumentationScope,
}

static PIPELINE: OnceLock<Pipeline> = OnceLock::new();

/// Whether spans are exported by this process.
pub fn enabled() -> bool {
    PIPELINE.get().is_some()
}

/// Turns export on when `settings` or the environment name an endpoint (and
/// `OTEL_SDK_DISABLED`/`OTEL_TRACES_EXPORTER=none` do not turn it off): `Ok(true)`. Called once
/// per process, inside its runtime; a second call changes nothing.
pub fn init(settings: &Settings) -> Result<bool, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let off = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    if off || (settings.endpoint.is_none() && !from_env) || PIPELINE.get().is_some() {
        return Ok(false);
    }
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
    if let Some(base) = &settings.endpoint {
        builder = builder.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
    }
    let mut exporter = builder.build().map_err(|e| format!("the OTLP exporter: {e}"))?;
    exporter.set_resource(&resource(settings));
    let (queue, spans) = tokio::sync::mpsc::channel(QUEUE_SPANS_MAX);
    let delay = env("OTEL_BSP_SCHEDULE_DELAY").and_then(|v| v.parse().ok()).unwrap_or(1000u64);
    tokio::spawn(send(exporter, spans, Duration::from_millis(delay.clamp(10, 60_000))));
    let sampler = opentelemetry_sdk::trace::Config::default().sampler;
    let scope = InstrumentationScope::builder("writ").with_version(env!("CARGO_PKG_VERSION")).build();
    let installed = PIPELINE.set(Pipeline { sampler, queue, scope }).is_ok();
    tracing::info!(role = %settings.role, "exporting spans over OTLP");
    Ok(installed)
}

fn resource(settings: &Settings) -> opentelemetry_sdk::Resource {
    let mut builder = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        builder = builder.with_service_name(settings.service.clone());
    }
    builder
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", settings.instance.clone()),
            KeyValue::new("writ.role", settings.role.clone()),
        ])
        .build()
}

/// Sends queued spans: a batch when it is full or `delay` after its first span.
async fn send(
    exporter: opentelemetry_otlp::SpanExporter,
    mut spans: tokio::sync::mpsc::Receiver<SpanData>,
    delay: Duration,
) {
    while let Some(first) = spans.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + delay;
        while batch.len() < BATCH_SPANS_MAX {
            match tokio::time::timeout_at(deadline, spans.recv()).await {
                Ok(Some(span)) => batch.push(span),
                Ok(None) | Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        match exporter.export(batch).await {
            Ok(()) => metrics::counter!("writ_trace_spans_exported_total").increment(n),
            Err(e) => {
                metrics::counter!("writ_trace_export_failures_total").increment(1);
                tracing::warn!(error = %e, spans = n, "spans not exported");
            }
        }
    }
}

/// A span being timed. Inert while export is off or when the sampler drops it.
pub struct Span {
    live: Option<Live>,
    cx: TraceContext,
}

struct Live {
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    dropped: u32,
    events: Vec<opentelemetry::trace::Event>,
    error: Option<String>,
}

impl Span {
    /// Starts the span `cx.span_id` (child of `cx.parent_span_id`, remote when `remote`) named
    /// by `name` (called only when it will be exported). Its sampled flag, which the
    /// `traceparent` it hands on carries, is the sampler's decision.
    pub fn start(mut cx: TraceContext, kind: SpanKind, name: impl FnOnce() -> String) -> Span {
        let Some(p) = PIPELINE.get() else { return Span { live: None, cx } };
        let name = name();
        let parent = cx.parent_span_id.map(|parent| {
            let flags = if cx.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
            let sc =
                SpanContext::new(TraceId::from_bytes(cx.trace_id), SpanId::from_bytes(parent), flags, true, state(&cx));
            Context::new().with_remote_span_context(sc)
        });
        let decision =
            p.sampler.should_sample(parent.as_ref(), TraceId::from_bytes(cx.trace_id), &name, &kind, &[], &[]);
        cx.sampled = decision.decision == SamplingDecision::RecordAndSample;
        let live = cx.sampled.then(|| Live {
            name: name.into(),
            kind,
            start: SystemTime::now(),
            attributes: Vec::new(),
            dropped: 0,
            events: Vec::new(),
            error: None,
        });
        Span { live, cx }
    }

    /// A span that is never exported, keeping `cx` as its context.
    pub fn inert(cx: TraceContext) -> Span {
        Span { live: None, cx }
    }

    /// Names the span (when it is exported): a name known only once the work is done.
    pub fn rename(&mut self, name: impl FnOnce() -> String) {
        if let Some(l) = &mut self.live {
            l.name = name().into();
        }
    }

    /// The span's context: what its children continue (`traceparent()`).
    pub fn context(&self) -> &TraceContext {
        &self.cx
    }

    /// Sets an attribute (bounded in count and length).
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some(l) = &mut self.live {
            if l.attributes.len() >= SPAN_ATTRIBUTES_MAX {
                l.dropped += 1;
                return;
            }
            l.attributes.push(KeyValue::new(key, bounded(value.into())));
        }
    }

    /// Records an event now, with attributes.
    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(l) = &mut self.live {
            if l.events.len() < SPAN_EVENTS_MAX {
                l.events.push(opentelemetry::trace::Event::new(name, SystemTime::now(), attributes, 0));
            }
        }
    }

    /// Marks the span failed with `error.type` (a reason code, a low-cardinality kind).
    pub fn fail(&mut self, error_type: &str) {
        if let Some(l) = &mut self.live {
            l.error = Some(error_type.chars().take(64).collect());
        }
    }

    /// Ends the span now and queues it for export.
    pub fn end(self) {
        let (Some(mut l), Some(p)) = (self.live, PIPELINE.get()) else { return };
        let cx = self.cx;
        let status = match &l.error {
            Some(kind) => {
                l.attributes.push(KeyValue::new("error.type", kind.clone()));
                Status::error(kind.clone())
            }
            None => Status::Unset,
        };
        let span = SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes(cx.trace_id),
                SpanId::from_bytes(cx.span_id),
                TraceFlags::SAMPLED,
                false,
                state(&cx),
            ),
            parent_span_id: cx.parent_span_id.map_or(SpanId::INVALID, SpanId::from_bytes),
            parent_span_is_remote: cx.parent_span_id.is_some(),
            span_kind: l.kind,
            name: l.name,
            start_time: l.start,
            end_time: SystemTime::now(),
            attributes: l.attributes,
            dropped_attributes_count: l.dropped,
            events: {
                let mut events = SpanEvents::default();
                events.events = l.events;
                events
            },
            links: SpanLinks::default(),
            status,
            instrumentation_scope: p.scope.clone(),
        };
        if p.queue.try_send(span).is_err() {
            metrics::counter!("writ_trace_spans_dropped_total").increment(1);
        }
    }
}

fn state(cx: &TraceContext) -> TraceState {
    cx.tracestate.as_deref().and_then(|s| s.parse().ok()).unwrap_or_default()
}

/// A string value cut to [`ATTRIBUTE_BYTES_MAX`] bytes (at a character boundary).
fn bounded(value: Value) -> Value {
    match value {
        Value::String(s) if s.as_str().len() > ATTRIBUTE_BYTES_MAX => {
            let text = s.as_str();
            let cut = (0..=ATTRIBUTE_BYTES_MAX).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
            Value::String(text[..cut].to_string().into())
        }
        other => other,
    }
}

/// Fresh ids for a span: a random trace id (used when the span starts a trace) and span id.
pub fn fresh_ids() -> ([u8; 16], [u8; 8]) {
    let mut trace: [u8; 16] = rand::random();
    let mut span: [u8; 8] = rand::random();
    // All zeros is no id.
    trace[15] |= 1;
    span[7] |= 1;
    (trace, span)
}

/// A fresh span id.
pub fn span_id() -> [u8; 8] {
    fresh_ids().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_at_a_character() {
        let long = "é".repeat(200);
        let Value::String(cut) = bounded(Value::from(long)) else { panic!() };
        assert!(cut.as_str().len() <= ATTRIBUTE_BYTES_MAX && cut.as_str().chars().all(|c| c == 'é'));
    }

    #[test]
    fn while_off_a_span_is_inert_and_keeps_its_context() {
        let cx = TraceContext::child_of(None, None, fresh_ids);
        let mut span = Span::start(cx.clone(), SpanKind::Server, || unreachable!("not named while off"));
        span.set("k", "v");
        assert_eq!(span.context(), &cx);
        span.end();
    }
}
