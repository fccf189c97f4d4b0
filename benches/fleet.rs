//! Fleet benchmark: `creator-etl fleet run` (the real binary) over N organizations of the
//! multi-organization emulator, each key with its own spacing policy. Reports, per repetition,
//! the wall time, the slowest organization's own pacing limit (its requests × the interval:
//! what it would take alone), their ratio, 429s, and the fleet process's peak RSS and CPU time
//! (sampled from /proc every 20 ms).
//!
//! `cargo bench --profile dev --bench fleet -- [--orgs N] [--applications N] [--interval-ms MS]
//! [--reps N] [--max-requests N] [--max-loads N]`
//!
//! `--max-requests N` stops every organization after N requests (no load): the fleet's own
//! overhead at scale, as for the 10,000-organization run.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{arg, median};
use creator_etl::emulator::{org_key, Emulator, EmulatorConfig};

/// Peak RSS (MB) and CPU seconds of a running process, from /proc.
fn sample(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<f64>().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((hwm / 1024.0, ticks / 100.0))
}

fn main() {
    let orgs = arg("--orgs", 1000) as u32;
    let applications = arg("--applications", 200) as usize;
    let interval = arg("--interval-ms", 100);
    let reps = arg("--reps", 3) as usize;
    let max_requests = arg("--max-requests", 0);
    let max_loads = arg("--max-loads", 2);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.data.organizations = orgs;
    cfg.data.org_applications = applications;
    cfg.rate.min_interval = Duration::from_millis(interval);
    let emu = rt.block_on(Emulator::start(&cfg, "127.0.0.1:0".parse().unwrap())).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.toml");
    let mut text = format!("[defaults]\nmin_interval_ms = {interval}\nhourly_cap = 0\nsince_days = 365\n");
    for k in 1..=orgs {
        text.push_str(&format!("[[organization]]\nname = \"org-{k}\"\nkey_env = \"FLEET_KEY_{k}\"\n"));
    }
    std::fs::File::create(&file).unwrap().write_all(text.as_bytes()).unwrap();

    println!(
        "fleet: {orgs} organizations x {applications} applications, {interval} ms per key, --max-loads {max_loads}{}",
        if max_requests > 0 { format!(", --max-requests-per-org {max_requests}") } else { String::new() }
    );
    let (mut walls, mut ratios, mut rss, mut cpu) = (vec![], vec![], vec![], vec![]);
    for rep in 0..reps {
        let out = dir.path().join(format!("out-{rep}"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_creator-etl"));
        cmd.args(["--quiet", "--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "fleet", "run", "--config"])
            .arg(&file)
            .args(["--max-loads", &max_loads.to_string()])
            .env_remove("CREATOR_ETL_LAKE")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if max_requests > 0 {
            cmd.args(["--max-requests-per-org", &max_requests.to_string()]);
        }
        for k in 1..=orgs {
            cmd.env(format!("FLEET_KEY_{k}"), org_key(k));
        }
        let before = emu.state.violations().len();
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
        let (mut peak, mut cpu_s) = (0.0f64, 0.0f64);
        while child.try_wait().unwrap().is_none() {
            if let Some((r, c)) = sample(pid) {
                peak = peak.max(r);
                cpu_s = cpu_s.max(c);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let wall = started.elapsed().as_secs_f64();
        let report: serde_json::Value = serde_json::from_str(&reader.join().unwrap()).expect("fleet report");
        let list = report["organizations"].as_array().unwrap();
        let slowest = list.iter().map(|o| o["requests"].as_u64().unwrap()).max().unwrap_or(0);
        let limit = slowest.saturating_sub(1) as f64 * interval as f64 / 1000.0;
        let limited: u64 = list.iter().map(|o| o["rate_limited"].as_u64().unwrap()).sum();
        let requests: u64 = list.iter().map(|o| o["requests"].as_u64().unwrap()).sum();
        println!(
            "  rep {rep}: wall {wall:.2} s; slowest organization {slowest} requests, pacing limit {limit:.2} s, ratio {:.2}; {requests} requests, {limited} 429s ({} emulator violations); outcomes {}; peak RSS {peak:.0} MB; CPU {cpu_s:.1} s",
            wall / limit.max(1e-9),
            emu.state.violations().len() - before,
            report["outcomes"]
        );
        let violations = emu.state.violations();
        let mut gaps: Vec<f64> = violations[before..].iter().filter_map(|v| v.gap_ms).collect();
        if !gaps.is_empty() {
            gaps.sort_by(f64::total_cmp);
            println!(
                "    429s: gaps at the emulator min {:.0} ms, median {:.0} ms, max {:.0} ms",
                gaps[0],
                gaps[gaps.len() / 2],
                gaps[gaps.len() - 1]
            );
        }
        walls.push(wall);
        ratios.push(wall / limit.max(1e-9));
        rss.push(peak);
        cpu.push(cpu_s);
    }
    println!(
        "median of {reps}: wall {:.2} s, ratio to the slowest organization's pacing limit {:.2}, peak RSS {:.0} MB, CPU {:.1} s",
        median(walls),
        median(ratios),
        median(rss),
        median(cpu)
    );
}
