//! Transform and load benchmark: 1,000,000 applications and 20 years of daily statistics, built
//! with the emulator's data generator (no HTTP), loaded into a fresh warehouse and Parquet tree.
//! Prints the time of each stage (median of the runs) and the process's peak RSS.
//!
//! `cargo bench --bench load -- [--applications N] [--accounts N] [--years N] [--reps N] [--lake]`
//!
//! With `--lake`, each run then also writes the same data to a fresh local Delta Lake as
//! `load --lake` does, and the push is reported beside the warehouse load.

mod common;

use common::{arg, flag, generate, median, peak_rss_mb, reset_peak_rss};

use std::collections::BTreeMap;
use std::time::Instant;

use creator_etl::load::lake::LakeConfig;
use creator_etl::load::{load_extracted, LoadConfig};
use creator_etl::out::OutDir;
use creator_etl::transform::DEFAULT_COHORT_EDGES;

fn main() {
    let applications = arg("--applications", 1_000_000) as usize;
    let years = arg("--years", 20) as u32;
    let reps = arg("--reps", 3);
    let lake = flag("--lake");
    let t = Instant::now();
    let mut input = generate(7, applications, arg("--accounts", 2 * applications as u64) as usize, years);
    let generated_s = t.elapsed().as_secs_f64();
    let rss_after_generation = peak_rss_mb();
    println!(
        "load benchmark: {} applications, {} accounts, {} content rows ({years} years); generated in {generated_s:.1} s, RSS {rss_after_generation:.0} MB; {reps} runs\n",
        input.apps.len(),
        input.accounts,
        input.content.len()
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut lake_rss = vec![];
    // The process's peak across resets (the lake's peak is measured on its own).
    let mut process_peak: f64 = 0.0;
    let mut stages: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for rep in 0..reps {
        let dir = tempfile::tempdir().unwrap();
        // The last run takes the input itself: no third copy in memory.
        let extracted = input.extracted(format!("bench-{rep}"), rep + 1 == reps);
        let config = LoadConfig {
            out: OutDir::new(dir.path()),
            cohort_edges: DEFAULT_COHORT_EDGES.to_vec(),
            strict: false,
            parquet_grace: creator_etl::load::DEFAULT_PARQUET_GRACE,
            lake: None,
        };
        let report = load_extracted(&config, extracted, None).expect("load");
        // The report's keys, as `load` prints them.
        let timings = serde_json::to_value(&report.stages_ms).expect("timings serialise");
        for (k, v) in timings.as_object().expect("an object") {
            stages.entry(k.clone()).or_default().push(v.as_u64().unwrap_or_default());
        }
        if lake {
            // The same data into a fresh local Delta Lake, as `load --lake` does after the
            // warehouse: staged by DuckDB, committed by delta-rs. Its peak RSS on its own.
            process_peak = process_peak.max(peak_rss_mb());
            reset_peak_rss();
            let staged = dir.path().join(".lake-staging");
            let url = format!("file://{}", dir.path().join("lake").display());
            let lake = LakeConfig { url, org: "bench".into(), unconditional_writes_ok: false };
            let t = Instant::now();
            creator_etl::load::lake::stage(
                &OutDir::new(dir.path()),
                "bench",
                &staged,
                &creator_etl::load::catalog::committed_tables(),
            )
            .expect("stage");
            let stage_ms = t.elapsed().as_millis() as u64;
            let t = Instant::now();
            let report = runtime
                .block_on(creator_etl::load::lake::commit_tables(
                    &lake,
                    &staged,
                    &creator_etl::load::catalog::committed_tables(),
                ))
                .expect("commit");
            assert_eq!(report.rows["applications"], applications as u64);
            stages.entry("lake_stage".into()).or_default().push(stage_ms);
            stages.entry("lake_commit".into()).or_default().push(t.elapsed().as_millis() as u64);
            lake_rss.push(peak_rss_mb());
        }
    }
    println!("| stage | median ms | runs |");
    println!("|---|---|---|");
    for (k, v) in &stages {
        let mut v = v.clone();
        v.sort();
        println!("| {k} | {} | {v:?} |", v[v.len() / 2]);
    }
    if lake {
        let median_of = |k: &str| median(stages[k].iter().map(|v| *v as f64).collect());
        let warehouse = median_of("total");
        let pushed = median_of("lake_stage") + median_of("lake_commit");
        println!(
            "\nlake push (stage + commit): median {pushed:.0} ms = {:.2} x the warehouse load's {warehouse:.0} ms; \
             peak RSS during the push, per run: {lake_rss:.0?} MB",
            pushed / warehouse
        );
    }
    println!(
        "\npeak RSS of the process: {:.0} MB (of which {rss_after_generation:.0} MB before the first load: the generated input)",
        process_peak.max(peak_rss_mb())
    );
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
