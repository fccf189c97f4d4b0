//! Progress of long stages: bars when stderr is a terminal, otherwise a structured log line every
//! few seconds (never bars in CI logs).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

const LOG_EVERY: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Counter {
    done: u64,
    total: u64,
    bar: Option<ProgressBar>,
}

/// Named counters (`pending pages`, `windows`, …) shown as bars or logged periodically.
pub struct Progress {
    multi: Option<MultiProgress>,
    counters: Mutex<BTreeMap<String, Counter>>,
    last_log: Mutex<Instant>,
}

impl Progress {
    /// Bars only when asked for and stderr is a terminal.
    pub fn new(bars: bool) -> Self {
        let multi = (bars && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Progress { multi, counters: Mutex::new(BTreeMap::new()), last_log: Mutex::new(Instant::now()) }
    }

    /// Silent progress, for library callers and tests.
    pub fn hidden() -> Self {
        Progress { multi: None, counters: Mutex::new(BTreeMap::new()), last_log: Mutex::new(Instant::now()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Counter>> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets (or resets) a counter's total and progress.
    pub fn set(&self, key: &str, done: u64, total: u64) {
        let mut counters = self.lock();
        let c = counters.entry(key.to_owned()).or_default();
        c.done = done;
        c.total = total;
        if let Some(multi) = &self.multi {
            let bar = c.bar.get_or_insert_with(|| {
                let bar = multi.add(ProgressBar::new(total));
                bar.set_style(
                    ProgressStyle::with_template("{prefix:>22} [{bar:30}] {pos}/{len} {msg} eta {eta}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar.set_prefix(key.to_owned());
                bar
            });
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    /// Advances a counter by one, with an optional note (rows, retries) for its bar.
    pub fn inc(&self, key: &str, note: &str) {
        {
            let mut counters = self.lock();
            let c = counters.entry(key.to_owned()).or_default();
            c.done += 1;
            c.total = c.total.max(c.done);
            if let Some(bar) = &c.bar {
                bar.set_position(c.done);
                bar.set_message(note.to_owned());
            }
        }
        self.maybe_log(note);
    }

    fn maybe_log(&self, note: &str) {
        if self.multi.is_some() {
            return;
        }
        let mut last = self.last_log.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < LOG_EVERY {
            return;
        }
        *last = Instant::now();
        let summary: Vec<String> = self.lock().iter().map(|(k, c)| format!("{k} {}/{}", c.done, c.total)).collect();
        tracing::info!(progress = %summary.join(", "), note, "progress");
    }

    /// Removes the bars.
    pub fn finish(&self) {
        for c in self.lock().values() {
            if let Some(bar) = &c.bar {
                bar.finish_and_clear();
            }
        }
    }
}
