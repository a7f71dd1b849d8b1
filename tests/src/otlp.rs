//! An OTLP/HTTP collector for the trace tests: `tests/python/otlp_receiver.py` as a real process
//! (decoding with the official `opentelemetry-proto`), keeping every span it received.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The receiver, killed on drop.
pub struct Receiver {
    pub port: u16,
    child: Child,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts it and waits for its port.
    pub fn start() -> Receiver {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .arg(crate::upstream::python_dir().join("otlp_receiver.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the OTLP receiver (python3 with opentelemetry-proto: `make pydeps`)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let kept = spans.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                if v.get("port").is_some() {
                    let _ = tx.send(v);
                } else {
                    kept.lock().unwrap().push(v);
                }
            }
        });
        let first = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the receiver reports its port");
        let port = first["port"].as_u64().expect("a port") as u16;
        Receiver { port, child, spans }
    }

    /// Its base URL (exporters append `/v1/traces`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
