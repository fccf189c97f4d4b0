//! Fleet benchmark: `creator-etl fleet run` (the real binary) over N organizations of the
//! multi-organization emulator, each key with its own spacing policy. Reports, per repetition,
//! the wall time, the slowest organization's own pacing limit (its requests × the interval:
//! what it would take alone), their ratio, 429s, and the fleet process's peak RSS and CPU time
//! (sampled from /proc every 20 ms).
//!
//! `cargo bench --profile dev --bench fleet -- [--orgs N] [--applications N] [--interval-ms MS]
//! [--reps N] [--max-requests N] [--max-loads N] [--warehouse fleet|per-org] [--again] [--floor]
//! [--no-report] [--pause-s N]`
//!
//! `--warehouse` is passed to `fleet run` (default `fleet`, the command's own default), and so is
//! `--no-report`; without it, each run's line says what the HTML report made and kept, and how
//! long it took (included in the run's wall time).
//!
//! `--again` runs every repetition on the same `--out`, after a first full sync that is not
//! counted: a scheduled fleet's steady state, quick syncs of unchanged organizations.
//!
//! `--max-requests N` stops every organization after N requests (no load): the fleet's own
//! overhead at scale, as for the 10,000-organization run.
//!
//! `--log FILE` keeps the fleet's log in FILE (`RUST_LOG` as given, else the fleet's, its
//! batches', their previous rows' reads, transforms', stagings', transactions' and Parquet
//! exports' `debug` lines: where a batch's time goes) and prints the fleet process's CPU per
//! thread name (sampled every 0.5 s).
//!
//! `--pause-s N` waits N seconds before each run (default 0), so that the file system is quiet,
//! as between a schedule's runs: on ext4 without a journal, allocating an inode skips every inode
//! freed in the last minute (six minutes while not yet written back), so a run right after
//! another pays for the other's deletions, its temporary directory's removal included. The sixth
//! session's figures used 120 s.
//!
//! `FLEET_BENCH_ARGS`, when set, adds its words to `fleet run`'s flags (to compare settings:
//! `FLEET_BENCH_ARGS="--batch-size 250"`).
//!
//! `FLEET_BENCH_WRAP`, when set, is a command the fleet binary runs under, split on spaces (for
//! a heap profile: `FLEET_BENCH_WRAP="heaptrack -o /tmp/fleet"`); the peak RSS and CPU are
//! then the wrapper's process's.
//!
//! `--floor` runs, instead of the binary, the least any fleet could do in this setup: one
//! library `Client` per key, paced as a fleet paces, sending the same requests as an
//! organization's full sync and keeping nothing (no landing, no resume state, no load). It
//! reports that floor's wall time against the same pacing limit, and the CPU time of the
//! emulator's thread and of the clients' threads.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{arg, flag, median};
use creator_etl::api::models::ApplicationStatus;
use creator_etl::api::{ApiKey, ApplicationsQuery, Client, ClientConfig, PacingConfig, Transport};
use creator_etl::emulator::{org_key, Emulator, EmulatorConfig};
use creator_etl::extract::landing::windows;

/// The CPU seconds (user and system) a `/proc/…/stat` line records, after the `(name)`.
fn stat_cpu(after_name: &str) -> Option<f64> {
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    Some((fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?) / 100.0)
}

/// Peak RSS (MB) and CPU seconds of a running process, from /proc.
fn sample(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<f64>().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some((hwm / 1024.0, stat_cpu(stat.rsplit_once(')')?.1)?))
}

/// CPU seconds of process `pid`'s threads (`self` for this one): (thread id, name, seconds).
fn threads_of(pid: &str) -> Vec<(u32, String, f64)> {
    let mut out = vec![];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let Some((tid, name)) = head.split_once(" (") else { continue };
        out.push((tid.trim().parse().unwrap_or(0), name.to_owned(), stat_cpu(rest).unwrap_or(0.0)));
    }
    out
}

/// CPU seconds of this process's threads whose name starts with `prefix`, from /proc.
fn threads_cpu(prefix: &str) -> f64 {
    threads_of("self").into_iter().filter(|(_, name, _)| name.starts_with(prefix)).map(|(.., s)| s).sum()
}

/// One organization's full sync with nothing kept: every status's pages, then the statistics
/// windows of the last 365 days. Returns its requests.
async fn floor_org(client: Client) -> u64 {
    let mut requests = 0;
    for status in ApplicationStatus::KNOWN {
        let first = client.list_applications(&ApplicationsQuery::page(status.clone(), 1)).await.unwrap();
        requests += 1;
        for page in 2..=first.value.meta.page_count {
            client.list_applications(&ApplicationsQuery::page(status.clone(), page)).await.unwrap();
            requests += 1;
        }
    }
    let today = chrono::Utc::now().date_naive();
    for (start, end) in windows(today - chrono::Duration::days(365), today, 90) {
        client.content_24h(start, end, 10_000).await.unwrap();
        requests += 1;
    }
    requests
}

/// The floor (see the module's documentation): every organization at once on a 2-thread
/// runtime, as the fleet's process has.
fn floor(emu: &Emulator, orgs: u32, interval: u64, reps: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("floor-client")
        .enable_all()
        .build()
        .unwrap();
    let (mut walls, mut ratios) = (vec![], vec![]);
    for rep in 0..reps {
        std::thread::sleep(Duration::from_millis(interval));
        let (emu_cpu, client_cpu) = (threads_cpu("emulator"), threads_cpu("floor-client"));
        let before = emu.state.violations().len();
        let started = Instant::now();
        let counts: Vec<u64> = rt.block_on(async {
            let transport = Transport::new(Duration::from_secs(10), Duration::from_secs(60)).unwrap();
            let mut tasks = tokio::task::JoinSet::new();
            for k in 1..=orgs {
                let mut config =
                    ClientConfig::new(emu.base_url.parse().unwrap(), ApiKey::new(&org_key(k), "bench").unwrap());
                config.pacing = PacingConfig {
                    min_interval: Duration::from_millis(interval),
                    hourly_cap: None,
                    wait_for_answers: true,
                    ..PacingConfig::default()
                };
                let client = Client::with_transport(config, &transport).unwrap();
                tasks.spawn(floor_org(client));
            }
            tasks.join_all().await
        });
        let wall = started.elapsed().as_secs_f64();
        let slowest = counts.iter().copied().max().unwrap_or(0);
        let limit = slowest.saturating_sub(1) as f64 * interval as f64 / 1000.0;
        println!(
            "  floor rep {rep}: wall {wall:.2} s; slowest organization {slowest} requests, pacing limit {limit:.2} s, ratio {:.2}; {} requests, {} 429s; CPU: emulator thread {:.1} s, client threads {:.1} s",
            wall / limit.max(1e-9),
            counts.iter().sum::<u64>(),
            emu.state.violations().len() - before,
            threads_cpu("emulator") - emu_cpu,
            threads_cpu("floor-client") - client_cpu,
        );
        walls.push(wall);
        ratios.push(wall / limit.max(1e-9));
    }
    println!("floor, median of {reps}: wall {:.2} s, ratio {:.2}", median(walls), median(ratios));
}

fn main() {
    let orgs = arg("--orgs", 1000) as u32;
    let applications = arg("--applications", 200) as usize;
    let interval = arg("--interval-ms", 100);
    let reps = arg("--reps", 3) as usize;
    let max_requests = arg("--max-requests", 0);
    let max_loads = arg("--max-loads", 2);
    let pause_s = arg("--pause-s", 0);
    let args: Vec<String> = std::env::args().collect();
    let warehouse = args
        .iter()
        .position(|a| a == "--warehouse")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "fleet".to_owned());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("emulator")
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.data.organizations = orgs;
    cfg.data.org_applications = applications;
    cfg.rate.min_interval = Duration::from_millis(interval);
    let emu = rt.block_on(Emulator::start(&cfg, "127.0.0.1:0".parse().unwrap())).unwrap();

    if flag("--floor") {
        println!("floor: {orgs} organizations x {applications} applications, {interval} ms per key");
        floor(&emu, orgs, interval, reps);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.toml");
    let mut text = format!("[defaults]\nmin_interval_ms = {interval}\nhourly_cap = 0\nsince_days = 365\n");
    for k in 1..=orgs {
        text.push_str(&format!("[[organization]]\nname = \"org-{k}\"\nkey_env = \"FLEET_KEY_{k}\"\n"));
    }
    std::fs::File::create(&file).unwrap().write_all(text.as_bytes()).unwrap();

    println!(
        "fleet: {orgs} organizations x {applications} applications, {interval} ms per key, --warehouse {warehouse}, --max-loads {max_loads}{}",
        if max_requests > 0 { format!(", --max-requests-per-org {max_requests}") } else { String::new() }
    );
    let (mut walls, mut ratios, mut rss, mut cpu, mut reports) = (vec![], vec![], vec![], vec![], vec![]);
    // With `--again`, every run syncs the same `--out`: the first (not counted) is a full sync,
    // the next ones are what a scheduled fleet does, quick syncs of unchanged organizations.
    let again = flag("--again");
    let log = args.iter().position(|a| a == "--log").and_then(|i| args.get(i + 1).cloned());
    for run in 0..reps + usize::from(again) {
        let rep = run.wrapping_sub(usize::from(again));
        // A fresh `--out` has no pacing memory: the keys' previous requests (the last run's)
        // must be one interval behind.
        std::thread::sleep(Duration::from_millis(interval));
        // `--pause-s N`: a quiet file system before each run, as between a schedule's runs. On
        // ext4 without a journal, allocating an inode skips those freed in the last minute (six
        // minutes while not yet written back), so a run right after another (or after the last
        // one's temporary directory was removed) pays for those deletions.
        std::thread::sleep(Duration::from_secs(pause_s));
        let out = dir.path().join(if again { "out".to_owned() } else { format!("out-{rep}") });
        let wrap = std::env::var("FLEET_BENCH_WRAP").unwrap_or_default();
        let mut wrapper = wrap.split_whitespace();
        let mut cmd = match wrapper.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(wrapper).arg(env!("CARGO_BIN_EXE_creator-etl"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_creator-etl")),
        };
        cmd.args(["--quiet", "--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "fleet", "run", "--config"])
            .arg(&file)
            .args(["--max-loads", &max_loads.to_string(), "--warehouse", &warehouse])
            .env_remove("CREATOR_ETL_LAKE")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(log) = &log {
            let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| {
                "info,creator_etl::load::fleet_warehouse=debug,creator_etl::fleet::batch=debug,creator_etl::load::commit=debug,creator_etl::load::warehouse::readback=debug,creator_etl::load::parquet=debug,creator_etl::transform=debug"
                    .into()
            });
            cmd.env("RUST_LOG", filter).stderr(std::fs::File::create(format!("{log}.{run}")).unwrap());
        }
        if max_requests > 0 {
            cmd.args(["--max-requests-per-org", &max_requests.to_string()]);
        }
        if flag("--no-report") {
            cmd.arg("--no-report");
        }
        // More `fleet run` flags, for comparing settings (`FLEET_BENCH_ARGS="--batch-size 250"`).
        cmd.args(std::env::var("FLEET_BENCH_ARGS").unwrap_or_default().split_whitespace());
        for k in 1..=orgs {
            cmd.env(format!("FLEET_KEY_{k}"), org_key(k));
        }
        let before = emu.state.violations().len();
        let emu_cpu = threads_cpu("emulator");
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
        let (mut peak, mut cpu_s) = (0.0f64, 0.0f64);
        let mut per_thread: std::collections::BTreeMap<u32, (String, f64)> = Default::default();
        let mut tick = 0u64;
        while child.try_wait().unwrap().is_none() {
            if let Some((r, c)) = sample(pid) {
                peak = peak.max(r);
                cpu_s = cpu_s.max(c);
            }
            if log.is_some() && tick.is_multiple_of(25) {
                for (tid, name, s) in threads_of(&pid.to_string()) {
                    per_thread.insert(tid, (name, s));
                }
            }
            tick += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        if log.is_some() {
            let mut by_name: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
            for (name, s) in per_thread.into_values() {
                let e = by_name.entry(name).or_default();
                e.0 += 1;
                e.1 += s;
            }
            let list: Vec<String> = by_name.iter().map(|(n, (k, s))| format!("{n} x{k} {s:.1} s")).collect();
            println!("    CPU by thread name (sampled every 0.5 s): {}", list.join("; "));
        }
        let wall = started.elapsed().as_secs_f64();
        let report: serde_json::Value = serde_json::from_str(&reader.join().unwrap()).expect("fleet report");
        let list = report["organizations"].as_array().unwrap();
        let slowest = list.iter().map(|o| o["requests"].as_u64().unwrap()).max().unwrap_or(0);
        let limit = slowest.saturating_sub(1) as f64 * interval as f64 / 1000.0;
        let limited: u64 = list.iter().map(|o| o["rate_limited"].as_u64().unwrap()).sum();
        let requests: u64 = list.iter().map(|o| o["requests"].as_u64().unwrap()).sum();
        let mut modes = std::collections::BTreeMap::new();
        for o in list {
            *modes.entry(o["sync"].as_str().unwrap_or("none").to_owned()).or_insert(0) += 1;
        }
        let label = if rep == usize::MAX { "first sync (not counted)".to_owned() } else { format!("rep {rep}") };
        let html = &report["report"];
        let report_s = (!html.is_null()).then(|| html["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0);
        if !html.is_null() {
            println!(
                "    HTML report: {} pages made, {} kept, {:.2} s{}",
                html["pages_made"],
                html["pages_kept"],
                html["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0,
                html["error"].as_str().map_or_else(String::new, |e| format!(", error: {e}"))
            );
        }
        println!(
            "  {label}: sync modes {modes:?}; wall {wall:.2} s; slowest organization {slowest} requests, pacing limit {limit:.2} s, ratio {:.2}; {requests} requests, {limited} 429s ({} emulator violations); outcomes {}; peak RSS {peak:.0} MB; CPU {cpu_s:.1} s (the emulator's thread {:.1} s)",
            wall / limit.max(1e-9),
            emu.state.violations().len() - before,
            report["outcomes"],
            threads_cpu("emulator") - emu_cpu
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
        if rep == usize::MAX {
            continue;
        }
        walls.push(wall);
        reports.extend(report_s);
        ratios.push(wall / limit.max(1e-9));
        rss.push(peak);
        cpu.push(cpu_s);
    }
    println!(
        "median of {reps}: wall {:.2} s, ratio to the slowest organization's pacing limit {:.2}, peak RSS {:.0} MB, CPU {:.1} s{}",
        median(walls),
        median(ratios),
        median(rss),
        median(cpu),
        if reports.is_empty() { String::new() } else { format!(", of it the HTML report {:.2} s", median(reports)) }
    );
}
