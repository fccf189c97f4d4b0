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
    started: Instant,
}

impl Progress {
    /// Bars only when asked for and stderr is a terminal.
    pub fn new(bars: bool) -> Self {
        let multi = (bars && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Progress {
            multi,
            counters: Mutex::new(BTreeMap::new()),
            last_log: Mutex::new(Instant::now()),
            started: Instant::now(),
        }
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
        let counters = self.lock();
        let summary: Vec<String> = counters.iter().map(|(k, c)| format!("{k} {}/{}", c.done, c.total)).collect();
        // Every counter counts requests (pages, windows), so the rate so far gives the ETA.
        let (done, total) = counters.values().fold((0, 0), |(d, t), c| (d + c.done, t + c.total));
        let eta_s = (done > 0).then(|| {
            (self.started.elapsed().as_secs_f64() * (total - done.min(total)) as f64 / done as f64).round() as u64
        });
        drop(counters);
        // An absent ETA (nothing done yet) is left out of the line.
        tracing::info!(progress = %summary.join(", "), note, eta_s, "progress");
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

/// The stopwatch of a stage's steps: a load's, a transform's, a batch's reads.
pub(crate) struct Laps {
    at: Instant,
}

impl Laps {
    pub(crate) fn start() -> Self {
        Laps { at: Instant::now() }
    }

    /// Milliseconds since the last lap (or the start).
    pub(crate) fn lap(&mut self) -> u64 {
        let ms = self.at.elapsed().as_millis() as u64;
        self.at = Instant::now();
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_terminal_progress_is_a_log_line_every_few_seconds_with_an_eta() {
        let (out, _guard) = crate::testing::Captured::start();
        let mut p = Progress::new(true); // stderr is not a terminal under the test harness
        assert!(p.multi.is_none());
        p.started -= Duration::from_secs(30);
        p.set("accepted pages", 1, 10);
        p.set("windows", 0, 2);
        p.inc("accepted pages", "200 rows");
        assert_eq!(out.text(), "", "nothing before {LOG_EVERY:?}");
        let earlier = Instant::now() - Duration::from_secs(60);
        *p.last_log.lock().unwrap() = earlier;
        p.inc("accepted pages", "300 rows");
        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("accepted pages 3/10, windows 0/2") && text.contains("300 rows"), "{text}");
        assert!(text.contains("eta_s=90"), "3 of 12 requests in 30 s: {text}");
        p.inc("accepted pages", "400 rows");
        assert_eq!(out.text().matches("eta_s=").count(), 1, "one line per interval");
    }
}
