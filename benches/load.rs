//! Transform and load benchmark: 1,000,000 applications and 20 years of daily statistics, built
//! with the emulator's data generator (no HTTP), loaded into a fresh warehouse and Parquet tree.
//! Prints the time of each stage (median of the runs) and the process's peak RSS.
//!
//! `cargo bench --bench load -- [--applications N] [--accounts N] [--years N] [--reps N]`

mod common;

use common::arg;

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{Duration, Utc};
use creator_etl::emulator::{data, GenConfig, MAIN_ORG};
use creator_etl::extract::{ContentRow, Extracted, Metric, Observation, RunSpec};
use creator_etl::load::{load_extracted, LoadConfig};
use creator_etl::out::OutDir;
use creator_etl::transform::DEFAULT_COHORT_EDGES;

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let applications = arg("--applications", 1_000_000) as usize;
    let years = arg("--years", 20) as u32;
    let reps = arg("--reps", 3);
    let today = Utc::now().date_naive();
    let t = Instant::now();
    let dataset = data::generate(&GenConfig { seed: 7, applications, sales: 16, today, content_years: years });
    let now = Utc::now();
    let apps: Vec<Observation> = dataset
        .applications
        .into_iter()
        .filter(|(org, _)| *org == MAIN_ORG)
        .map(|(_, app)| Observation { seq: 0, observed_at: now, app, first_pass: 1 })
        .collect();
    let start = dataset.content.start;
    let mut content = vec![];
    let mut day = start;
    while day <= today {
        let (v, l) = dataset.content.day(MAIN_ORG, day);
        let (lv, ll) = dataset.content.day(MAIN_ORG, day - Duration::days(7));
        for (metric, current, last) in [(Metric::Views, v, lv), (Metric::Likes, l, ll)] {
            content.push(ContentRow {
                metric,
                date: day,
                last_date: day - Duration::days(7),
                current,
                last,
                total: 0,
                last_total: 0,
            });
        }
        day += Duration::days(1);
    }
    // The generator lists ~1.4 accounts per application; the scale is ~2 per application.
    // Top up with copies of an application's own accounts (new ids) until `--accounts` is reached.
    let target_accounts = arg("--accounts", 2 * applications as u64) as usize;
    let mut apps = apps;
    let mut next_id = dataset.next_account_id;
    let mut accounts: usize = apps.iter().map(|o| o.app.connected_accounts.len()).sum();
    'top_up: for round in 0..3 {
        for o in apps.iter_mut() {
            if accounts >= target_accounts {
                break 'top_up;
            }
            if let Some(a) = o.app.connected_accounts.get(round).cloned() {
                o.app.connected_accounts.push(creator_etl::api::models::ConnectedAccount { id: next_id, ..a });
                next_id += 1;
                accounts += 1;
            }
        }
    }
    let generated_s = t.elapsed().as_secs_f64();
    let rss_after_generation = peak_rss_mb();
    println!(
        "load benchmark: {} applications, {accounts} accounts, {} content rows ({years} years); generated in {generated_s:.1} s, RSS {rss_after_generation:.0} MB; {reps} runs\n",
        apps.len(),
        content.len()
    );
    let mut stages: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for rep in 0..reps {
        let dir = tempfile::tempdir().unwrap();
        let extracted = Extracted {
            spec: RunSpec {
                run_id: format!("bench-{rep}"),
                created_at: now,
                base_url: "generated".into(),
                statuses: creator_etl::api::models::ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect(),
                campaign_id: None,
                max_passes: 1,
                from: start,
                to: today,
                window_days: 90,
            },
            // The last run takes the input itself: no third copy in memory.
            applications: if rep + 1 == reps { std::mem::take(&mut apps) } else { apps.clone() },
            content: content.clone(),
            complete: true,
        };
        let config = LoadConfig {
            out: OutDir::new(dir.path()),
            cohort_edges: DEFAULT_COHORT_EDGES.to_vec(),
            strict: false,
            parquet_grace: creator_etl::load::DEFAULT_PARQUET_GRACE,
            lake: None,
        };
        let report = load_extracted(&config, extracted, None).expect("load");
        for (k, v) in report.stages_ms {
            stages.entry(k).or_default().push(v);
        }
    }
    println!("| stage | median ms | runs |");
    println!("|---|---|---|");
    for (k, mut v) in stages {
        v.sort();
        println!("| {k} | {} | {v:?} |", v[v.len() / 2]);
    }
    println!("\npeak RSS of the process: {:.0} MB (of which {rss_after_generation:.0} MB before the first load: the generated input)", peak_rss_mb());
    duckdb_group_by(reps);
}

/// DuckDB alone: a group-by over 5,000,000 rows, the figure the build profile's DuckDB
/// optimization level was chosen by (see BENCHMARKS.md).
fn duckdb_group_by(reps: u64) {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t AS SELECT range AS k, range * 7 % 1000 AS v FROM range(5000000);").unwrap();
    let mut times = vec![];
    for _ in 0..reps.max(3) {
        let t = Instant::now();
        let groups: i64 = conn
            .query_row(
                "SELECT count(*) FROM (SELECT k % 100000 AS g, sum(v), avg(v), count(*) FROM t GROUP BY g)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(groups, 100_000);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "DuckDB group-by over 5,000,000 rows into 100,000 groups: median {:.2} s of {:?}",
        times[times.len() / 2],
        times
    );
}
