//! Shared-lake benchmark: N organizations committing to one Delta Lake on a local S3 server
//! (moto, serving one request at a time as the tests do: `tests/it/moto.rs`) at the same time, as N `load --lake` processes would after their warehouses.
//! Each organization's tables are staged first (not timed); then all N commit at once, each
//! with its own Delta tables and retries. Reports, per round, the wall time, commits per second
//! and the conflicts retried: a fresh lake (the tables are created by the race) and the same
//! lake again (each organization replaces its rows).
//!
//! `cargo bench --bench lake -- [--orgs N] [--applications N] [--reps N] [--moto PATH]`
//!
//! moto comes from `notebooks/requirements.txt`; by default the test suite's virtualenv
//! (`$CARGO_TARGET_DIR/tmp/notebook-venv`), which `cargo test` makes. `--moto` names the
//! `moto_server` of another virtualenv, whose `python` then runs it.

mod common;
#[path = "../tests/it/moto.rs"]
mod moto;

use std::path::PathBuf;
use std::time::Instant;

use common::{arg, generate, median};
use creator_etl::load::catalog::lake_tables as tables;
use creator_etl::load::lake::LakeConfig;
use creator_etl::load::{load_extracted, LoadConfig};
use creator_etl::out::OutDir;
use creator_etl::transform::DEFAULT_COHORT_EDGES;
use moto::Moto;

fn main() {
    let orgs = arg("--orgs", 8) as usize;
    let applications = arg("--applications", 20_000) as usize;
    let reps = arg("--reps", 3) as usize;
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("notebook-venv/bin");
    let args: Vec<String> = std::env::args().collect();
    let moto = args.iter().position(|a| a == "--moto").map(|i| PathBuf::from(&args[i + 1]));
    let moto = moto.unwrap_or_else(|| venv.join("moto_server"));
    assert!(moto.exists(), "no `{}`: run `cargo test` once (it makes the virtualenv) or pass --moto", moto.display());

    // The S3 server on a free port, and the standard AWS variables pointing at it.
    let server = Moto::start(&moto.with_file_name("python"), "bench");
    for (k, v) in &server.envs {
        std::env::set_var(k, v);
    }

    // Each organization's warehouse and staged tables (not timed).
    let dir = tempfile::tempdir().unwrap();
    let mut staged = vec![];
    for i in 0..orgs {
        let out = OutDir::new(dir.path().join(format!("org-{i}")));
        let mut input = generate(100 + i as u64, applications, 2 * applications, 2);
        let config = LoadConfig {
            out: out.clone(),
            cohort_edges: DEFAULT_COHORT_EDGES.to_vec(),
            strict: false,
            parquet_grace: creator_etl::load::DEFAULT_PARQUET_GRACE,
            lake: None,
        };
        load_extracted(&config, input.extracted(format!("bench-{i}"), true), None).expect("load");
        let dir = out.root().join(".lake-staging");
        creator_etl::load::lake::stage(
            &out,
            &format!("org-{i}"),
            &dir,
            &creator_etl::load::catalog::committed_tables(),
        )
        .expect("stage");
        staged.push((format!("org-{i}"), dir));
    }
    println!(
        "lake benchmark: {orgs} organizations x {applications} applications committing at once to moto_server; {reps} runs\n"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let commits_per_load = tables().len();
    println!("| round | wall s, median | commits/s, median | conflicts retried, per run | runs, s |");
    println!("|---|---|---|---|---|");
    let mut rounds: Vec<(&str, Vec<f64>, Vec<u32>)> =
        vec![("fresh lake", vec![], vec![]), ("same lake again", vec![], vec![])];
    for rep in 0..reps {
        let url = format!("s3://bench/rep-{rep}");
        for round in rounds.iter_mut() {
            let t = Instant::now();
            let reports = runtime.block_on(async {
                let tasks: Vec<_> = staged
                    .iter()
                    .map(|(org, dir)| {
                        let (lake, dir) = (
                            LakeConfig { url: url.clone(), org: org.clone(), unconditional_writes_ok: false },
                            dir.clone(),
                        );
                        tokio::spawn(async move {
                            creator_etl::load::lake::commit_tables(
                                &lake,
                                &dir,
                                &creator_etl::load::catalog::committed_tables(),
                            )
                            .await
                        })
                    })
                    .collect();
                let mut reports = vec![];
                for task in tasks {
                    reports.push(task.await.unwrap().expect("commit"));
                }
                reports
            });
            round.1.push(t.elapsed().as_secs_f64());
            round.2.push(reports.iter().map(|r| r.conflicts_retried).sum());
            for r in &reports {
                assert_eq!(r.rows["applications"], applications as u64, "{}", r.organization);
            }
        }
    }
    for (name, walls, conflicts) in rounds {
        let wall = median(walls.clone());
        let rate = (orgs * commits_per_load) as f64 / wall;
        let runs: Vec<String> = walls.iter().map(|w| format!("{w:.2}")).collect();
        println!("| {name} | {wall:.2} | {rate:.1} | {conflicts:?} | {} |", runs.join(", "));
    }
    println!("\n{} commits per round: {orgs} organizations x {commits_per_load} tables", orgs * commits_per_load);
    drop(server);
}
