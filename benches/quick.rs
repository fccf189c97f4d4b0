//! Quick-sync benchmark: `creator-etl run` (the real binary) against an emulator of N
//! applications, with k status changes at random positions between syncs. For each k: the
//! requests and wall time of `--sync quick` (median of the repetitions), then one `--sync auto`
//! and one `--sync full` (the reconcile, which also resets the baseline). The policy is the
//! service's 2 s spacing scaled to `--interval-ms` (100 ms by default, 20 times faster); the
//! time at 2 s is projected as requests × 2 s, since the spacing binds.
//!
//! `cargo bench --profile dev --bench quick -- [--applications N] [--interval-ms MS] [--reps N]`

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{arg, median};
use creator_etl::api::models::ApplicationStatus;
use creator_etl::emulator::{Emulator, EmulatorConfig, EmulatorState, MAIN_ORG};

const KEY: &str = "emu-full-key";

/// Runs one sync; its report's `(requests, list requests, sync summary)` and the wall time.
fn sync(base_url: &str, out: &Path, interval: u64, mode: &str) -> (u64, u64, serde_json::Value, f64) {
    let started = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["--quiet", "--base-url", base_url, "--out", out.to_str().unwrap()])
        .args(["--min-interval-ms", &interval.to_string(), "--hourly-cap", "0", "run", "--sync", mode])
        .env("CREATOR_API_KEY", KEY)
        .env_remove("CREATOR_ETL_LAKE")
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &report["extract"];
    let list: u64 = e["requests"]["requests"]["list_applications"]
        .as_object()
        .map_or(0, |m| m.values().map(|v| v.as_u64().unwrap()).sum());
    (e["requests"]["requests_total"].as_u64().unwrap(), list, e["sync"].clone(), wall)
}

/// k status changes at random positions (any status to any other).
fn change(state: &EmulatorState, k: usize, rng: &mut fastrand::Rng) {
    let statuses = ApplicationStatus::KNOWN;
    let mut done = 0;
    while done < k {
        let (from, to) = (&statuses[rng.usize(0..6)], &statuses[rng.usize(0..6)]);
        let list: Vec<i64> =
            state.applications(MAIN_ORG).into_iter().filter(|a| a.status == *from).map(|a| a.id).collect();
        if from == to || list.is_empty() {
            continue;
        }
        state.set_application_status(list[rng.usize(0..list.len())], to.clone());
        done += 1;
    }
}

/// Applications whose status in the warehouse differs from the emulator's.
fn wrong(state: &EmulatorState, out: &Path) -> usize {
    let c = duckdb::Connection::open(out.join("warehouse.duckdb")).unwrap();
    let mut st = c.prepare("SELECT id, status FROM applications").unwrap();
    let got: BTreeMap<i64, String> =
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    let truth: BTreeMap<i64, String> =
        state.applications(MAIN_ORG).into_iter().map(|a| (a.id, a.status.to_string())).collect();
    truth.iter().filter(|(id, s)| got.get(id) != Some(s)).count()
        + got.keys().filter(|id| !truth.contains_key(id)).count()
}

fn main() {
    let applications = arg("--applications", 10_000) as usize;
    let interval = arg("--interval-ms", 100);
    let reps = arg("--reps", 3) as usize;

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut cfg = EmulatorConfig::for_tests(applications);
    cfg.rate.min_interval = Duration::from_millis(interval);
    let emu = rt.block_on(Emulator::start(&cfg, "127.0.0.1:0".parse().unwrap())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut rng = fastrand::Rng::with_seed(2026);

    println!("quick sync: {applications} applications, {interval} ms spacing (2 s scaled), {reps} quick syncs per k");
    let (requests, list, _, wall) = sync(&emu.base_url, &out, interval, "full");
    println!("first full sync: {requests} requests ({list} pages of applications), wall {wall:.2} s");
    println!(
        "| k | quick requests (median, max) | quick wall at {interval} ms | at 2 s | exact after quick | auto | full requests | full wall | at 2 s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for k in [0usize, 1, 5, 20] {
        let (mut req, mut walls, mut exact) = (vec![], vec![], 0);
        for _ in 0..reps {
            change(&emu.state, k, &mut rng);
            let (requests, _, s, wall) = sync(&emu.base_url, &out, interval, "quick");
            assert_eq!(s["mode"], "quick", "{s}");
            assert_eq!(s["counts_agree"], true, "{s}");
            req.push(requests as f64);
            walls.push(wall);
            exact += usize::from(wrong(&emu.state, &out) == 0);
        }
        change(&emu.state, k, &mut rng);
        let (auto, _, auto_sync, _) = sync(&emu.base_url, &out, interval, "auto");
        change(&emu.state, k, &mut rng);
        let (full, _, _, full_wall) = sync(&emu.base_url, &out, interval, "full");
        assert_eq!(wrong(&emu.state, &out), 0, "a full sync is exact");
        let max = req.iter().copied().fold(0.0, f64::max);
        let med = median(req);
        println!(
            "| {k} | {med:.0}, {max:.0} | {:.2} s | {:.0} s | {exact} of {reps} | {auto} ({}) | {full} | {full_wall:.2} s | {:.0} s |",
            median(walls),
            med * 2.0,
            auto_sync["mode"].as_str().unwrap_or("?"),
            full as f64 * 2.0,
        );
    }
}
