//! Workers whose `--out` does not last: with `--lake`, a run on an empty `--out` restores its
//! organization's warehouse, runs ledger and action journal from the lake before it sends
//! anything. Through the real binary, with a fresh `--out` for every run.

use std::path::{Path, PathBuf};

use creator_etl::api::models::ApplicationStatus;
use creator_etl::emulator::{org_key, EmulatorConfig, PayoutKind, MAIN_ORG};

use crate::util::{assert_exit, count, db, report, run_bin, show, updatable_sales, Bin, TestEmu, FULL_KEY};

const HEADER: &str =
    "action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,reviewer,note,row_id";

/// The main organization (sales and payouts to correct) and one numbered organization.
fn emulator() -> TestEmu {
    let mut cfg = EmulatorConfig::for_tests(40);
    cfg.data.organizations = 1;
    cfg.data.org_applications = 60;
    TestEmu::start(cfg)
}

/// A reviewed file for the main organization: two sale corrections and a payout mark approved,
/// one correction not approved. Returns the file and the approved rows' targets.
fn reviewed(emu: &TestEmu, dir: &Path) -> (PathBuf, Vec<String>, String) {
    let sales = updatable_sales(emu);
    let due = emu.state.payouts().into_iter().find(|p| p.kind == PayoutKind::DueCredit && p.org == MAIN_ORG).unwrap();
    let rows = [
        format!("update_sale,yes,{},,5000,,,,ann,,r1", sales[0]),
        format!("update_sale,yes,{},,,123,,,ann,,r2", sales[1]),
        format!("mark_payout,yes,,{},,,,,ann,,r3", due.uuid),
        format!("update_sale,yes,{},,4200,,,,ann,,r4", sales[2]),
        format!("update_sale,no,{},,1,,,,,,r5", sales[3]),
    ];
    let path = dir.join("reviewed.csv");
    std::fs::write(&path, format!("{HEADER}\n{}\n", rows.join("\n"))).unwrap();
    let approved = vec![sales[0].to_string(), sales[1].to_string(), due.uuid.clone(), sales[2].to_string()];
    (path, approved, sales[3].to_string())
}

/// `fleet run` of both organizations into `out`, the main one with the reviewed file.
fn fleet_run(emu: &TestEmu, dir: &Path, out: &Path, lake: &str, actions: &Path) -> std::process::Output {
    let config = dir.join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nsince_days = 30\n\n[[organization]]\nname = \"main\"\nkey_env = \"KEY_MAIN\"\nactions = \"{}\"\n\n\
             [[organization]]\nname = \"second\"\nkey_env = \"KEY_SECOND\"\n",
            actions.display()
        ),
    )
    .unwrap();
    let args = [
        "--base-url",
        &emu.base_url,
        "--out",
        out.to_str().unwrap(),
        "fleet",
        "run",
        "--config",
        config.to_str().unwrap(),
        "--lake",
        lake,
    ];
    Bin::new(dir).args(args).env("KEY_MAIN", FULL_KEY).env("KEY_SECOND", &org_key(1)).run()
}

/// `run` of the main organization into `dir/out` with the reviewed file, optionally crashing at
/// a named point; returns the output and the arguments.
fn run_main(
    emu: &TestEmu,
    dir: &Path,
    lake: &str,
    out: &str,
    file: &Path,
    crash: Option<&str>,
) -> (std::process::Output, [String; 13]) {
    let envs: Vec<(&str, &str)> = crash.map(|c| ("CREATOR_ETL_CRASH_AT", c)).into_iter().collect();
    run_main_with(emu, dir, lake, out, file, &envs)
}

/// [`run_main`] with more environment variables.
fn run_main_with(
    emu: &TestEmu,
    dir: &Path,
    lake: &str,
    out: &str,
    file: &Path,
    more: &[(&str, &str)],
) -> (std::process::Output, [String; 13]) {
    let out = dir.join(out);
    let args = [
        "--base-url",
        &emu.base_url,
        "--out",
        out.to_str().unwrap(),
        "run",
        "--since-days",
        "30",
        "--lake",
        lake,
        "--org",
        "main",
        "--actions",
        file.to_str().unwrap(),
    ];
    (Bin::new(dir).args(args).key(FULL_KEY).envs(more.iter().copied()).run(), args.map(str::to_owned))
}

/// Writes the emulator received per target.
fn writes(emu: &TestEmu, target: &str) -> usize {
    emu.state.writes().iter().filter(|w| w.target == target).count()
}

/// A SQL query over the whole lake, as CSV lines (header first).
fn lake_query(dir: &Path, lake: &str, sql: &str) -> Vec<String> {
    let file = dir.join("q.sql");
    std::fs::write(&file, format!("{sql}\n")).unwrap();
    let out = dir.join("query-out");
    let args = ["--out", out.to_str().unwrap(), "query", file.to_str().unwrap(), "--lake", lake, "--format", "csv"];
    let o = run_bin(dir, &args, &[]);
    assert_exit(&args, &o, 0);
    String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect()
}

/// Each run of a fleet on a fresh `--out` (an `emptyDir`, another shard): every approved row
/// is sent once in all, the lake keeps both runs' history, ledger and results, and the second
/// run is a quick sync on the restored snapshot.
#[test]
fn a_fleet_on_a_fresh_out_each_time_sends_each_row_once_and_keeps_the_history() {
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (file, approved, not_approved) = reviewed(&emu, dir.path());

    let o = fleet_run(&emu, dir.path(), &dir.path().join("out-1"), &lake, &file);
    assert_exit(&[], &o, 0);
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}: sent by the first run\n{}", show(&[], &o));
    }
    // An application changes status between the runs: the history must keep both.
    let moved = accept_one_pending(&emu);

    let o = fleet_run(&emu, dir.path(), &dir.path().join("out-2"), &lake, &file);
    assert_exit(&[], &o, 0);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("restored"), "the restore is logged\n{}", show(&[], &o));
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}: not sent again by the second run\n{}", show(&[], &o));
    }
    assert_eq!(writes(&emu, &not_approved), 0);

    // Both runs of each organization in the lake's ledger, the second a quick sync.
    let runs = lake_query(
        dir.path(),
        &lake,
        "SELECT organization, sync_mode, report_json IS NOT NULL AS report FROM runs ORDER BY organization, finished_at",
    );
    assert_eq!(
        runs,
        ["organization,sync_mode,report", "main,full,true", "main,quick,true", "second,full,true", "second,quick,true"],
        "{runs:?}"
    );
    // The history has the application's first status, closed, and its new one.
    let history = lake_query(
        dir.path(),
        &lake,
        &format!(
            "SELECT status, valid_to IS NULL AS open FROM application_status_history \
             WHERE organization = 'main' AND id = {moved} ORDER BY valid_from"
        ),
    );
    assert_eq!(history, ["status,open", "pending,false", "accepted,true"]);
    let apps = emu.state.applications(MAIN_ORG).len();
    let counts = lake_query(
        dir.path(),
        &lake,
        "SELECT (SELECT count(*) FROM application_status_history WHERE organization = 'main') AS history, \
         (SELECT count(DISTINCT run_id) FROM action_results WHERE organization = 'main') AS action_runs",
    );
    assert_eq!(counts, ["history,action_runs".to_owned(), format!("{},2", apps + 1)]);
}

/// The actions' intents reach the lake before anything is sent, and their outcomes before the
/// other tables: a run that dies during its lake commit, and one that dies right after its first
/// intent, on `--out`s that are then lost, are followed by runs that send each row once in all.
#[test]
fn a_run_killed_on_a_lost_out_is_followed_by_no_second_send() {
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (file, approved, _) = reviewed(&emu, dir.path());
    let run = |out: &str, crash: Option<&str>| run_main(&emu, dir.path(), &lake, out, &file, crash);

    // Every row sent, then killed after the lake's first commit: the journal is in the lake,
    // the sync's tables and `runs` are not.
    let (o, args) = run("out-1", Some("lake-after-first-table"));
    assert!(!o.status.success(), "{}", show(&args.each_ref().map(String::as_str), &o));
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
    let (o, args) = run("out-2", None);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}: the restored journal says it was applied\n{}", show(&[], &o));
    }
    let report: serde_json::Value = report(&o);
    assert!(report["restored"]["rows"]["action_journal"].as_u64().unwrap() >= 4, "{}", report["restored"]);
    // `run --actions` prints the actions' summary on stderr, as `actions apply` does.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("actions run ") && stderr.contains("skipped_already_applied"), "{stderr}");

    // A new file of rows never sent; killed right after the first row's intent, before it went
    // out. The next run on another fresh `--out` sends each row once.
    let sales = updatable_sales(&emu);
    let fresh = [sales[4], sales[5], sales[6]];
    let rows: Vec<String> = fresh.iter().map(|s| format!("update_sale,yes,{s},,3100,,,,ann,,n{s}")).collect();
    std::fs::write(&file, format!("{HEADER}\n{}\n", rows.join("\n"))).unwrap();
    let (o, args) = run("out-3", Some("actions-after-intent"));
    assert!(!o.status.success(), "{}", show(&args.each_ref().map(String::as_str), &o));
    for s in fresh {
        assert_eq!(writes(&emu, &s.to_string()), 0, "nothing sent before the crash");
    }
    let (o, args) = run("out-4", None);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    for s in fresh {
        assert_eq!(writes(&emu, &s.to_string()), 1, "sale {s}: sent once\n{}", show(&[], &o));
    }
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
}

/// Accepts a pending application of the main organization, as a brand would between two runs;
/// its id.
fn accept_one_pending(emu: &TestEmu) -> i64 {
    let moved = emu
        .state
        .applications(MAIN_ORG)
        .into_iter()
        .find(|a| a.status == ApplicationStatus::Pending)
        .expect("a pending application")
        .id;
    assert!(emu.state.set_application_status(moved, ApplicationStatus::Accepted));
    moved
}

/// Appends an approved sale update of the `nth` updatable sale to the reviewed file; its id.
fn approve_one_more(emu: &TestEmu, file: &std::path::Path, nth: usize, total: u32, row_id: &str) -> i64 {
    let sale = updatable_sales(emu)[nth];
    let mut text = std::fs::read_to_string(file).unwrap();
    text.push_str(&format!("update_sale,yes,{sale},,{total},,,,ann,,{row_id}\n"));
    std::fs::write(file, text).unwrap();
    sale
}

/// An `--out` that fell behind (its organization was synced from another `--out` meanwhile, as
/// when shards are changed and changed back) takes the lake's state before it sends anything:
/// a row the other `--out` applied is not sent again, and the lake's ledger keeps every run.
#[test]
fn an_out_that_fell_behind_takes_the_lakes_state_first() {
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (file, approved, _) = reviewed(&emu, dir.path());
    let show_run = |o: &(std::process::Output, [String; 13])| show(&o.1.each_ref().map(String::as_str), &o.0);

    let first = run_main(&emu, dir.path(), &lake, "out-a", &file, None);
    assert_eq!(first.0.status.code(), Some(0), "{}", show_run(&first));
    // Another `--out` syncs the organization, with one more row.
    let sale = approve_one_more(&emu, &file, 7, 2900, "r9");
    let second = run_main(&emu, dir.path(), &lake, "out-b", &file, None);
    assert_eq!(second.0.status.code(), Some(0), "{}", show_run(&second));
    assert_eq!(writes(&emu, &sale.to_string()), 1);

    // Back on the first `--out`: it restores, and sends nothing again.
    let third = run_main(&emu, dir.path(), &lake, "out-a", &file, None);
    assert_eq!(third.0.status.code(), Some(0), "{}", show_run(&third));
    assert_eq!(writes(&emu, &sale.to_string()), 1, "{}", show_run(&third));
    let report: serde_json::Value = report(&third.0);
    let why = report["restored"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("does not know"), "{}", report["restored"]);
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
    let runs = lake_query(dir.path(), &lake, "SELECT count(*) AS n FROM runs WHERE organization = 'main'");
    assert_eq!(runs, ["n", "3"]);

    // The other `--out` sends one more row and dies after committing its journal to the lake,
    // before its `runs` row: the first `--out` still knows every run in `runs`, but not that
    // write, and must not send it again.
    let sale = approve_one_more(&emu, &file, 8, 2800, "r10");
    let fourth = run_main(&emu, dir.path(), &lake, "out-b", &file, Some("lake-after-first-table"));
    assert!(!fourth.0.status.success(), "{}", show_run(&fourth));
    assert_eq!(writes(&emu, &sale.to_string()), 1);
    let fifth = run_main(&emu, dir.path(), &lake, "out-a", &file, None);
    assert_eq!(fifth.0.status.code(), Some(0), "{}", show_run(&fifth));
    assert_eq!(writes(&emu, &sale.to_string()), 1, "{}", show_run(&fifth));
}

/// A lake written by an older creator-etl (no `action_journal`, `runs` without the quick-sync
/// columns) restores: the missing columns read as NULL, the restored run counts as a full sync
/// of unknown scope, so the next sync is a full one, and the lake then gains the new columns.
#[test]
fn a_lake_written_at_an_older_schema_restores() {
    use creator_etl::load::catalog::lake_tables as tables;
    use creator_etl::load::lake::{commit_tables, stage, LakeConfig};
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let old = dir.path().join("out-old");
    let args = ["--base-url", &emu.base_url, "--out", old.to_str().unwrap(), "run", "--since-days", "30"];
    let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_exit(&args, &o, 0);
    // Its tables as an older creator-etl committed them.
    let out = creator_etl::out::OutDir::new(&old);
    let staged = dir.path().join("staged");
    stage(&out, "main", &staged, &tables()).unwrap();
    let conn = creator_etl::load::warehouse::open_writer(&out).unwrap();
    let runs = staged.join("runs.parquet");
    conn.execute_batch(&format!(
        "COPY (SELECT 'main' AS organization, * EXCLUDE (sync_mode, sync_scope, pages_verified, last_reconcile_at, \
         counts_agree) FROM runs) TO '{}' (FORMAT parquet);",
        runs.display()
    ))
    .unwrap();
    drop(conn);
    let config = LakeConfig { url: lake.clone(), org: "main".into(), unconditional_writes_ok: false };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(commit_tables(&config, &staged, &tables())).unwrap();
    assert!(!dir.path().join("lake/action_journal").exists());

    let (file, approved, _) = reviewed(&emu, dir.path());
    let (o, args) = run_main(&emu, dir.path(), &lake, "out-new", &file, None);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    let report: serde_json::Value = report(&o);
    assert_eq!(report["restored"]["rows"]["runs"], 1, "{}", report["restored"]);
    assert!(report["restored"]["rows"]["applications"].as_u64().unwrap() > 0);
    assert_eq!(
        report["extract"]["sync"]["mode"], "full",
        "no snapshot of a known scope: {}",
        report["extract"]["sync"]
    );
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
    let runs = lake_query(
        dir.path(),
        &lake,
        "SELECT sync_mode, sync_scope IS NULL AS unknown_scope FROM runs WHERE organization = 'main' ORDER BY finished_at",
    );
    assert_eq!(runs, ["sync_mode,unknown_scope", "full,true", "full,false"]);
}

/// The same from an S3 lake (moto): a second run on a fresh `--out` restores, sends nothing
/// again and is a quick sync.
#[test]
fn a_fresh_out_restores_from_an_s3_lake() {
    let moto = crate::moto::Moto::start(&crate::demo::notebook_python(), "lake");
    let envs: Vec<(&str, &str)> = moto.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = "s3://lake/creator-etl";
    let (file, approved, _) = reviewed(&emu, dir.path());
    let (o, args) = run_main_with(&emu, dir.path(), lake, "out-1", &file, &envs);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    let (o, args) = run_main_with(&emu, dir.path(), lake, "out-2", &file, &envs);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    let report: serde_json::Value = report(&o);
    assert_eq!(report["restored"]["rows"]["runs"], 1, "{}", report["restored"]);
    assert_eq!(report["extract"]["sync"]["mode"], "quick", "{}", report["extract"]["sync"]);
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
}

/// The `run` of the main organization, without actions, into `dir/OUT`, with `more` arguments
/// (a lake, say).
fn run_plain(emu: &TestEmu, dir: &Path, out: &str, more: &[&str]) -> std::process::Output {
    Bin::new(dir).emu(emu).out(&dir.join(out)).args(["run", "--since-days", "30"]).args(more).key(FULL_KEY).expect(0)
}

/// When only the lake's action journal lists a run that `--out` does not know (another `--out`
/// sent actions and died before committing its sync), the journal is merged and the warehouse's
/// own history and ledger stay: the lake holds no data of the organization to restore.
#[test]
fn a_journal_only_difference_merges_the_journal_and_keeps_the_warehouse() {
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (file, approved, _) = reviewed(&emu, dir.path());
    // An `--out` with its own history, never pushed to the lake: two runs and a status change.
    run_plain(&emu, dir.path(), "own", &[]);
    let moved = accept_one_pending(&emu);
    run_plain(&emu, dir.path(), "own", &[]);
    let own = dir.path().join("own");
    let history = count(&db(&own), "SELECT count(*) FROM application_status_history");
    assert_eq!(count(&db(&own), "SELECT count(*) FROM runs"), 2);

    // Another `--out` sends the actions and dies after the lake's first commit: the lake's
    // journal holds its run, and no data or `runs` row of the organization.
    let (o, args) = run_main(&emu, dir.path(), &lake, "other", &file, Some("lake-after-first-table"));
    assert!(!o.status.success(), "{}", show(&args.each_ref().map(String::as_str), &o));

    let o = run_plain(&emu, dir.path(), "own", &["--lake", &lake, "--org", "main"]);
    let report: serde_json::Value = report(&o);
    let why = report["restored"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("action journal"), "{}", report["restored"]);
    assert_eq!(count(&db(&own), "SELECT count(*) FROM runs"), 3, "the ledger continues\n{}", show(&[], &o));
    assert!(count(&db(&own), "SELECT count(*) FROM application_status_history") >= history, "the history is kept");
    assert_eq!(
        count(
            &db(&own),
            &format!("SELECT count(*) FROM application_status_history WHERE id = {moved} AND valid_to IS NOT NULL")
        ),
        1,
        "the closed status of the moved application is still there"
    );
    let sent = count(&db(&own), "SELECT count(DISTINCT run_id) FROM action_journal");
    assert_eq!(sent, 1, "the other `--out`'s journal is merged");
    for target in &approved {
        assert_eq!(writes(&emu, target), 1, "{target}");
    }
}

/// `load --lake` from an `--out` that lacks the organization's state restores it first, so its
/// push never shrinks the lake's action journal or replaces its ledger with one run's: a worker
/// on a fresh `--out` afterwards sends nothing twice.
#[test]
fn load_into_a_lake_from_a_new_out_keeps_the_lakes_journal_and_runs() {
    let emu = emulator();
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (file, approved, _) = reviewed(&emu, dir.path());
    let (o, args) = run_main(&emu, dir.path(), &lake, "fleet-volume", &file, None);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);

    let laptop = dir.path().join("laptop");
    let args = ["--base-url", &emu.base_url, "--out", laptop.to_str().unwrap(), "extract", "--since-days", "30"];
    assert_exit(&args, &run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]), 0);
    let args = ["--out", laptop.to_str().unwrap(), "load", "--lake", &lake, "--org", "main"];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("restored"), "{}", show(&args, &o));
    assert_eq!(
        lake_query(dir.path(), &lake, "SELECT count(*) AS n FROM runs WHERE organization = 'main'"),
        ["n", "2"],
        "both syncs in the lake's ledger"
    );

    let (o, args) = run_main(&emu, dir.path(), &lake, "new-volume", &file, None);
    assert_exit(&args.each_ref().map(String::as_str), &o, 0);
    for target in &approved {
        assert_eq!(
            writes(&emu, target),
            1,
            "{target}: the lake's journal still says it was applied\n{}",
            show(&[], &o)
        );
    }
}
