//! Per-run request counters, shared by every clone of a client; the run report stores a
//! [`MetricsSnapshot`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the client did during a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]

pub struct MetricsSnapshot {
    /// Responses by endpoint, then by status code (`transport_error` when there was none).
    pub requests: BTreeMap<String, BTreeMap<String, u64>>,
    pub requests_total: u64,
    /// Attempts after the first, over all requests.
    pub retries: u64,
    /// 429 answers received.
    pub rate_limited: u64,
    /// Requests that had to wait for the pacer, and the total time they waited.
    pub pacing_waits: u64,
    pub pacing_wait_ms: u64,
    /// Time spent in retry backoff.
    pub backoff_wait_ms: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
}

impl MetricsSnapshot {
    /// Adds another run's (or invocation's) counters to these.
    pub fn merge(&mut self, other: &MetricsSnapshot) {
        for (endpoint, by_status) in &other.requests {
            let mine = self.requests.entry(endpoint.clone()).or_default();
            for (status, n) in by_status {
                *mine.entry(status.clone()).or_default() += n;
            }
        }
        self.requests_total += other.requests_total;
        self.retries += other.retries;
        self.rate_limited += other.rate_limited;
        self.pacing_waits += other.pacing_waits;
        self.pacing_wait_ms += other.pacing_wait_ms;
        self.backoff_wait_ms += other.backoff_wait_ms;
        self.bytes_received += other.bytes_received;
        self.bytes_sent += other.bytes_sent;
    }
}

#[derive(Debug, Default)]
pub(crate) struct Metrics(Mutex<MetricsSnapshot>);

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut MetricsSnapshot)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn response(&self, endpoint: &str, status: Option<u16>, sent: usize, received: usize) {
        self.with(|m| {
            let key = status.map_or_else(|| "transport_error".to_owned(), |s| s.to_string());
            *m.requests.entry(endpoint.to_owned()).or_default().entry(key).or_default() += 1;
            m.requests_total += 1;
            m.bytes_sent += sent as u64;
            m.bytes_received += received as u64;
            if status == Some(429) {
                m.rate_limited += 1;
            }
        });
    }

    pub(crate) fn paced(&self, waited: Duration) {
        if waited >= Duration::from_millis(1) {
            self.with(|m| {
                m.pacing_waits += 1;
                m.pacing_wait_ms += waited.as_millis() as u64;
            });
        }
    }

    pub(crate) fn retry(&self, backoff: Duration) {
        self.with(|m| {
            m.retries += 1;
            m.backoff_wait_ms += backoff.as_millis() as u64;
        });
    }
}
