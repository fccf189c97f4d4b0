//! Actions benchmark: the real binary's `actions apply` against an in-process emulator.
//! (a) 20 payout marks (always at least 2 s apart): target 2.05 s × 19 + 1 s;
//! (b) 500 sale updates at a 100 ms spacing policy on both sides: wall time against the limit
//!     requests × interval.
//! Prints medians over the runs and the ratios measured in this one run.
//!
//! `cargo bench --bench actions -- [--reps N] [--updates N] [--interval-ms MS]`

mod common;

use common::{arg, median};

use std::process::Command;
use std::time::{Duration, Instant};

use creator_etl::api::models::SaleStatus;
use creator_etl::emulator::{Emulator, EmulatorConfig, PayoutKind, MAIN_ORG};

struct Sample {
    wall_s: f64,
    requests: usize,
    rate_limited: usize,
    min_gap_ms: f64,
    median_gap_ms: f64,
    /// From the first request's arrival to the last one's answer, at the emulator.
    span_s: f64,
    /// Median time from arrival to answer at the emulator.
    answer_ms: f64,
}

/// Applies `rows` with the real binary against a fresh emulator; `interval_ms` on both sides.
fn apply(
    rt: &tokio::runtime::Runtime,
    cfg: &EmulatorConfig,
    rows: impl Fn(&Emulator) -> Vec<String>,
    interval_ms: u64,
) -> Sample {
    let emu = rt.block_on(Emulator::start(cfg, "127.0.0.1:0".parse().unwrap())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reviewed.csv");
    std::fs::write(&file, format!("action,approved,sale_id,creator_payout_uuid,total\n{}\n", rows(&emu).join("\n")))
        .unwrap();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["actions", "apply"])
        .arg(&file)
        .args(["--base-url", &emu.base_url, "--hourly-cap", "0", "-q", "--min-interval-ms", &interval_ms.to_string()])
        .arg("--out")
        .arg(dir.path().join("out"))
        .env("CREATOR_API_KEY", "emu-full-key")
        .output()
        .unwrap();
    let wall_s = started.elapsed().as_secs_f64();
    assert!(output.status.success(), "apply failed: {}", String::from_utf8_lossy(&output.stderr));
    let reqs = emu.state.requests();
    let gaps: Vec<f64> = reqs.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
    let last_done = reqs.iter().filter_map(|r| r.done_ms).fold(0.0, f64::max);
    let sample = Sample {
        wall_s,
        requests: reqs.len(),
        rate_limited: reqs.iter().filter(|r| r.status == 429).count(),
        min_gap_ms: gaps.iter().copied().fold(f64::INFINITY, f64::min),
        median_gap_ms: if gaps.is_empty() { 0.0 } else { median(gaps) },
        span_s: (last_done - reqs.first().map_or(0.0, |r| r.at_ms)) / 1000.0,
        answer_ms: median(reqs.iter().filter_map(|r| Some(r.done_ms? - r.at_ms)).collect()),
    };
    rt.block_on(emu.stop());
    sample
}

fn main() {
    let reps = arg("--reps", 3);
    let updates = arg("--updates", 500) as usize;
    let interval_ms = arg("--interval-ms", 100);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("actions benchmark: {reps} runs per setting; wall time is the whole `actions apply` process\n");
    println!("| setting | requests | wall s, median | limit s | wall / limit | min gap ms | median gap ms | first to last request s | answer ms, median | 429s |");
    println!("|---|---|---|---|---|---|---|---|---|---|");

    let mut cfg = EmulatorConfig::for_tests(10);
    let marks: Vec<Sample> = (0..reps)
        .map(|_| {
            let rows = |emu: &Emulator| {
                emu.state
                    .payouts()
                    .into_iter()
                    .filter(|p| {
                        p.org == MAIN_ORG
                            && matches!(p.kind, PayoutKind::DueCredit | PayoutKind::PendingRequirementsCredit)
                    })
                    .take(20)
                    .map(|p| format!("mark_payout,yes,,{},", p.uuid))
                    .collect()
            };
            apply(&rt, &cfg, rows, 0)
        })
        .collect();
    report("(a) 20 payout marks, client spacing 0", &marks, 2.05 * 19.0 + 1.0);

    cfg.data.sales = updates;
    cfg.rate.min_interval = Duration::from_millis(interval_ms);
    let sales: Vec<Sample> = (0..reps)
        .map(|_| {
            let rows = |emu: &Emulator| {
                emu.state
                    .sales()
                    .into_iter()
                    .filter(|s| s.org == MAIN_ORG && s.updatable() && s.status != SaleStatus::Cancelled)
                    .take(updates)
                    .map(|s| format!("update_sale,yes,{},,{}", s.id, s.total + 1))
                    .collect()
            };
            apply(&rt, &cfg, rows, interval_ms)
        })
        .collect();
    let limit = sales[0].requests as f64 * interval_ms as f64 / 1000.0;
    report(&format!("(b) {updates} sale updates, {interval_ms} ms spacing"), &sales, limit);
}

fn report(name: &str, samples: &[Sample], limit: f64) {
    let wall = median(samples.iter().map(|s| s.wall_s).collect());
    println!(
        "| {name} | {} | {wall:.2} | {limit:.2} | {:.3} | {:.0} | {:.1} | {:.2} | {:.1} | {} |",
        samples[0].requests,
        wall / limit,
        samples.iter().map(|s| s.min_gap_ms).fold(f64::INFINITY, f64::min),
        median(samples.iter().map(|s| s.median_gap_ms).collect()),
        median(samples.iter().map(|s| s.span_s).collect()),
        median(samples.iter().map(|s| s.answer_ms).collect()),
        samples.iter().map(|s| s.rate_limited).sum::<usize>(),
    );
}
