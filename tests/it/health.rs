//! The report's banner never calls data fresh after a run that died or failed (issue 32): a run
//! killed during its lake push, a lake push that failed on I/O and a plain `load` after it, a
//! fleet killed after its extracts and after its commit. Each is read back through `creator-etl
//! report`, as a monitor would: its exit code and its JSON summary.

use std::path::Path;

use creator_etl::emulator::EmulatorConfig;
use serde_json::Value;

use crate::util::*;

/// `creator-etl report --out OUT`: its exit code and each page's `(organization, health)`.
fn health(dir: &Path, out: &Path) -> (i32, Vec<(String, String)>) {
    let o = Bin::new(dir).args(["report"]).out(out).run();
    let summary: Value = report(&o);
    let pages = summary["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["organization"].as_str().unwrap_or("").to_owned(), p["health"].as_str().unwrap().to_owned()))
        .collect();
    (o.status.code().unwrap(), pages)
}

/// The page's banner: the text of its `data-health` element.
fn banner(page: &Path) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    let at = html.find("data-health=").expect("a banner");
    html[at..].split("</div>").next().unwrap().to_owned()
}

/// Regression (issue 32): a `run --lake` killed during its push (after its load) left the page
/// fresh while the lake's `runs` lacked the run. It reads interrupted, in its lake stage, until
/// a command that redoes the lake stage completes.
#[test]
fn a_run_killed_during_its_lake_push_is_interrupted_until_the_lake_is_pushed() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let lake = format!("file://{}", dir.path().join("lake").display());
    let run = |crash: Option<&str>| {
        let mut bin = Bin::new(dir.path())
            .args(["run", "--since-days", "10", "--lake", &lake, "--org", "acme"])
            .emu(&emu)
            .out(&out)
            .key(FULL_KEY);
        if let Some(point) = crash {
            bin = bin.env("CREATOR_ETL_CRASH_AT", point);
        }
        bin.run()
    };
    assert_exit(&[], &run(None), 0);
    assert_eq!(health(dir.path(), &out), (0, vec![(String::new(), "fresh".into())]), "a monitor's 0");

    let o = run(Some("lake-after-first-table"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&[], &o));
    let (code, pages) = health(dir.path(), &out);
    assert_eq!((code, pages[0].1.as_str()), (7, "interrupted"), "never fresh");
    let text = banner(&out.join("report/index.html"));
    assert!(text.contains("Interrupted: `creator-etl run` (started"), "{text}");
    assert!(text.contains("stopped in its lake stage"), "the stage it reached: {text}");
    // Another command holding the directory now does not make the dead run read as running.
    let lock = creator_etl::out::OutDir::new(&out).lock("another command").unwrap();
    assert_eq!(health(dir.path(), &out).1[0].1, "interrupted");
    drop(lock);

    // A load without the lake does not redo the lake stage; `load --lake` does.
    Bin::new(dir.path()).args(["load"]).out(&out).expect(0);
    assert_eq!(health(dir.path(), &out).1[0].1, "interrupted");
    Bin::new(dir.path()).args(["load", "--lake", &lake, "--org", "acme"]).out(&out).expect(0);
    assert_eq!(health(dir.path(), &out), (0, vec![(String::new(), "fresh".into())]));
}

/// Regression (issue 32): a lake push that failed on I/O (its staging directory could not be
/// made) was recorded as the sync's failure, so a plain `load` cleared it. It is the lake
/// stage's, and stays failed until `load --lake` pushes.
#[test]
fn a_lake_push_that_failed_on_io_stays_failed_after_a_plain_load() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let lake = format!("file://{}", dir.path().join("lake").display());
    let run_args = ["run", "--since-days", "10", "--lake", &lake, "--org", "acme"];
    Bin::new(dir.path()).args(run_args).emu(&emu).out(&out).key(FULL_KEY).expect(0);
    // The push stages the organization's tables under `OUT/.lake-staging`: a file there makes
    // that an I/O error.
    let staging = out.join(".lake-staging");
    std::fs::write(&staging, "in the way").unwrap();
    let o = Bin::new(dir.path()).args(run_args).emu(&emu).out(&out).key(FULL_KEY).expect(1);
    assert!(String::from_utf8_lossy(&o.stderr).contains(".lake-staging"), "{}", show(&run_args, &o));
    assert_eq!(health(dir.path(), &out).1[0].1, "failed", "the run's own page and the next report");

    Bin::new(dir.path()).args(["load"]).out(&out).expect(0);
    let (code, pages) = health(dir.path(), &out);
    assert_eq!((code, pages[0].1.as_str()), (7, "failed"), "a plain load does not repair the lake");
    let text = banner(&out.join("report/index.html"));
    assert!(text.contains("failed in its lake stage") && text.contains(".lake-staging"), "{text}");
    assert!(text.contains("`load --lake` redoes it"), "{text}");

    std::fs::remove_file(&staging).unwrap();
    Bin::new(dir.path()).args(["load", "--lake", &lake, "--org", "acme"]).out(&out).expect(0);
    assert_eq!(health(dir.path(), &out), (0, vec![(String::new(), "fresh".into())]));
}

/// Regression (issue 32): a `fleet run` killed after its organizations' extracts (before their
/// batch committed) left their status files saying `completed` from the run before, and every
/// page fresh. And one killed after its commit, before the readers' snapshot was published, left
/// readers on old data that the pages called fresh. Both read not fresh until a run completes.
#[test]
fn a_fleet_killed_after_its_extracts_or_before_its_publish_is_never_fresh() {
    use creator_etl::emulator::org_key;
    let mut cfg = EmulatorConfig::for_tests(40);
    cfg.data.organizations = 2;
    let emu = TestEmu::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = dir.path().join("fleet.toml");
    let mut text = String::new();
    for (i, name) in ["a", "b"].iter().enumerate() {
        text.push_str(&format!("[[organization]]\nname = \"{name}\"\nkey_env = \"KEY_{i}\"\nsince_days = 10\n"));
    }
    std::fs::write(&file, text).unwrap();
    let keys = [("KEY_0".to_owned(), org_key(1)), ("KEY_1".to_owned(), org_key(2))];
    let fleet = |crash: Option<&str>| {
        let mut bin = Bin::new(dir.path())
            .emu(&emu)
            .out(&out)
            .args(["fleet", "run", "--config", file.to_str().unwrap(), "--batch-size", "2"])
            .envs(keys.iter().cloned());
        if let Some(point) = crash {
            bin = bin.env("CREATOR_ETL_CRASH_AT", point);
        }
        bin.run()
    };
    let all = |state: &str| vec![("a".to_owned(), state.to_owned()), ("b".to_owned(), state.to_owned())];
    assert_exit(&[], &fleet(None), 0);
    assert_eq!(health(dir.path(), &out), (0, all("fresh")));

    let o = fleet(Some("fleet-load-before-commit"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&[], &o));
    assert_eq!(health(dir.path(), &out), (7, all("interrupted")), "killed after the extracts");
    let page = banner(&out.join("report/org/a.html"));
    assert!(page.contains("`creator-etl fleet run` (started") && page.contains("stopped in its load stage"), "{page}");

    let o = fleet(Some("fleet-publish-before-snapshot"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&[], &o));
    assert_eq!(health(dir.path(), &out), (7, all("failed")), "committed, never published");
    let page = banner(&out.join("report/org/b.html"));
    assert!(page.contains("never reached the readers&#39; snapshot"), "{page}");

    assert_exit(&[], &fleet(None), 0);
    assert_eq!(health(dir.path(), &out), (0, all("fresh")), "a completed run publishes and settles");
}

/// Regression (issue 32 review): with a fleet warehouse, a lake and actions, an organization's
/// `runs` row reaches the lake after its actions, in a push of its own. A fleet killed in that
/// push left every stage done and the page fresh while the lake lacked the run.
#[test]
fn a_fleet_killed_in_an_organizations_push_after_its_actions_is_interrupted() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    crate::fleet::write_main_corrections(dir.path());
    let file = dir.path().join("fleet.toml");
    std::fs::write(
        &file,
        "[[organization]]\nname = \"main\"\nkey_env = \"KEY_MAIN\"\nsince_days = 10\nactions = \"main.csv\"\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let lake = format!("file://{}", dir.path().join("lake").display());
    let fleet = |crash: Option<&str>| {
        let mut bin = Bin::new(dir.path())
            .emu(&emu)
            .out(&out)
            .args(["fleet", "run", "--config", file.to_str().unwrap(), "--lake", &lake])
            .env("KEY_MAIN", FULL_KEY);
        if let Some(point) = crash {
            bin = bin.env("CREATOR_ETL_CRASH_AT", point);
        }
        bin.run()
    };
    assert_exit(&[], &fleet(None), 0);
    assert_eq!(health(dir.path(), &out), (0, vec![("main".to_owned(), "fresh".to_owned())]));
    let o = fleet(Some("lake-before-runs"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&[], &o));
    // Killed before its final publish too: the readers' snapshot lacks the run (failed, the
    // worst), and the lake its `runs` row (interrupted, said below it).
    assert_eq!(health(dir.path(), &out), (7, vec![("main".to_owned(), "failed".to_owned())]));
    let page = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    assert!(page.contains("never reached the readers&#39; snapshot"), "{page}");
    assert!(page.contains("stopped in its lake stage"), "{page}");
    assert!(page.contains("`creator-etl fleet run` redoes it"), "a fleet's organization's remedy: {page}");
    assert_exit(&[], &fleet(None), 0);
    assert_eq!(health(dir.path(), &out).0, 0);
}

/// Regression (issue 32 review): an `actions apply` killed after it recorded an intent was
/// cleared by an apply of another file, which only warns of the open intent; and a `load
/// --from-raw` of an older run hid a newer extract that was never loaded. A plan alone
/// (`extract --plan-only`) is no failure.
#[test]
fn open_intents_and_unloaded_extracts_keep_the_page_failed() {
    use creator_etl::emulator::{PayoutKind, MAIN_ORG};
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sync = |args: &[&str]| Bin::new(dir.path()).args(args).emu(&emu).out(&out).key(FULL_KEY);
    sync(&["run", "--since-days", "10"]).expect(0);
    let first_run: Value = report(&sync(&["extract", "--plan-only", "--since-days", "10"]).expect(0));
    assert_eq!(first_run["status"], "planned");
    assert_eq!(health(dir.path(), &out).0, 0, "a plan alone is no failure");

    // An apply killed between its intent and its send.
    let payouts: Vec<String> = emu
        .state
        .payouts()
        .into_iter()
        .filter(|p| p.kind == PayoutKind::DueCredit && p.org == MAIN_ORG)
        .map(|p| p.uuid)
        .collect();
    let csv = |name: &str, uuid: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("action,approved,creator_payout_uuid\nmark_payout,yes,{uuid}\n")).unwrap();
        path
    };
    let (a, b) = (csv("a.csv", &payouts[0]), csv("b.csv", &payouts[1]));
    let o = sync(&["actions", "apply", a.to_str().unwrap()]).env("CREATOR_ETL_CRASH_AT", "actions-after-intent").run();
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&[], &o));
    assert_eq!(health(dir.path(), &out), (7, vec![(String::new(), "interrupted".into())]));
    // Another file's apply leaves a's intent open: still not fresh.
    sync(&["actions", "apply", b.to_str().unwrap()]).expect(0);
    let (code, pages) = health(dir.path(), &out);
    assert_eq!((code, pages[0].1.as_str()), (7, "failed"));
    assert!(banner(&out.join("report/index.html")).contains("still open"), "the open intent is said");
    sync(&["actions", "apply", a.to_str().unwrap()]).expect(0);
    assert_eq!(health(dir.path(), &out).0, 0, "a's own apply resolves it");

    // An extract that finished, then a load of an older run.
    let loaded: Value = report(&sync(&["run", "--since-days", "10"]).expect(0));
    let older = loaded["extract"]["run_id"].as_str().unwrap().to_owned();
    sync(&["extract", "--since-days", "10"]).expect(0);
    Bin::new(dir.path()).args(["load", "--from-raw", &older]).out(&out).expect(0);
    let (code, pages) = health(dir.path(), &out);
    assert_eq!((code, pages[0].1.as_str()), (7, "failed"), "the newer extract never reached the warehouse");
    assert!(banner(&out.join("report/index.html")).contains("finished its extract but was not loaded"));
    Bin::new(dir.path()).args(["load"]).out(&out).expect(0);
    assert_eq!(health(dir.path(), &out).0, 0);
}
