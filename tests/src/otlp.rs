//! An OTLP/HTTP collector for the trace tests: `tests/python/otlp_receiver.py` as a real process
//! (decoding with the official `opentelemetry-proto`), keeping every span it received.

use std::process::Child;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The receiver, killed on drop.
pub struct Receiver {
    pub port: u16,
    child: Child,
    spans: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    /// Starts it and waits for its port.
    pub fn start() -> Receiver {
        let (child, port, spans) = crate::upstream::spawn_reporting("otlp_receiver.py", &[], |l| l.starts_with('{'));
        Receiver { port, child, spans }
    }

    /// Its base URL (exporters append `/v1/traces`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().iter().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
