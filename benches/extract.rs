//! Extract benchmark: 50,000 applications and three years of content from the emulator, in two
//! settings, (a) no spacing with 50 ms latency and (b) a 100 ms spacing policy on both sides.
//! It runs the real binary against an in-process emulator, several times, and prints medians and
//! ratios measured in this one run.
//!
//! `cargo bench --bench extract -- [--applications N] [--reps N] [--concurrency N]`

mod common;

use common::{arg, median};

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use creator_etl::emulator::{Emulator, EmulatorConfig, MAIN_ORG};

struct Setting {
    name: &'static str,
    latency_ms: u64,
    interval_ms: u64,
}

struct Sample {
    wall_s: f64,
    requests: u64,
    rate_limited: u64,
    peak_rss_mb: f64,
    in_flight: f64,
    /// Gaps between consecutive arrivals at the emulator, in ms.
    gaps_ms: Vec<f64>,
}

/// Peak resident set of a running process, from `/proc` (kB → MB).
fn peak_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

fn main() {
    let applications = arg("--applications", 50_000) as usize;
    let reps = arg("--reps", 3);
    let concurrency = arg("--concurrency", 16);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let settings = [
        Setting { name: "(a) no spacing, 50 ms latency", latency_ms: 50, interval_ms: 0 },
        Setting { name: "(b) 100 ms spacing policy", latency_ms: 0, interval_ms: 100 },
    ];
    let days = 3 * 365;
    let windows = (days as u64).div_ceil(90);
    println!("extract benchmark: {applications} applications, {days} days of content ({windows} windows), {reps} runs per setting, concurrency {concurrency}\n");
    println!("| setting | requests (min) | wall s, median | physical limit s | wall / limit | 429s | peak RSS MB | requests in flight, avg |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut spacing_lines = vec![];
    for s in &settings {
        let mut samples = vec![];
        let mut minimum = 0;
        for _ in 0..reps {
            let mut cfg = EmulatorConfig::for_tests(applications);
            cfg.latency = Duration::from_millis(s.latency_ms);
            cfg.rate.min_interval = Duration::from_millis(s.interval_ms);
            let emu = rt.block_on(Emulator::start(&cfg, "127.0.0.1:0".parse().unwrap())).unwrap();
            let mut per_status: BTreeMap<String, u64> = BTreeMap::new();
            for a in emu.state.applications(MAIN_ORG) {
                *per_status.entry(a.status.to_string()).or_default() += 1;
            }
            minimum = per_status.values().map(|n| n.div_ceil(100)).sum::<u64>() + windows;
            let out = tempfile::tempdir().unwrap();
            let started = Instant::now();
            let mut child = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
                .args(["extract", "--base-url", &emu.base_url, "--out"])
                .arg(out.path())
                .args(["--since-days", &(days - 1).to_string(), "--hourly-cap", "0", "-q"])
                .args(["--min-interval-ms", &s.interval_ms.to_string(), "--concurrency", &concurrency.to_string()])
                .env("CREATOR_API_KEY", "emu-full-key")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let mut peak = 0.0f64;
            while child.try_wait().unwrap().is_none() {
                if let Some(mb) = peak_rss_mb(child.id()) {
                    peak = peak.max(mb);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let wall_s = started.elapsed().as_secs_f64();
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "extract failed");
            let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(report["status"], "completed");
            let reqs = emu.state.requests();
            let busy: f64 = reqs.iter().filter_map(|r| Some(r.done_ms? - r.at_ms)).sum();
            let mut arrivals: Vec<f64> = reqs.iter().map(|r| r.at_ms).collect();
            arrivals.sort_by(f64::total_cmp);
            let gaps_ms: Vec<f64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
            let first = reqs.iter().map(|r| r.at_ms).fold(f64::INFINITY, f64::min);
            let last = reqs.iter().filter_map(|r| r.done_ms).fold(0.0, f64::max);
            samples.push(Sample {
                wall_s,
                requests: reqs.len() as u64,
                rate_limited: reqs.iter().filter(|r| r.status == 429).count() as u64,
                peak_rss_mb: peak,
                in_flight: busy / (last - first),
                gaps_ms,
            });
            rt.block_on(emu.stop());
        }
        let requests = samples.iter().map(|x| x.requests).max().unwrap();
        let limit = if s.interval_ms > 0 {
            requests as f64 * s.interval_ms as f64 / 1000.0
        } else {
            requests as f64 * s.latency_ms as f64 / 1000.0 / concurrency as f64
        };
        let wall = median(samples.iter().map(|x| x.wall_s).collect());
        println!(
            "| {} | {} ({}; +{}) | {:.2} | {:.2} | {:.3} | {} | {:.0} | {:.1} |",
            s.name,
            requests,
            minimum,
            requests - minimum,
            wall,
            limit,
            wall / limit,
            samples.iter().map(|x| x.rate_limited).sum::<u64>(),
            median(samples.iter().map(|x| x.peak_rss_mb).collect()),
            median(samples.iter().map(|x| x.in_flight).collect()),
        );
        if s.interval_ms > 0 {
            let mut gaps: Vec<f64> = samples.iter().flat_map(|x| x.gaps_ms.iter().copied()).collect();
            gaps.sort_by(f64::total_cmp);
            let pct = |q: f64| gaps[((gaps.len() - 1) as f64 * q) as usize];
            spacing_lines.push(format!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {} of {} |",
                s.name,
                pct(0.0),
                pct(0.001),
                pct(0.5),
                pct(0.999),
                gaps.iter().filter(|g| **g < s.interval_ms as f64).count(),
                gaps.len(),
            ));
        }
    }
    println!("\nGaps between consecutive arrivals at the emulator, all runs, in ms:\n");
    println!("| setting | smallest | 0.1 % | median | 99.9 % | shorter than the policy |");
    println!("|---|---|---|---|---|---|");
    for line in spacing_lines {
        println!("{line}");
    }
}
