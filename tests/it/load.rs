//! `creator-etl run` and `load`: the warehouse and the Parquet tree read back with independent
//! readers, history across runs, idempotence, and crashes during the load.

use std::path::Path;

use creator_etl::api::models::ApplicationStatus;
use creator_etl::emulator::{EmulatorConfig, MAIN_ORG};
use creator_etl::load::catalog::exported as exported_tables;
use deltalake::arrow::datatypes::{DataType, TimeUnit};
use deltalake::parquet;

use crate::util::*;

fn run(emu: &TestEmu, out: &Path, extra: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    Bin::new(out.parent().unwrap())
        .args(["run"])
        .emu(emu)
        .out(out)
        .args(extra)
        .key(FULL_KEY)
        .envs(envs.iter().copied())
        .run()
}

fn parquet_glob(out: &Path, table: &str) -> String {
    format!("{}/parquet/{table}/**/*.parquet", out.display())
}

/// Rows of a table as DuckDB reads them back from the Parquet tree.
fn parquet_select(out: &Path, table: &str) -> String {
    let exclude = if matches!(table, "content_daily" | "wow_deltas") { " EXCLUDE (year)" } else { "" };
    format!("SELECT *{exclude} FROM read_parquet('{}', hive_partitioning = true)", parquet_glob(out, table))
}

/// A fingerprint of a table's whole content.
fn checksum(c: &duckdb::Connection, table: &str) -> String {
    c.query_row(
        &format!("SELECT count(*) || ':' || coalesce(md5(string_agg(t::VARCHAR, '|' ORDER BY t::VARCHAR)), '') FROM {table} AS t"),
        [],
        |r| r.get(0),
    )
    .unwrap()
}

fn assert_parquet_matches_duckdb(out: &Path) {
    let c = db(out);
    for table in exported_tables() {
        let p = parquet_select(out, table);
        let n = count(&c, &format!("SELECT count(*) FROM {table}"));
        assert_eq!(count(&c, &format!("SELECT count(*) FROM ({p})")), n, "{table}: row counts");
        let diff = count(&c, &format!("SELECT count(*) FROM ((SELECT * FROM {table} EXCEPT ALL {p}) UNION ALL ({p} EXCEPT ALL SELECT * FROM {table}))"));
        assert_eq!(diff, 0, "{table}: Parquet and DuckDB hold the same rows");
    }
}

/// Reads a Parquet file with arrow-rs's parquet crate (independent of both writers; the version
/// delta-rs re-exports, so the tests compile no second arrow-rs).
fn arrow_schema_and_rows(path: &Path) -> (deltalake::arrow::datatypes::SchemaRef, usize) {
    let file = std::fs::File::open(path).unwrap();
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let schema = builder.schema().clone();
    let rows = builder.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
    (schema, rows)
}

/// The Parquet files under `dir`, sorted.
fn parquet_files(dir: &Path) -> Vec<std::path::PathBuf> {
    files(dir).into_iter().filter(|p| p.extension().is_some_and(|x| x == "parquet")).collect()
}

#[test]
fn a_run_loads_duckdb_and_parquet_with_the_same_rows_and_exact_types() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(400));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&emu, &out, &["--since-days", "400"], &[]);
    assert_exit(&[], &o, 0);
    let report: serde_json::Value = report(&o);
    assert_eq!(report["extract"]["status"], "completed");
    let c = db(&out);
    let truth = emu.state.applications(MAIN_ORG);
    assert_eq!(count(&c, "SELECT count(*) FROM applications") as usize, truth.len());
    let accounts: usize = truth.iter().map(|a| a.connected_accounts.len()).sum();
    assert_eq!(count(&c, "SELECT count(*) FROM connected_accounts") as usize, accounts);
    assert_eq!(count(&c, "SELECT count(*) FROM content_daily"), 2 * 401);
    assert_eq!(
        count(&c, "SELECT count(*) FROM application_status_history WHERE valid_to IS NULL") as usize,
        truth.len()
    );
    assert_eq!(count(&c, "SELECT count(*) FROM runs WHERE parquet_exported AND requests > 0"), 1);
    // Emails stay NULL for marketplace applicants.
    assert_eq!(
        count(&c, "SELECT count(*) FROM applications WHERE email IS NULL") as usize,
        truth.iter().filter(|a| a.email.is_none()).count()
    );
    assert_parquet_matches_duckdb(&out);

    // Independent read-back with the arrow/parquet crates, and exact types.
    let apps = parquet_files(&out.join("parquet/applications"));
    let (schema, rows) = arrow_schema_and_rows(&apps[0]);
    assert_eq!(rows, truth.len());
    assert_eq!(schema.field_with_name("id").unwrap().data_type(), &DataType::Int64);
    assert_eq!(schema.field_with_name("total_monthly_posts").unwrap().data_type(), &DataType::Int64);
    let applied_at = schema.field_with_name("applied_at").unwrap().data_type().clone();
    assert!(
        matches!(&applied_at, DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) if ["UTC", "+00:00"].contains(&tz.as_ref())),
        "timestamps are UTC: {applied_at:?}"
    );

    let content = parquet_files(&out.join("parquet/content_daily"));
    assert!(content.len() >= 2, "partitioned by year: {content:?}");
    assert!(content.iter().all(|p| p.to_string_lossy().contains("year=")));
    let (schema, _) = arrow_schema_and_rows(&content[0]);
    assert_eq!(schema.field_with_name("date").unwrap().data_type(), &DataType::Date32);
    let wow = parquet_files(&out.join("parquet/wow_deltas"));
    let (schema, _) = arrow_schema_and_rows(&wow[0]);
    assert_eq!(schema.field_with_name("pct_change").unwrap().data_type(), &DataType::Float64);
    // zstd with statistics.
    let meta = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&apps[0]).unwrap()).unwrap();
    use parquet::file::reader::FileReader;
    let col = meta.metadata().row_group(0).column(0);
    assert!(matches!(col.compression(), parquet::basic::Compression::ZSTD(_)), "{:?}", col.compression());
    assert!(col.statistics().is_some());
    // No temporary or staging files are left visible.
    assert!(!out.join(".staging").join(report["extract"]["run_id"].as_str().unwrap()).exists());
}

#[test]
fn history_keeps_every_status_across_three_runs_and_reloading_changes_nothing() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(200));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let pending: Vec<i64> = emu
        .state
        .applications(MAIN_ORG)
        .into_iter()
        .filter(|a| a.status == ApplicationStatus::Pending)
        .map(|a| a.id)
        .take(3)
        .collect();
    assert_eq!(pending.len(), 3);
    let o = run(&emu, &out, &["--since-days", "20"], &[]);
    assert_exit(&[], &o, 0);
    emu.state.set_application_status(pending[0], ApplicationStatus::Accepted);
    emu.state.set_application_status(pending[1], ApplicationStatus::Rejected);
    let o = run(&emu, &out, &[], &[]);
    assert_exit(&[], &o, 0);
    let changed: serde_json::Value = report(&o);
    assert_eq!(changed["load"]["quality"]["status_changes"], 2);
    emu.state.set_application_status(pending[0], ApplicationStatus::PendingContract);
    let o = run(&emu, &out, &[], &[]);
    assert_exit(&[], &o, 0);

    let c = db(&out);
    let history = |id: i64| -> Vec<(String, bool)> {
        let mut stmt = c
            .prepare("SELECT status, valid_to IS NULL FROM application_status_history WHERE id = ? ORDER BY valid_from")
            .unwrap();
        stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect()
    };
    let s = |x: &str, open: bool| (x.to_owned(), open);
    assert_eq!(history(pending[0]), vec![s("pending", false), s("accepted", false), s("pending_contract", true)]);
    assert_eq!(history(pending[1]), vec![s("pending", false), s("rejected", true)]);
    assert_eq!(history(pending[2]), vec![s("pending", true)]);
    // Intervals chain: each row ends where the next begins.
    assert_eq!(
        count(&c, &format!("SELECT count(*) FROM application_status_history h JOIN application_status_history n ON h.id = n.id AND h.valid_to = n.valid_from WHERE h.id = {}", pending[0])),
        2
    );
    assert_eq!(count(&c, "SELECT count(*) FROM runs"), 3);
    // first_seen_at survives the snapshot replacement.
    assert!(
        count(
            &c,
            &format!("SELECT count(*) FROM applications WHERE id = {} AND first_seen_at < last_seen_at", pending[0])
        ) == 1
    );

    // Loading the newest raw run again changes no table, the ledger included: a reload used to
    // rewrite its run's `finished_at`, `last_reconcile_at` and timings.
    let tables: Vec<&str> = exported_tables().into_iter().chain(["runs"]).collect();
    let before: Vec<String> = tables.iter().map(|t| checksum(&c, t)).collect();
    drop(c);
    let args = ["load", "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 0);
    let c = db(&out);
    let after: Vec<String> = tables.iter().map(|t| checksum(&c, t)).collect();
    assert_eq!(before, after);
    drop(c);
    assert_parquet_matches_duckdb(&out);
}

/// `load --from-raw RUN_ID` rebuilds the tables from that run's raw landing alone: no key, no
/// request, and that run's data, not the newest.
#[test]
fn load_from_raw_rebuilds_a_given_run_without_the_api() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(150));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let id = emu.state.applications(MAIN_ORG).iter().find(|a| a.status == ApplicationStatus::Pending).unwrap().id;
    let extract = |extra: &[&str]| -> String {
        let mut args = vec!["extract", "--base-url", &emu.base_url, "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
        assert_exit(&args, &o, 0);
        let report: serde_json::Value = report(&o);
        report["run_id"].as_str().unwrap().to_owned()
    };
    let first = extract(&["--since-days", "30"]);
    emu.state.set_application_status(id, ApplicationStatus::Accepted);
    let second = extract(&[]);
    assert_ne!(first, second);
    let requests = emu.state.requests().len();

    let status_of = |run_id: &str| -> String {
        let args = ["load", "--out", out.to_str().unwrap(), "--from-raw", run_id];
        let o = run_bin(dir.path(), &args, &[]);
        assert_exit(&args, &o, 0);
        let c = db(&out);
        assert_eq!(count(&c, "SELECT count(*) FROM applications") as usize, emu.state.applications(MAIN_ORG).len());
        assert_eq!(count(&c, &format!("SELECT count(*) FROM runs WHERE run_id = '{run_id}'")), 1);
        c.query_row("SELECT status FROM applications WHERE id = ?", [id], |r| r.get(0)).unwrap()
    };
    assert_eq!(status_of(&first), "pending", "the first run's data, not the newest");
    assert_eq!(status_of(&second), "accepted");
    assert_eq!(emu.state.requests().len(), requests, "loading sent no request");
}

/// A process killed during the load leaves the previous warehouse and Parquet intact and
/// readable, and the next load converges.
#[test]
fn a_crash_during_load_keeps_the_previous_state_and_a_rerun_converges() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(150));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&emu, &out, &["--since-days", "10"], &[]);
    assert_exit(&[], &o, 0);
    let c = db(&out);
    let before: Vec<String> = exported_tables().iter().map(|t| checksum(&c, t)).collect();
    drop(c);
    let id = emu.state.applications(MAIN_ORG)[0].id;
    emu.state.set_application_status(id, ApplicationStatus::Canceled);

    // Killed inside the transaction, just before COMMIT.
    let o = run(&emu, &out, &[], &[("CREATOR_ETL_CRASH_AT", "load-before-commit")]);
    assert_ne!(o.status.code(), Some(0), "{}", show(&[], &o));
    let c = db(&out);
    let after: Vec<String> = exported_tables().iter().map(|t| checksum(&c, t)).collect();
    assert_eq!(before, after, "the previous warehouse is intact");
    drop(c);
    assert_parquet_matches_duckdb(&out);

    // Killed between switching the first and the second table's Parquet.
    let o = run(&emu, &out, &[], &[("CREATOR_ETL_CRASH_AT", "export-after-first-table")]);
    assert_ne!(o.status.code(), Some(0), "{}", show(&[], &o));
    // Committed in the writer's file; the readers' snapshot is published when the export ends.
    let c = duckdb::Connection::open(out.join("state/warehouse.duckdb")).unwrap();
    assert_eq!(count(&c, &format!("SELECT count(*) FROM applications WHERE id = {id} AND status = 'canceled'")), 1);
    drop(c);
    let c = db(&out);
    for t in exported_tables() {
        count(&c, &format!("SELECT count(*) FROM ({})", parquet_select(&out, t)));
        // every table stays readable
    }
    drop(c);
    // The next load finishes the interrupted export first: the two agree again.
    let args = ["load", "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 0);
    assert_parquet_matches_duckdb(&out);
}

#[test]
fn load_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = ["load", "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no completed raw run"));
    let args = ["load", "--out", out.to_str().unwrap(), "--from-raw", "nope"];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    let args = ["load", "--out", out.to_str().unwrap(), "--cohort-edges", "5,2"];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cohort-edges"));
}

/// Regression: a run report that could not be read turned the landing check off, and the load
/// went ahead unchecked. A missing or corrupt report now refuses the load (exit 1), and the
/// warehouse keeps its data.
#[test]
fn a_load_refuses_a_run_whose_report_is_missing_or_corrupt() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&emu, &out, &["--since-days", "10"], &[]);
    assert_exit(&[], &o, 0);
    let run_id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["extract"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let report = out.join("runs").join(format!("{run_id}.json"));
    let before = checksum(&db(&out), "applications");
    for (damage, says) in [(Some(&b"{\"run_id\": "[..]), "is not a readable run report"), (None, "is missing")] {
        match damage {
            Some(bytes) => std::fs::write(&report, bytes).unwrap(),
            None => std::fs::remove_file(&report).unwrap(),
        }
        let args = ["load", "--out", out.to_str().unwrap(), "--from-raw", &run_id];
        let o = run_bin(dir.path(), &args, &[]);
        assert_exit(&args, &o, 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says) && err.contains(&run_id) && err.contains("extract --fresh"), "{err}");
    }
    assert_eq!(checksum(&db(&out), "applications"), before, "the warehouse keeps its data");
}

/// The manual's data dictionary (generated from the table catalog) names every table, view and
/// column the warehouse has.
#[test]
fn the_data_dictionary_covers_the_warehouse() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(30));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&emu, &out, &["--since-days", "10"], &[]);
    assert_exit(&[], &o, 0);
    let readme = include_str!("../../docs/src/reference/tables.md");
    let c = db(&out);
    let mut stmt = c
        .prepare("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main' ORDER BY table_name, ordinal_position")
        .unwrap();
    let columns: Vec<(String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect();
    assert!(columns.len() > 60);
    let mut missing = vec![];
    for (table, column) in &columns {
        let section = match readme.split_once(&format!("## `{table}`")) {
            Some((_, rest)) => rest.split("\n## ").next().unwrap(),
            None => {
                missing.push(format!("table {table}"));
                continue;
            }
        };
        if !section.contains(&format!("`{column}`")) {
            missing.push(format!("{table}.{column}"));
        }
    }
    assert!(missing.is_empty(), "not in the manual's data dictionary: {missing:?}");
}

/// Runs `script` with the notebooks' Python, its stdin and stdout piped.
fn python(script: &str, args: &[&str]) -> std::process::Child {
    std::process::Command::new(crate::demo::notebook_python())
        .args(["-c", script])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Analysts never block the scheduled load: a Python `duckdb` read-only connection held open on
/// the warehouse across a whole `run`. The run succeeds; the reader keeps its snapshot, and sees
/// the new run when it reconnects.
#[test]
fn a_reader_holding_the_warehouse_never_blocks_a_run() {
    use std::io::{BufRead, BufReader, Write};
    const READER: &str = r#"
import sys, duckdb
path = sys.argv[1]
runs = lambda c: c.execute("SELECT count(*) FROM runs").fetchall()[0][0]
c = duckdb.connect(path, read_only=True)
print(runs(c), flush=True)
sys.stdin.readline()
print(runs(c), flush=True)
c.close()
c = duckdb.connect(path, read_only=True)
print(runs(c), flush=True)
"#;
    let emu = TestEmu::start(EmulatorConfig::for_tests(150));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    assert_exit(&[], &run(&emu, &out, &["--since-days", "10"], &[]), 0);
    let mut reader = python(READER, &[out.join("warehouse.duckdb").to_str().unwrap()]);
    let mut lines = BufReader::new(reader.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "1", "the reader is connected");
    let o = run(&emu, &out, &[], &[]);
    assert_exit(&[], &o, 0);
    reader.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = reader.wait().unwrap();
    assert!(status.success(), "reader failed: {rest:?}");
    assert_eq!(rest, ["1", "2"], "the old snapshot until it reconnects, then the new run");
}

/// A process holding the writer's own file (not the readers' snapshot) is found before the
/// extract spends a request: exit 5, naming the process.
#[test]
fn a_held_writer_file_fails_the_run_before_any_request() {
    use std::io::{BufRead, BufReader};
    const HOLDER: &str = r#"
import sys, duckdb
c = duckdb.connect(sys.argv[1], read_only=True)
print("holding", flush=True)
sys.stdin.readline()
"#;
    let emu = TestEmu::start(EmulatorConfig::for_tests(50));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    assert_exit(&[], &run(&emu, &out, &["--since-days", "5"], &[]), 0);
    let mut holder = python(HOLDER, &[out.join("state/warehouse.duckdb").to_str().unwrap()]);
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "holding");
    let before = emu.state.requests().len();
    let o = run(&emu, &out, &[], &[]);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_exit(&[], &o, 5);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("is held by another process") && stderr.contains("PID"), "{stderr}");
    assert_eq!(emu.state.requests().len(), before, "no request was spent");
}

/// A replaced Parquet version stays for the grace period, so a reader that listed it just
/// before the switch can still open its files; after the grace period the next load removes
/// it, and leftover staging directories go too.
#[test]
fn replaced_parquet_versions_stay_for_the_grace_period() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(100));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    assert_exit(&[], &run(&emu, &out, &["--since-days", "5"], &[]), 0);
    let link = out.join("parquet/applications");
    let first = out.join("parquet").join(std::fs::read_link(&link).unwrap());
    let listed = parquet_files(&first);
    assert!(!listed.is_empty());
    assert_exit(&[], &run(&emu, &out, &[], &[]), 0);
    assert_ne!(out.join("parquet").join(std::fs::read_link(&link).unwrap()), first, "a new version is current");
    for f in &listed {
        let (_, rows) = arrow_schema_and_rows(f);
        assert!(rows > 0, "{} is still readable", f.display());
    }
    std::fs::create_dir_all(out.join(".staging/killed-run")).unwrap();
    assert_exit(&[], &run(&emu, &out, &["--parquet-grace-s", "0"], &[]), 0);
    assert!(!first.exists(), "past its grace period, the old version is removed");
    let hidden = std::fs::read_dir(out.join("parquet"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(hidden, exported_tables().len(), "only the current versions are left");
    assert!(!out.join(".staging").exists(), "leftover staging is cleaned");
    assert_parquet_matches_duckdb(&out);
}

/// A landing that holds fewer applications than its extract reported (a damaged raw file) never
/// replaces good tables.
#[test]
fn a_load_refuses_fewer_rows_than_the_extract_reported() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(100));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&emu, &out, &["--since-days", "5"], &[]);
    assert_exit(&[], &o, 0);
    let run_id = serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["extract"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let report_path = out.join("runs").join(format!("{run_id}.json"));
    let mut report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let total = report["applications_total"].as_u64().unwrap();
    report["applications_total"] = serde_json::json!(total + 10);
    std::fs::write(&report_path, serde_json::to_vec(&report).unwrap()).unwrap();
    let before = checksum(&db(&out), "applications");
    let args = ["load", "--out", out.to_str().unwrap(), "--from-raw", &run_id];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 1);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("its landing holds {total} applications, but its extract reported {}", total + 10)),
        "{stderr}"
    );
    assert_eq!(checksum(&db(&out), "applications"), before);
}

/// A warehouse of the layout before the readers' snapshot (only `OUT/warehouse.duckdb`, written
/// by an older creator-etl) is adopted as the writer's on the next run, keeping its data.
#[test]
fn an_older_layouts_warehouse_is_adopted_with_its_data() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    assert_exit(&[], &run(&emu, &out, &["--since-days", "5"], &[]), 0);
    // Make it look like the old layout: no writer file, and a row only the old file has.
    std::fs::remove_file(out.join("state/warehouse.duckdb")).unwrap();
    db(&out).execute_batch("INSERT INTO runs (run_id, status) VALUES ('from-the-old-layout', 'completed')").unwrap();
    assert_exit(&[], &run(&emu, &out, &[], &[]), 0);
    let c = db(&out);
    assert_eq!(count(&c, "SELECT count(*) FROM runs WHERE run_id = 'from-the-old-layout'"), 1);
    assert_eq!(count(&c, "SELECT count(*) FROM runs"), 3);
    assert!(out.join("state/warehouse.duckdb").exists());
}

/// Regression: the content cursor advanced when an extract completed, before its load. Loads
/// that failed for longer than `--lookback-days` (here `--strict` against skewed totals) then
/// made the next run start after days that were never loaded. The cursor is now the last
/// content day the warehouse loaded, so the healing run fetches every missing day.
#[test]
fn content_days_of_runs_whose_load_failed_are_fetched_again() {
    use creator_etl::emulator::OrgPolicy;
    let emulator = |skewed: bool| {
        let mut cfg = EmulatorConfig::for_tests(20);
        cfg.data.organizations = 1;
        cfg.data.org_applications = 50;
        cfg.org_policies = [(1, OrgPolicy { skewed_totals: skewed, ..OrgPolicy::default() })].into();
        TestEmu::start(cfg)
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let today = chrono::Utc::now().date_naive();
    let day = |ago: i64| (today - chrono::Duration::days(ago)).to_string();
    let sync = |emu: &TestEmu, extra: &[&str], code: i32| {
        let mut args = vec!["run", "--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "--since-days", "40"];
        args.extend_from_slice(extra);
        let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", "emu-org-1-key")]);
        assert_exit(&args, &o, code);
    };
    let healthy = emulator(false);
    sync(&healthy, &["--to", &day(30)], 0);
    drop(healthy);
    // Two runs whose extracts complete but whose loads fail, 20 days past the loaded ones.
    let skewed = emulator(true);
    sync(&skewed, &["--strict", "--to", &day(20)], 1);
    sync(&skewed, &["--strict", "--to", &day(10)], 1);
    drop(skewed);
    let healthy = emulator(false);
    sync(&healthy, &[], 0);
    let c = db(&out);
    let loaded: std::collections::BTreeSet<String> = {
        let mut st = c.prepare("SELECT CAST(date AS VARCHAR) FROM content_daily WHERE metric = 'views'").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let missing: Vec<String> = (0..=40).map(day).filter(|d| !loaded.contains(d)).collect();
    let days = loaded.len();
    assert!(missing.is_empty(), "{days} days loaded; missing: {missing:?}");
}

/// A value the warehouse's reads cannot take (a metric creator-etl never writes, DuckDB's
/// `infinity` as a date or a timestamp) stops the next run with an error naming the table, the
/// column and the value, and nothing is loaded over it: the writer's warehouse and the readers'
/// snapshot stay as they were. Read as a default (`views`, 1970-01-01), they would be loaded back
/// as real data.
#[test]
fn a_bad_value_planted_in_the_warehouse_fails_the_next_run_and_changes_nothing() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    assert_exit(&[], &run(&emu, &out, &["--since-days", "10"], &[]), 0);
    let writer = || duckdb::Connection::open(out.join("state/warehouse.duckdb")).unwrap();
    let text = |c: &duckdb::Connection, sql: &str| -> String { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    let tables: Vec<&str> = exported_tables().into_iter().chain(["runs"]).collect();
    let sums = |c: &duckdb::Connection| tables.iter().map(|t| checksum(c, t)).collect::<Vec<_>>();
    let (first_day, days, id, applied_at) = {
        let c = writer();
        let id = count(&c, "SELECT min(id) FROM applications");
        let applied_at = text(&c, &format!("SELECT CAST(applied_at AS VARCHAR) FROM applications WHERE id = {id}"));
        (
            text(&c, "SELECT CAST(min(date) AS VARCHAR) FROM content_daily"),
            count(&c, "SELECT count(*) FROM content_daily"),
            id,
            applied_at,
        )
    };
    let cases = [
        (
            format!("UPDATE content_daily SET metric = 'shares' WHERE metric = 'likes' AND date = DATE '{first_day}'"),
            "UPDATE content_daily SET metric = 'likes' WHERE metric = 'shares'".to_owned(),
            "`content_daily.metric`",
            "`shares`",
        ),
        (
            format!("UPDATE content_daily SET date = 'infinity' WHERE metric = 'views' AND date = DATE '{first_day}'"),
            format!("UPDATE content_daily SET date = DATE '{first_day}' WHERE date = 'infinity'"),
            "`content_daily.date`",
            "`infinity`",
        ),
        // Read by the quick sync's snapshot, before the run sends anything.
        (
            format!("UPDATE applications SET applied_at = 'infinity' WHERE id = {id}"),
            format!("UPDATE applications SET applied_at = '{applied_at}'::TIMESTAMPTZ WHERE id = {id}"),
            "`applications.applied_at`",
            "`infinity`",
        ),
    ];
    for (damage, repair, column, value) in cases {
        let c = writer();
        c.execute_batch(&damage).unwrap();
        let planted = sums(&c);
        drop(c);
        let published = sums(&db(&out));
        let o = run(&emu, &out, &[], &[]);
        assert_exit(&[&damage], &o, 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(column) && err.contains(value), "{damage}: {err}");
        let c = writer();
        assert_eq!(sums(&c), planted, "{damage}: the writer's warehouse is as it was");
        assert_eq!(sums(&db(&out)), published, "{damage}: the readers' snapshot is as it was");
        c.execute_batch(&repair).unwrap();
    }
    // Repaired, the next run loads.
    assert_exit(&[], &run(&emu, &out, &[], &[]), 0);
    let c = db(&out);
    assert!(count(&c, "SELECT count(*) FROM content_daily") >= days);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM content_daily WHERE date < DATE '{first_day}' OR metric NOT IN ('views', 'likes')")), 0);
}
