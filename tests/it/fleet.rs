//! `fleet run` and `fleet status` through the real binary, against an emulator serving numbered
//! organizations, each with its own key and policy.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use creator_etl::emulator::{numbered_org, org_key, EmulatorConfig, Fault, OrgPolicy, RatePolicy};
use serde_json::Value;

use crate::util::{assert_exit, count, db, report, run_bin, show, Bin, TestEmu};

/// An emulator of `n` numbered organizations of `apps` applications each.
pub(crate) fn fleet_emulator(n: u32, apps: usize, policies: &[(u32, OrgPolicy)]) -> TestEmu {
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.data.organizations = n;
    cfg.data.org_applications = apps;
    cfg.faults.kinds = vec![Fault::Unavailable];
    cfg.org_policies = policies.iter().cloned().collect();
    TestEmu::start(cfg)
}

/// A fleet file naming organization k of the emulator as `names[k-1]`, keys in `KEY_<k>`.
pub(crate) fn fleet_file(dir: &Path, names: &[&str], extra: &str) -> std::path::PathBuf {
    let mut text = format!("[defaults]\nsince_days = 60\n{extra}\n");
    for (i, name) in names.iter().enumerate() {
        text.push_str(&format!("[[organization]]\nname = \"{name}\"\nkey_env = \"KEY_{}\"\n", i + 1));
    }
    let path = dir.join("fleet.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn key_env(n: u32) -> Vec<(String, String)> {
    (1..=n).map(|k| (format!("KEY_{k}"), org_key(k))).collect()
}

fn fleet(dir: &Path, emu: &TestEmu, args: &[&str], keys: &[(String, String)]) -> std::process::Output {
    Bin::new(dir).emu(emu).out(&dir.join("out")).args(["fleet"]).args(args).envs(keys.iter().cloned()).run()
}

fn by_name(rep: &Value) -> BTreeMap<String, Value> {
    let list = rep.as_array().or_else(|| rep["organizations"].as_array()).unwrap();
    list.iter().map(|o| (o["name"].as_str().unwrap().to_owned(), o.clone())).collect()
}

/// Applications in an organization's warehouse.
fn warehouse_ids(dir: &Path, name: &str) -> BTreeSet<i64> {
    let c = db(&dir.join("out/orgs").join(name));
    let mut st = c.prepare("SELECT id FROM applications").unwrap();
    st.query_map([], |r| r.get::<_, i64>(0)).unwrap().map(Result::unwrap).collect()
}

pub(crate) fn truth_ids(emu: &TestEmu, k: u32) -> BTreeSet<i64> {
    emu.state.applications(numbered_org(k)).iter().map(|a| a.id).collect()
}

/// The issue's mixed fleet: a revoked key, an organization under 503s, one at its hourly cap,
/// one whose data fails a quality check under `--strict`, and two healthy ones, which complete with exactly their own data. Then `fleet status`, the
/// Prometheus textfile and the OpenLineage events.
#[test]
fn a_mixed_fleet_isolates_every_fault() {
    mixed_fleet(Kind::PerOrg);
}

/// The same mixed fleet loaded into one fleet warehouse, in batches: the faults stay isolated.
#[test]
fn a_mixed_fleet_isolates_every_fault_in_a_fleet_warehouse() {
    mixed_fleet(Kind::Fleet);
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    PerOrg,
    Fleet,
}

fn mixed_fleet(kind: Kind) {
    let capped =
        RatePolicy { min_interval: Duration::ZERO, hourly_cap: Some(3), cap_window: Duration::from_secs(3600) };
    let emu = fleet_emulator(
        6,
        150,
        &[
            (2, OrgPolicy { revoked: true, ..OrgPolicy::default() }),
            (3, OrgPolicy { fault_rate: Some(1.0), ..OrgPolicy::default() }),
            (4, OrgPolicy { rate: Some(capped), ..OrgPolicy::default() }),
            (6, OrgPolicy { skewed_totals: true, ..OrgPolicy::default() }),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let names = ["alpha", "revoked", "storm", "capped", "omega", "skewed"];
    let file = fleet_file(dir.path(), &names, "");
    // The capped organization's own setting tells its client the cap too.
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "name = \"capped\"\nkey_env = \"KEY_4\"\n",
        "name = \"capped\"\nkey_env = \"KEY_4\"\nhourly_cap = 3\n",
    );
    std::fs::write(&file, text).unwrap();
    let metrics = dir.path().join("fleet.prom");
    let lineage = dir.path().join("lineage.ndjson");
    let args = [
        "run",
        "--config",
        file.to_str().unwrap(),
        "--max-duration",
        "15s",
        "--strict",
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--openlineage-file",
        lineage.to_str().unwrap(),
    ];
    let keys = key_env(6);
    let warehouse = if kind == Kind::Fleet { "fleet" } else { "per-org" };
    let o = fleet(
        dir.path(),
        &emu,
        &[&args[..], &["--max-loads", "1", "--max-attempts", "2", "--warehouse", warehouse]].concat(),
        &keys,
    );
    assert_exit(&args, &o, 6);
    let rep: Value = report(&o);
    let orgs = by_name(&rep);
    let outcome = |n: &str| orgs[n]["outcome"].as_str().unwrap().to_owned();
    assert_eq!(outcome("alpha"), "completed", "{}", show(&args, &o));
    assert_eq!(outcome("omega"), "completed");
    assert_eq!(outcome("revoked"), "failed");
    assert_eq!(orgs["revoked"]["exit_code"], 4);
    assert_eq!(outcome("storm"), "failed");
    assert!(orgs["storm"]["error"].as_str().unwrap().contains("503"), "{}", orgs["storm"]);
    assert_eq!(outcome("capped"), "incomplete");
    assert!(orgs["capped"]["error"].as_str().unwrap().contains("--max-duration"), "{}", orgs["capped"]);
    assert_eq!(orgs["capped"]["resumable"], true);
    assert_eq!(outcome("skewed"), "failed");
    assert!(orgs["skewed"]["error"].as_str().unwrap().contains("--strict"), "{}", orgs["skewed"]);
    for (name, k) in [("alpha", 1), ("omega", 5)] {
        let ids = match kind {
            Kind::PerOrg => warehouse_ids(dir.path(), name),
            Kind::Fleet => fleet_ids(dir.path(), name),
        };
        assert_eq!(ids, truth_ids(&emu, k), "{name} has exactly its own data");
        assert_eq!(orgs[name]["applications"].as_u64().unwrap() as usize, truth_ids(&emu, k).len());
        assert_eq!(orgs[name]["rate_limited"], 0);
    }
    // The healthy organizations did not wait for the capped one's stop.
    for name in ["alpha", "omega"] {
        assert!(orgs[name]["finished_at"].as_str() < orgs["capped"]["finished_at"].as_str());
    }
    assert!(emu.state.violations().iter().all(|v| v.key == "org-4"), "{:?}", emu.state.violations());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("organization") && stderr.contains("capped") && stderr.contains("incomplete"), "{stderr}");
    for k in 1..=6 {
        assert!(!String::from_utf8_lossy(&o.stdout).contains(&org_key(k)), "no key in the report");
    }

    // fleet status: the last success, the last error, and what resumes.
    let o = fleet(dir.path(), &emu, &["status", "--config", file.to_str().unwrap()], &keys);
    assert_exit(&[], &o, 0);
    let status = by_name(&report(&o));
    assert!(status["alpha"]["last_success_at"].is_string());
    assert!(status["revoked"]["last_success_at"].is_null());
    assert!(status["revoked"]["last_error"].as_str().unwrap().contains("401"), "{}", status["revoked"]);
    assert!(status["capped"]["resumable_run"].is_string());
    assert!(status["alpha"]["resumable_run"].is_null());

    // The Prometheus textfile parses with the reference parser.
    let parsed =
        Command::new(crate::demo::notebook_python()).args(["-c", PARSE_METRICS]).arg(&metrics).output().unwrap();
    assert!(parsed.status.success(), "{}", String::from_utf8_lossy(&parsed.stderr));
    let samples: BTreeMap<String, f64> = String::from_utf8_lossy(&parsed.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    assert_eq!(samples["creator_etl_fleet_last_run_success{alpha}"], 1.0);
    assert_eq!(samples["creator_etl_fleet_last_run_success{storm}"], 0.0);
    assert_eq!(samples["creator_etl_fleet_last_run_rows{alpha}"], truth_ids(&emu, 1).len() as f64);
    assert!(samples["creator_etl_fleet_last_success_timestamp_seconds{alpha}"] > 1.7e9);
    assert!(!samples.contains_key("creator_etl_fleet_last_success_timestamp_seconds{storm}"));
    assert!(samples.contains_key("creator_etl_fleet_last_run_requests{capped}"));
    assert!(samples.contains_key("creator_etl_fleet_last_run_rate_limited{omega}"));
    assert!(samples.contains_key("creator_etl_fleet_last_run_duration_seconds{revoked}"));

    // OpenLineage: a START and a COMPLETE or FAIL per organization, with the spec's required fields.
    let events: Vec<Value> =
        std::fs::read_to_string(&lineage).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 12);
    for e in &events {
        check_run_event(e);
    }
    let kinds = |job: &str| -> Vec<String> {
        events.iter().filter(|e| e["job"]["name"] == job).map(|e| e["eventType"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(kinds("fleet.alpha"), ["START", "COMPLETE"]);
    assert_eq!(kinds("fleet.storm"), ["START", "FAIL"]);
    assert_eq!(kinds("fleet.capped"), ["START", "ABORT"], "stopped by its budget: it resumes");
    let fail = events.iter().find(|e| e["job"]["name"] == "fleet.revoked" && e["eventType"] == "FAIL").unwrap();
    assert!(fail["run"]["facets"]["errorMessage"]["message"].as_str().unwrap().contains("401"));
    let start = events.iter().find(|e| e["job"]["name"] == "fleet.alpha").unwrap();
    let end = events.iter().rfind(|e| e["job"]["name"] == "fleet.alpha").unwrap();
    assert_eq!(start["run"]["runId"], end["run"]["runId"], "one run id per organization run");
    assert!(start["inputs"][0]["name"].as_str().unwrap().ends_with("/campaign_applications"));
    let output = match kind {
        Kind::PerOrg => "orgs/alpha/warehouse.duckdb",
        Kind::Fleet => "out/warehouse.duckdb",
    };
    assert!(start["outputs"][0]["name"].as_str().unwrap().ends_with(output), "{start}");
    if kind == Kind::Fleet {
        let c = db(&dir.path().join("out"));
        let loaded = count(&c, "SELECT count(DISTINCT organization) FROM applications");
        assert_eq!(loaded, 2, "alpha and omega; no row of a failed or stopped organization");
    }
}

const PARSE_METRICS: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    assert family.type == "gauge", family
    for s in family.samples:
        print(f"{s.name}{{{s.labels['organization']}}} {s.value}")
"#;

/// The required fields of an OpenLineage RunEvent (spec 2-0-2): eventTime, producer, schemaURL,
/// run.runId (a UUID), job.namespace and job.name; datasets with namespace and name.
fn check_run_event(e: &Value) {
    for field in ["eventTime", "producer", "schemaURL", "eventType"] {
        assert!(e[field].is_string(), "{field} in {e}");
    }
    assert!(["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"].contains(&e["eventType"].as_str().unwrap()));
    chrono::DateTime::parse_from_rfc3339(e["eventTime"].as_str().unwrap()).unwrap();
    assert!(e["schemaURL"].as_str().unwrap().starts_with("https://openlineage.io/spec/"));
    uuid::Uuid::parse_str(e["run"]["runId"].as_str().unwrap()).unwrap();
    assert!(e["job"]["namespace"].is_string() && e["job"]["name"].is_string(), "{e}");
    for side in ["inputs", "outputs"] {
        for d in e[side].as_array().unwrap() {
            assert!(d["namespace"].is_string() && d["name"].is_string(), "{d}");
        }
    }
}

/// A request budget stops each organization early, with what it fetched kept; the next run
/// resumes and completes, into one shared lake.
#[test]
fn a_budgeted_run_resumes_and_a_fleet_writes_one_lake() {
    let emu = fleet_emulator(3, 400, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["a", "b", "c"], "");
    let lake = format!("file://{}", dir.path().join("lake").display());
    let keys = key_env(3);
    let args = ["run", "--config", file.to_str().unwrap(), "--lake", &lake, "--max-requests-per-org", "3"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    for name in ["a", "b", "c"] {
        assert_eq!(orgs[name]["outcome"], "incomplete", "{}", orgs[name]);
        assert_eq!(orgs[name]["requests"], 3, "{}", orgs[name]);
        assert!(orgs[name]["error"].as_str().unwrap().contains("request budget of 3"));
        assert_eq!(orgs[name]["resumable"], true);
    }
    let requests = emu.state.requests().len();
    assert_eq!(requests, 9, "exactly the budget");
    let args = ["run", "--config", file.to_str().unwrap(), "--lake", &lake, "--only", "a,c"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs.keys().collect::<Vec<_>>(), ["a", "c"]);
    for (name, k) in [("a", 1), ("c", 3)] {
        assert_eq!(orgs[name]["outcome"], "completed", "{}", orgs[name]);
        assert_eq!(orgs[name]["applications"].as_u64().unwrap() as usize, truth_ids(&emu, k).len());
    }
    // The lake's current snapshot (through its Delta log: a commit retried after the race to
    // create a table leaves unreferenced files beside it) holds a's and c's applications under
    // their names, each once.
    let sql = dir.path().join("count.sql");
    std::fs::write(
        &sql,
        "SELECT organization, count(*) AS n, count(DISTINCT id) AS ids FROM applications GROUP BY 1 ORDER BY 1\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let args = ["--out", out.to_str().unwrap(), "query", sql.to_str().unwrap(), "--lake", &lake, "--format", "csv"];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 0);
    let (a, c) = (truth_ids(&emu, 1).len(), truth_ids(&emu, 3).len());
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("organization,n,ids\na,{a},{a}\nc,{c},{c}\n"));
}

/// `--shard I/N` over N processes covers the fleet exactly once, for several N; bad selections
/// exit 2 before anything is sent.
#[test]
fn shards_cover_the_fleet_exactly_once_and_bad_selections_exit_2() {
    let emu = fleet_emulator(0, 0, &[]);
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=40).map(|i| format!("org-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let file = fleet_file(dir.path(), &refs, "");
    let keys: Vec<(String, String)> = (1..=40).map(|k| (format!("KEY_{k}"), format!("key-{k}"))).collect();
    for n in [1, 2, 3, 5] {
        let mut seen: Vec<String> = vec![];
        for i in 0..n {
            let shard = format!("{i}/{n}");
            let o = fleet(dir.path(), &emu, &["status", "--config", file.to_str().unwrap(), "--shard", &shard], &keys);
            assert_exit(&[], &o, 0);
            seen.extend(by_name(&report(&o)).into_keys());
        }
        seen.sort();
        let mut all = names.clone();
        all.sort();
        assert_eq!(seen, all, "{n} shards");
    }
    for (args, want) in [
        (vec!["--shard", "3/3"], "`--shard` `3/3`"),
        (vec!["--only", "org-1,nobody"], "no organization `nobody`"),
        (vec!["--max-requests-per-org", "0"], "`--max-requests-per-org` must be at least 1"),
        (vec!["--max-duration", "soon"], "`--max-duration` `soon`"),
        (vec!["--lake", "ftp://x"], "`--lake` `ftp://x`"),
    ] {
        let mut all = vec!["run", "--config", file.to_str().unwrap()];
        all.extend(args);
        let o = fleet(dir.path(), &emu, &all, &keys);
        assert_exit(&all, &o, 2);
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{}", show(&all, &o));
    }
    // A missing key variable is reported before anything is sent.
    let o = fleet(dir.path(), &emu, &["run", "--config", file.to_str().unwrap()], &keys[..39]);
    assert_exit(&[], &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("`KEY_40` is not set"));
    assert!(emu.state.requests().is_empty());
}

/// A SIGKILLed fleet, then Ctrl-C: every organization stops resumable, and the next run
/// completes them all with their exact data.
#[test]
fn a_killed_or_interrupted_fleet_resumes_every_organization() {
    let emu = fleet_emulator(3, 300, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["x", "y", "z"], "min_interval_ms = 400\n");
    let keys = key_env(3);
    let out = dir.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_creator-etl"));
    cmd.args(["--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "fleet", "run", "--config"])
        .arg(&file)
        .env_remove("CREATOR_ETL_LAKE")
        .env("CREATOR_HOURLY_CAP", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in &keys {
        cmd.env(k, v);
    }
    // Wait until every organization has fetched something since `from`.
    let all_started = |from: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let seen: BTreeSet<&str> = emu.state.requests()[from..].iter().filter_map(|r| r.key).collect();
            if seen.len() == 3 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the fleet did not start");
    };
    // First a SIGKILL: the locks go with the process, and the raw landings stay.
    let mut child = cmd.spawn().unwrap();
    all_started(0);
    child.kill().unwrap();
    child.wait().unwrap();
    // Then Ctrl-C.
    let before = emu.state.requests().len();
    let child = cmd.spawn().unwrap();
    all_started(before);
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let o = child.wait_with_output().unwrap();
    assert_exit(&[], &o, 130);
    let orgs = by_name(&report(&o));
    for name in ["x", "y", "z"] {
        assert_eq!(orgs[name]["outcome"], "interrupted", "{}", orgs[name]);
        assert_eq!(orgs[name]["resumable"], true);
    }
    let o = fleet(dir.path(), &emu, &["run", "--config", file.to_str().unwrap()], &keys);
    assert_exit(&[], &o, 0);
    for (name, k) in [("x", 1), ("y", 2), ("z", 3)] {
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k));
    }
}

/// `--openlineage-url`: each organization's START and COMPLETE or FAIL reach an HTTP endpoint
/// as JSON POSTs.
#[test]
fn openlineage_events_reach_an_http_endpoint() {
    use std::io::{BufRead, BufReader, Read, Write};
    let emu = fleet_emulator(2, 50, &[(2, OrgPolicy { revoked: true, ..OrgPolicy::default() })]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/lineage", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<(String, Value)>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let _ = tx.send((request_line.trim().to_owned(), serde_json::from_slice(&body).unwrap()));
                    writer.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n").unwrap();
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["good", "gone"], "");
    let args = ["run", "--config", file.to_str().unwrap(), "--openlineage-url", &url];
    let o = fleet(dir.path(), &emu, &args, &key_env(2));
    assert_exit(&args, &o, SOME_FAILED);
    let events: Vec<(String, Value)> = rx.try_iter().collect();
    assert_eq!(events.len(), 4, "{events:?}");
    for (line, e) in &events {
        assert_eq!(line, "POST /api/v1/lineage HTTP/1.1");
        check_run_event(e);
    }
    let kinds: BTreeSet<(String, String)> = events
        .iter()
        .map(|(_, e)| (e["job"]["name"].as_str().unwrap().to_owned(), e["eventType"].as_str().unwrap().to_owned()))
        .collect();
    let want: BTreeSet<(String, String)> =
        [("fleet.good", "START"), ("fleet.good", "COMPLETE"), ("fleet.gone", "START"), ("fleet.gone", "FAIL")]
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
    assert_eq!(kinds, want);
}

const SOME_FAILED: i32 = creator_etl::exit::SOME_FAILED as i32;

/// `--sync` reaches every organization: a second fleet run compares each organization with its
/// own warehouse (7 requests when nothing changed), and finds one organization's change.
#[test]
fn a_fleet_syncs_quickly_per_organization() {
    let emu = fleet_emulator(2, 800, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["one", "two"], "");
    let keys = key_env(2);
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org"];
    let first = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &first, 0);
    assert!(by_name(&report(&first)).values().all(|o| o["sync"] == "full"));

    let moved = emu.state.applications(numbered_org(1)).iter().find(|a| a.status.as_str() == "accepted").unwrap().id;
    emu.state.set_application_status(moved, creator_etl::api::models::ApplicationStatus::Rejected);
    let second = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &second, 0);
    let orgs = by_name(&report(&second));
    assert!(orgs.values().all(|o| o["sync"] == "quick"), "{orgs:?}");
    assert_eq!(orgs["two"]["requests"], 7, "six first pages and one content window");
    for (k, name) in [(1, "one"), (2, "two")] {
        let apps = orgs[name]["applications"].as_u64().unwrap() as usize;
        assert_eq!(apps, truth_ids(&emu, k).len(), "{name}: every application, the kept ones too");
    }
    let c = db(&dir.path().join("out/orgs/one"));
    let status: String = c.query_row("SELECT status FROM applications WHERE id = ?", [moved], |r| r.get(0)).unwrap();
    assert_eq!(status, "rejected");
    assert_eq!(warehouse_ids(dir.path(), "one"), truth_ids(&emu, 1));

    let full = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org", "--sync", "full"];
    let third = fleet(dir.path(), &emu, &full, &keys);
    assert_exit(&full, &third, 0);
    assert!(by_name(&report(&third)).values().all(|o| o["sync"] == "full"));
    assert!(String::from_utf8_lossy(&third.stderr).contains(" full "), "the summary shows the mode");
}

/// A new organization without content statistics (both series `[]` in every window) completes
/// in a fleet beside an established one, each with exactly its own applications, and its run
/// report and ledger carry the warning.
#[test]
fn a_fleet_completes_an_organization_without_content_statistics() {
    let emu = fleet_emulator(2, 120, &[(2, OrgPolicy { no_content: true, ..OrgPolicy::default() })]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["old", "new"], "");
    let keys = key_env(2);
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    for (k, name) in [(1, "old"), (2, "new")] {
        assert_eq!(orgs[name]["outcome"], "completed", "{name}: {}", orgs[name]);
        assert_eq!(warehouse_ids(dir.path(), name), truth_ids(&emu, k), "{name}");
    }
    let run_id = orgs["new"]["run_id"].as_str().unwrap();
    let path = dir.path().join("out/orgs/new/runs").join(format!("{run_id}.json"));
    let run: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let warnings = run["warnings"].to_string();
    assert!(warnings.contains("no content statistics"), "{warnings}");
    assert_eq!(run["content"]["days"], 0);
    let c = db(&dir.path().join("out/orgs/new"));
    let ledger: String = c.query_row("SELECT warnings_json FROM runs", [], |r| r.get(0)).unwrap();
    assert!(ledger.contains("no content statistics"), "{ledger}");
    let days: i64 = c.query_row("SELECT count(*) FROM content_daily", [], |r| r.get(0)).unwrap();
    assert_eq!(days, 0);
    let c = db(&dir.path().join("out/orgs/old"));
    let days: i64 = c.query_row("SELECT count(*) FROM content_daily", [], |r| r.get(0)).unwrap();
    assert!(days > 0, "the established organization has its content");
}

/// A quick sync stopped by its request budget keeps its pages and resumes on the same snapshot:
/// the next run completes it without asking a page twice, and the warehouse is the truth.
#[test]
fn a_quick_sync_stopped_by_its_budget_resumes_on_the_same_snapshot() {
    let emu = fleet_emulator(1, 3000, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["one"], "");
    let keys = key_env(1);
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org"];
    assert_exit(&args, &fleet(dir.path(), &emu, &args, &keys), 0);

    let apps = emu.state.applications(numbered_org(1));
    let mut rng = fastrand::Rng::with_seed(11);
    for _ in 0..3 {
        let a = apps.iter().filter(|a| a.status.as_str() == "accepted").nth(rng.usize(0..500)).unwrap();
        emu.state.set_application_status(a.id, creator_etl::api::models::ApplicationStatus::Canceled);
    }
    let lists = || emu.state.requests().iter().filter(|r| r.route == "GET /campaign_applications").count();
    let before = lists();
    let budget = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org", "--max-requests-per-org", "8"];
    let stopped = fleet(dir.path(), &emu, &budget, &keys);
    assert_exit(&budget, &stopped, 0);
    let org = &by_name(&report(&stopped))["one"];
    assert_eq!(org["outcome"], "incomplete", "{org}");
    assert_eq!(org["resumable"], true);

    let resumed = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &resumed, 0);
    let org = &by_name(&report(&resumed))["one"];
    assert_eq!((org["outcome"].as_str(), org["sync"].as_str()), (Some("completed"), Some("quick")), "{org}");
    let c = db(&dir.path().join("out/orgs/one"));
    let mut st = c.prepare("SELECT id, status FROM applications").unwrap();
    let got: BTreeMap<i64, String> =
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    let want: BTreeMap<i64, String> =
        emu.state.applications(numbered_org(1)).iter().map(|a| (a.id, a.status.to_string())).collect();
    assert_eq!(got, want);
    // Every page asked once over both runs: the resumed run reused the stopped one's pages.
    let pages: Vec<String> = emu.state.requests()[..]
        .iter()
        .filter(|r| r.route == "GET /campaign_applications")
        .skip(before)
        .map(|r| r.query.clone())
        .collect();
    let distinct: BTreeSet<&String> = pages.iter().collect();
    assert_eq!(distinct.len(), pages.len(), "no page asked twice: {pages:?}");
    let mut per_status: BTreeMap<String, usize> = BTreeMap::new();
    for a in emu.state.applications(numbered_org(1)) {
        *per_status.entry(a.status.to_string()).or_default() += 1;
    }
    let full: usize = per_status.values().map(|n| n.div_ceil(100)).sum();
    assert!(pages.len() < full, "a quick sync ({} pages), not a full one ({full})", pages.len());
}

/// The reviewed-CSV header of the fleet tests' actions files.
const ACTIONS_HEADER: &str =
    "action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,reviewer,note,row_id";

/// Samples of a metrics file written by `fleet run`: `name{organization} → value`.
fn metric_samples(path: &Path) -> BTreeMap<String, f64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.replace("{organization=\"", "{").replace("\"}", "}"), value.parse().unwrap())
        })
        .collect()
}

/// Data that synced while some corrections were held, or stopped by the budget, is a completed
/// sync: `last_success_at` advances, the metrics and OpenLineage say the data is fresh, and the
/// actions have their own outcome, gauge and facet. The fleet exits 3, as `run` would. The next
/// run sends the rows the budget left.
#[test]
fn held_or_stopped_corrections_leave_the_sync_completed() {
    let emu = fleet_emulator(1, 50, &[]);
    let dir = tempfile::tempdir().unwrap();
    // `main` is the emulator's main organization (it has sales); `numbered` is organization 1,
    // whose correction names a sale that does not exist (404: failed, held).
    write_main_corrections(dir.path());
    std::fs::write(dir.path().join("numbered.csv"), format!("{ACTIONS_HEADER}\nupdate_sale,yes,999999,,3333,,,,,,\n"))
        .unwrap();
    let file = dir.path().join("fleet.toml");
    std::fs::write(
        &file,
        "[defaults]\nsince_days = 60\n\
         [[organization]]\nname = \"main\"\nkey_env = \"KEY_MAIN\"\nactions = \"main.csv\"\n\
         [[organization]]\nname = \"numbered\"\nkey_env = \"KEY_1\"\nactions = \"numbered.csv\"\n\
         [[organization]]\nname = \"plain\"\nkey_env = \"KEY_2\"\n",
    )
    .unwrap();
    let keys = vec![
        ("KEY_MAIN".to_owned(), crate::util::FULL_KEY.to_owned()),
        ("KEY_1".to_owned(), org_key(1)),
        ("KEY_2".to_owned(), crate::util::OTHER_ORG_KEY.to_owned()),
    ];
    let metrics = dir.path().join("fleet.prom");
    let lineage = dir.path().join("lineage.ndjson");
    // Each extract takes 7 requests (six first pages, one content window): the 8th is `main`'s
    // first correction, and its second finds the budget spent.
    let args = [
        "run",
        "--config",
        file.to_str().unwrap(),
        "--max-requests-per-org",
        "8",
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--openlineage-file",
        lineage.to_str().unwrap(),
    ];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 3);
    let orgs = by_name(&report(&o));
    for name in ["main", "numbered", "plain"] {
        assert_eq!(orgs[name]["outcome"], "completed", "{}", show(&args, &o));
        assert!(orgs[name]["last_success_at"].is_string(), "{}", orgs[name]);
        assert!(orgs[name]["error"].is_null(), "{}", orgs[name]);
    }
    let numbered = &orgs["numbered"];
    assert_eq!((numbered["actions"].as_str(), numbered["actions_exit_code"].as_u64()), (Some("held"), Some(3)));
    assert_eq!(numbered["exit_code"], 3);
    assert_eq!(numbered["actions_rows"]["failed"], 1, "{numbered}");
    assert!(numbered["actions_error"].as_str().unwrap().contains("999999"), "{numbered}");
    let main = &orgs["main"];
    assert_eq!(main["actions"], "incomplete", "{main}");
    assert!(main["actions_error"].as_str().unwrap().contains("request budget of 8"), "{main}");
    assert_eq!(
        (main["actions_rows"]["applied"].as_u64(), main["actions_rows"]["not_sent"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(orgs["plain"]["actions"].is_null());
    let rep: Value = report(&o);
    assert_eq!(rep["outcomes"]["completed"], 3);
    assert_eq!(
        (rep["actions_outcomes"]["held"].as_u64(), rep["actions_outcomes"]["incomplete"].as_u64()),
        (Some(1), Some(1))
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("numbered") && stderr.contains("held"), "{stderr}");

    // The metrics: fresh data, and the corrections apart.
    let samples = metric_samples(&metrics);
    for name in ["main", "numbered", "plain"] {
        assert_eq!(samples[&format!("creator_etl_fleet_last_run_success{{{name}}}")], 1.0);
        assert!(samples[&format!("creator_etl_fleet_last_success_timestamp_seconds{{{name}}}")] > 1.7e9);
    }
    assert_eq!(samples["creator_etl_fleet_last_run_actions_success{numbered}"], 0.0);
    assert_eq!(samples["creator_etl_fleet_last_run_actions_held_rows{numbered}"], 1.0);
    assert_eq!(samples["creator_etl_fleet_last_run_actions_held_rows{main}"], 1.0, "the row not sent");
    assert!(!samples.contains_key("creator_etl_fleet_last_run_actions_success{plain}"), "no actions, no sample");

    // OpenLineage: COMPLETE, with a facet that says the corrections were held.
    let events: Vec<Value> =
        std::fs::read_to_string(&lineage).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for e in &events {
        check_run_event(e);
    }
    let end = |job: &str| events.iter().rfind(|e| e["job"]["name"] == job).unwrap().clone();
    let numbered_end = end("fleet.numbered");
    assert_eq!(numbered_end["eventType"], "COMPLETE");
    let facet = &numbered_end["run"]["facets"]["creatorEtl_actions"];
    assert_eq!((facet["outcome"].as_str(), facet["heldRows"].as_u64()), (Some("held"), Some(1)), "{numbered_end}");
    assert!(facet["_producer"].is_string() && facet["_schemaURL"].is_string());
    assert_eq!(end("fleet.main")["eventType"], "COMPLETE");
    assert_eq!(end("fleet.main")["run"]["facets"]["creatorEtl_actions"]["outcome"], "incomplete");
    assert!(end("fleet.plain")["run"]["facets"].get("creatorEtl_actions").is_none());

    // fleet status keeps the last success, and shows the actions apart.
    let o = fleet(dir.path(), &emu, &["status", "--config", file.to_str().unwrap()], &[]);
    assert_exit(&[], &o, 0);
    let status = by_name(&report(&o));
    assert!(status["numbered"]["last_success_at"].is_string());
    assert_eq!(status["numbered"]["last_outcome"], "completed");
    assert_eq!(status["numbered"]["last_actions"], "held");

    // The next run sends the row the budget left, once; the held row stays held.
    let args = ["run", "--config", file.to_str().unwrap()];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 3);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs["main"]["actions"], "completed", "{}", orgs["main"]);
    assert_eq!(orgs["numbered"]["actions"], "held");
    for sale in ["7001", "7002"] {
        let writes: Vec<_> = emu.state.writes().into_iter().filter(|w| w.target == sale).collect();
        assert_eq!(writes.len(), 1, "sale {sale}: {writes:?}");
    }
}

/// The fleet's exit when every organization failed alike: 5 when every `--out` or warehouse is
/// held by another process. Lock holders reach the report, the status file and OpenLineage by
/// their pid only: the command line of a process holding a warehouse never does.
#[test]
fn every_organization_locked_exits_5_naming_holders_by_pid_only() {
    use std::io::{BufRead, BufReader};
    const HOLDER: &str = r#"
import sys, duckdb
c = duckdb.connect(sys.argv[1], read_only=True)
print("holding", flush=True)
sys.stdin.readline()
"#;
    let emu = fleet_emulator(2, 30, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["held", "locked"], "");
    let keys = key_env(2);
    let first = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org", "--only", "held"];
    assert_exit(&first, &fleet(dir.path(), &emu, &first, &keys), 0);
    // A process holds `held`'s warehouse, with a secret on its command line; this test process
    // holds `locked`'s `--out`.
    let warehouse = dir.path().join("out/orgs/held/state/warehouse.duckdb");
    let mut holder = Command::new(crate::demo::notebook_python())
        .args(["-c", HOLDER, warehouse.to_str().unwrap(), "--token=s3cret-of-the-holder"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "holding");
    let _held = creator_etl::out::OutDir::new(dir.path().join("out/orgs/locked")).lock("fleet run").unwrap();
    let lineage = dir.path().join("lineage.ndjson");
    let args = [
        "run",
        "--config",
        file.to_str().unwrap(),
        "--warehouse",
        "per-org",
        "--openlineage-file",
        lineage.to_str().unwrap(),
    ];
    let o = fleet(dir.path(), &emu, &args, &keys);
    let status = fleet(dir.path(), &emu, &["status", "--config", file.to_str().unwrap()], &[]);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_exit(&args, &o, 5);
    let orgs = by_name(&report(&o));
    let pid = format!("pid {}", holder.id());
    let held_error = orgs["held"]["error"].as_str().unwrap();
    assert!(held_error.contains("is held by another process") && held_error.contains(&pid), "{held_error}");
    assert!(orgs["locked"]["error"].as_str().unwrap().contains("another run holds the lock"), "{}", orgs["locked"]);
    for (what, text) in [
        ("the report", String::from_utf8_lossy(&o.stdout).into_owned()),
        ("OpenLineage", std::fs::read_to_string(&lineage).unwrap()),
        ("fleet status", String::from_utf8_lossy(&status.stdout).into_owned()),
        ("the status file", std::fs::read_to_string(dir.path().join("out/orgs/held/state/fleet-status.json")).unwrap()),
    ] {
        assert!(!text.contains("s3cret-of-the-holder") && !text.contains("python"), "{what}: {text}");
    }
}

/// Observability that fails costs a warning, never the run or its report: a metrics file that
/// cannot be written, and an OpenLineage endpoint that refuses, whose URL's credentials and
/// query never reach the log.
#[test]
fn failed_metrics_and_lineage_writes_keep_the_report_and_hide_credentials() {
    let emu = fleet_emulator(1, 30, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["solo"], "");
    // A directory that cannot be created: a file is in its place.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let metrics = blocker.join("fleet.prom");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://lineage-user:s3cret-pass@{closed}/api/v1/lineage?api_key=t0ken-in-query");
    let args = [
        "run",
        "--config",
        file.to_str().unwrap(),
        "--metrics-file",
        metrics.to_str().unwrap(),
        "--openlineage-url",
        &url,
    ];
    let o = fleet(dir.path(), &emu, &args, &key_env(1));
    assert_exit(&args, &o, 0);
    assert_eq!(by_name(&report(&o))["solo"]["outcome"], "completed", "the report is printed");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("cannot write the metrics file"), "{stderr}");
    assert!(stderr.contains("cannot send an OpenLineage event") && stderr.contains(&closed.to_string()), "{stderr}");
    for secret in ["s3cret-pass", "t0ken-in-query", "lineage-user"] {
        assert!(!stderr.contains(secret), "{secret} in {stderr}");
    }
    // A bad URL is refused without echoing its credentials either.
    let bad = ["run", "--config", file.to_str().unwrap(), "--openlineage-url", "ftp://u:s3cret-pass@host/x"];
    let o = fleet(dir.path(), &emu, &bad, &key_env(1));
    assert_exit(&bad, &o, 2);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("s3cret-pass"), "{}", show(&bad, &o));
}

/// `--only` (and `--shard`) rewrite the metrics of the organizations they sync and keep the
/// other organizations' series; a shard's file keeps its own shard's organizations only.
#[test]
fn a_partial_run_keeps_the_other_organizations_metrics() {
    let emu = fleet_emulator(4, 30, &[]);
    let dir = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c", "d"];
    let file = fleet_file(dir.path(), &names, "");
    let keys = key_env(4);
    let metrics = dir.path().join("fleet.prom");
    let m = metrics.to_str().unwrap();
    let all = ["run", "--config", file.to_str().unwrap(), "--metrics-file", m];
    assert_exit(&all, &fleet(dir.path(), &emu, &all, &keys), 0);
    let before = metric_samples(&metrics);
    let only = ["run", "--config", file.to_str().unwrap(), "--metrics-file", m, "--only", "a"];
    assert_exit(&only, &fleet(dir.path(), &emu, &only, &keys), 0);
    let after = metric_samples(&metrics);
    let stamp =
        |s: &BTreeMap<String, f64>, n: &str| s[&format!("creator_etl_fleet_last_success_timestamp_seconds{{{n}}}")];
    assert!(stamp(&after, "a") > stamp(&before, "a"), "a's series are this run's");
    for n in ["b", "c", "d"] {
        for (series, value) in before.iter().filter(|(k, _)| k.ends_with(&format!("{{{n}}}"))) {
            assert_eq!(after.get(series), Some(value), "{series} kept");
        }
    }
    assert_eq!(after.len(), before.len());
    // A shard's run keeps the series of its own shard's organizations only.
    let shard = creator_etl::fleet::Shard::parse("0/2").unwrap();
    let args = ["run", "--config", file.to_str().unwrap(), "--metrics-file", m, "--shard", "0/2", "--only"];
    let mine: Vec<&str> = names.iter().copied().filter(|n| shard.contains(n)).collect();
    assert!(!mine.is_empty() && mine.len() < names.len(), "the names split over two shards");
    let o = fleet(dir.path(), &emu, &[&args[..], &[mine[0]]].concat(), &keys);
    assert_exit(&args, &o, 0);
    let orgs: BTreeSet<String> = metric_samples(&metrics)
        .keys()
        .map(|k| k.split_once('{').unwrap().1.trim_end_matches('}').to_owned())
        .collect();
    assert_eq!(orgs, mine.iter().map(|n| (*n).to_owned()).collect());
}

/// `fleet status` sends nothing, so it needs no key and no actions file. Distinct keys that
/// share a 32-bit fingerprint are two keys: the file is valid, and when every key is refused
/// the fleet exits 4.
#[test]
fn status_needs_no_key_and_distinct_keys_are_never_taken_for_one() {
    let emu = fleet_emulator(0, 0, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["a", "b"], "actions = \"missing.csv\"\n");
    let args = ["status", "--config", file.to_str().unwrap()];
    let o = fleet(dir.path(), &emu, &args, &[]);
    assert_exit(&args, &o, 0);
    assert_eq!(by_name(&report(&o)).len(), 2);
    // `run` still needs them, and says so before anything is sent.
    let run = ["run", "--config", file.to_str().unwrap()];
    let o = fleet(dir.path(), &emu, &run, &[]);
    assert_exit(&run, &o, 2);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("`KEY_1` is not set") && stderr.contains("missing.csv"), "{stderr}");

    // Two keys whose FNV-1a fingerprints collide (0xaa0aede4); the emulator knows neither. The
    // fleet file is written again, without the actions file.
    fleet_file(dir.path(), &["a", "b"], "");
    let keys = vec![("KEY_1".to_owned(), "key-901258".to_owned()), ("KEY_2".to_owned(), "key-1540052".to_owned())];
    let o = fleet(dir.path(), &emu, &run, &keys);
    assert_exit(&run, &o, 4);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("same API key"), "{}", show(&run, &o));
    let orgs = by_name(&report(&o));
    assert!(orgs.values().all(|o| o["outcome"] == "failed" && o["exit_code"] == 4), "{orgs:?}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("key-901258"));
}

/// A fleet status file that cannot be read as a whole (here a field this release does not know)
/// is neither lost nor overwritten silently: `fleet status` shows what it can with why, and the
/// next run keeps the file aside, warns, and carries `last_success_at` over.
#[test]
fn a_damaged_status_file_keeps_its_last_success() {
    let emu = fleet_emulator(1, 30, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["solo"], "");
    let args = ["run", "--config", file.to_str().unwrap()];
    assert_exit(&args, &fleet(dir.path(), &emu, &args, &key_env(1)), 0);
    let path = dir.path().join("out/orgs/solo/state/fleet-status.json");
    let good: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let success = good["last_success_at"].as_str().unwrap().to_owned();
    let damaged = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"last_outcome\": \"completed\"", "\"last_outcome\": \"exploded\"");
    assert!(damaged.contains("exploded"));
    std::fs::write(&path, &damaged).unwrap();

    let status = ["status", "--config", file.to_str().unwrap()];
    let o = fleet(dir.path(), &emu, &status, &[]);
    assert_exit(&status, &o, 0);
    let row = &by_name(&report(&o))["solo"];
    assert_eq!(row["last_success_at"].as_str(), Some(success.as_str()), "{row}");
    assert!(row["status_error"].as_str().unwrap().contains("fleet-status.json"), "{row}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be read"), "{}", show(&status, &o));

    // A run that fails (its key is refused) keeps the last success, and the damaged file aside.
    let o = fleet(dir.path(), &emu, &args, &[("KEY_1".to_owned(), "not-a-key".to_owned())]);
    assert_exit(&args, &o, 4);
    assert!(String::from_utf8_lossy(&o.stderr).contains("kept aside"), "{}", show(&args, &o));
    let now: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(now["last_success_at"].as_str(), Some(success.as_str()), "{now}");
    assert_eq!(now["last_outcome"], "failed");
    let aside: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("fleet-status.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), damaged);
    assert_eq!(by_name(&report(&o))["solo"]["last_success_at"].as_str(), Some(success.as_str()));
}

/// Applications of one organization in the fleet warehouse's snapshot.
fn fleet_ids(dir: &Path, name: &str) -> BTreeSet<i64> {
    let c = db(&dir.join("out"));
    let mut st = c.prepare("SELECT id FROM applications WHERE organization = ?").unwrap();
    st.query_map([name], |r| r.get::<_, i64>(0)).unwrap().map(Result::unwrap).collect()
}

/// `--warehouse fleet`: one warehouse for the fleet, loaded in batches of two. Each organization
/// holds exactly its own rows; one that fails `--strict` fails alone and loads nothing; the
/// Parquet tree is partitioned by organization; `query --org` answers per organization; a
/// second, quick run compares each organization with its own rows and changes nothing.
#[test]
fn a_fleet_warehouse_holds_every_organization_exactly() {
    let emu = fleet_emulator(4, 120, &[(4, OrgPolicy { skewed_totals: true, ..OrgPolicy::default() })]);
    let dir = tempfile::tempdir().unwrap();
    let names = ["alpha", "beta", "gamma", "skewed"];
    let file = fleet_file(dir.path(), &names, "");
    let keys = key_env(4);
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "fleet", "--batch-size", "2", "--strict"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, SOME_FAILED);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs["skewed"]["outcome"], "failed");
    assert!(orgs["skewed"]["error"].as_str().unwrap().contains("--strict"), "{}", orgs["skewed"]);
    for (name, k) in [("alpha", 1), ("beta", 2), ("gamma", 3)] {
        assert_eq!(orgs[name]["outcome"], "completed", "{}", show(&args, &o));
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k), "{name} has exactly its own data");
        assert_eq!(orgs[name]["rows"]["applications"].as_u64().unwrap() as usize, truth_ids(&emu, k).len());
        assert!(!dir.path().join("out/orgs").join(name).join("state/warehouse.duckdb").exists(), "no own warehouse");
    }
    // The Parquet tree: segments of organizations, `organization` a column of their rows.
    let files = dir.path().join("out/parquet/applications/*.parquet").display().to_string();
    let c = duckdb::Connection::open_in_memory().unwrap();
    for (name, k) in [("alpha", 1), ("beta", 2), ("gamma", 3)] {
        let sql = format!(
            "SELECT count(*) FROM read_parquet('{files}', hive_partitioning = false) WHERE organization = '{name}'"
        );
        assert_eq!(count(&c, &sql) as usize, truth_ids(&emu, k).len(), "{name} in the Parquet tree");
    }
    let c = db(&dir.path().join("out"));
    assert_eq!(count(&c, "SELECT count(*) FROM applications WHERE organization = 'skewed'"), 0);
    assert_eq!(count(&c, "SELECT count(DISTINCT organization) FROM runs"), 3);
    assert_eq!(
        count(&c, "SELECT count(*) FROM application_status_history"),
        count(&c, "SELECT count(*) FROM applications")
    );
    drop(c);

    // `query`: per organization with `--org`; a SQL file sees every organization.
    let q = |extra: &[&str]| Bin::new(dir.path()).out(&dir.path().join("out")).args(["query"]).args(extra).run();
    let o = q(&["pending_queue", "--org", "beta", "--format", "json"]);
    assert_exit(&[], &o, 0);
    let listed: Vec<Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let pending = emu.state.applications(numbered_org(2)).iter().filter(|a| a.status.as_str() == "pending").count();
    let listed: u64 = listed.iter().map(|r| r["pending"].as_u64().unwrap()).sum();
    assert_eq!(listed as usize, pending, "pending_queue counts beta's pending applications only");
    let o = q(&["pending_queue"]);
    assert_exit(&[], &o, 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the fleet warehouse holds 3 organizations"),
        "{}",
        show(&[], &o)
    );
    let o = q(&["pending_queue", "--org", "nobody"]);
    assert_exit(&[], &o, 2);
    let sql = dir.path().join("per_org.sql");
    std::fs::write(&sql, "SELECT organization, count(*) AS n FROM applications GROUP BY ALL ORDER BY 1").unwrap();
    let o = q(&[sql.to_str().unwrap(), "--format", "csv"]);
    assert_exit(&[], &o, 0);
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(csv.contains(&format!("gamma,{}", truth_ids(&emu, 3).len())), "{csv}");

    // A second run, quick: each organization compares with its own rows; nothing changes.
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "fleet", "--only", "alpha,beta,gamma"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    for (name, k) in [("alpha", 1), ("beta", 2), ("gamma", 3)] {
        assert_eq!(orgs[name]["sync"], "quick", "{}", orgs[name]);
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k));
    }
    let c = db(&dir.path().join("out"));
    assert_eq!(count(&c, "SELECT count(*) FROM runs"), 6);
    assert_eq!(
        count(&c, "SELECT count(*) FROM application_status_history"),
        count(&c, "SELECT count(*) FROM applications")
    );
    drop(c);
    assert_parquet_matches_warehouse(dir.path());

    // One organization changes and syncs alone: the Parquet tree rewrites its partitions, and
    // keeps every other organization's as they were.
    let moved = emu.state.applications(numbered_org(2)).iter().find(|a| a.status.as_str() == "pending").unwrap().id;
    emu.state.set_application_status(moved, creator_etl::api::models::ApplicationStatus::Accepted);
    let args = ["run", "--config", file.to_str().unwrap(), "--only", "beta"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    assert_parquet_matches_warehouse(dir.path());
    let c = db(&dir.path().join("out"));
    let parquet = dir.path().join("out/parquet/applications/**/*.parquet").display().to_string();
    let status: String = c
        .query_row(
            &format!("SELECT status FROM read_parquet('{parquet}', hive_partitioning = true) WHERE organization = 'beta' AND id = ?"),
            [moved],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "accepted");
}

/// `--publish-every`: a batch's rows are published once its load is that old, while another
/// organization still extracts; nothing is published again until something new is loaded, and
/// the last load, a moment before the run ends, is published by the run's end alone.
#[test]
fn a_fleet_publishes_loaded_batches_while_others_extract() {
    let emu = fleet_emulator(2, 60, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["fast", "slow"], "");
    // The slow organization's client spaces its requests (7 or more of them) by a second.
    let text = std::fs::read_to_string(&file).unwrap();
    let slowed = text.replace(
        "name = \"slow\"\nkey_env = \"KEY_2\"\n",
        "name = \"slow\"\nkey_env = \"KEY_2\"\nmin_interval_ms = 1000\n",
    );
    assert_ne!(slowed, text, "the fleet file names `slow`");
    std::fs::write(&file, slowed).unwrap();
    let args = [
        "run",
        "--config",
        file.to_str().unwrap(),
        "--warehouse",
        "fleet",
        "--batch-size",
        "1",
        "--publish-every",
        "1s",
    ];
    let o = Bin::new(dir.path())
        .emu(&emu)
        .out(&dir.path().join("out"))
        .args(["fleet"])
        .args(args)
        .envs(key_env(2))
        .env("RUST_LOG", "creator_etl::fleet::batch=info")
        .run();
    assert_exit(&args, &o, 0);
    let log = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> =
        log.lines().filter(|l| l.contains("batch loaded") || l.contains("fleet warehouse published")).collect();
    let kinds: Vec<&str> =
        lines.iter().map(|l| if l.contains("batch loaded") { "loaded" } else { "published" }).collect();
    // The fast organization's batch, published a second later while the slow one extracts (6 s
    // or more); the slow one's, published by the run's end within the second (that last
    // publish logs at debug level, so it is not among these lines).
    assert_eq!(kinds, ["loaded", "published", "loaded"], "{}", show(&args, &o));
    for (name, k) in [("fast", 1), ("slow", 2)] {
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k), "{name}: published by the run's end");
    }
}

/// Every exported table's Parquet tree holds exactly the published warehouse's rows, each as
/// many times (every column compared; `year`, a column of the daily tables' files, aside).
fn assert_parquet_matches_warehouse(dir: &Path) {
    let c = db(&dir.join("out"));
    for table in creator_etl::load::catalog::exported() {
        let files = dir.join("out/parquet").join(table).join("*.parquet").display().to_string();
        let by_year = creator_etl::load::catalog::table(table).unwrap().by_year;
        let parquet = format!(
            "(SELECT *{} FROM read_parquet('{files}', hive_partitioning = false))",
            if by_year { " EXCLUDE (year)" } else { "" }
        );
        let differ = format!(
            "SELECT count(*) FROM ((SELECT * FROM {parquet} EXCEPT ALL SELECT * FROM {table}) UNION ALL \
             (SELECT * FROM {table} EXCEPT ALL SELECT * FROM {parquet}))"
        );
        assert_eq!(count(&c, &differ), 0, "{table}: the Parquet tree differs from the warehouse");
        assert!(count(&c, &format!("SELECT count(*) FROM {table}")) > 0 || table == "application_status_history");
    }
}

/// A fleet warehouse writes, and exports, only the tables whose rows changed: a quick run where
/// nothing changed keeps every table's Parquet version but `applications`' (each run's
/// `last_seen_at`), and a change reaches its tables. Every step is compared with a second
/// fleet warehouse that syncs the same organizations at the same moments but forgets its
/// fingerprints before each run, so it writes every table every time: the two hold the same
/// rows (the clock's columns aside).
#[test]
fn a_fleet_warehouse_writes_only_the_tables_that_changed() {
    use creator_etl::api::models::ApplicationStatus;
    let emu = fleet_emulator(3, 60, &[]);
    let names = ["a", "b", "c"];
    let (kept, whole) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let keys = key_env(3);
    let sync = |dir: &Path| {
        let file = fleet_file(dir, &names, "");
        let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "fleet", "--batch-size", "3"];
        let o = fleet(dir, &emu, &args, &keys);
        assert_exit(&args, &o, 0);
        by_name(&report(&o))
    };
    let forget = |dir: &Path| {
        let c = duckdb::Connection::open(dir.join("out/state/warehouse.duckdb")).unwrap();
        c.execute_batch("DELETE FROM frame_fingerprints;").unwrap();
    };
    let versions = |dir: &Path| -> BTreeMap<String, std::path::PathBuf> {
        creator_etl::load::catalog::exported()
            .into_iter()
            .map(|t| (t.to_owned(), std::fs::read_link(dir.join("out/parquet").join(t)).unwrap()))
            .collect()
    };
    // The clock's columns: when each run saw an application, and its status's validity.
    let same_rows = |step: &str| {
        let c = duckdb::Connection::open_in_memory().unwrap();
        for (name, dir) in [("kept", &kept), ("whole", &whole)] {
            let path = dir.path().join("out/warehouse.duckdb");
            c.execute_batch(&format!("ATTACH '{}' AS {name} (READ_ONLY);", path.display())).unwrap();
        }
        for table in creator_etl::load::catalog::exported() {
            let columns = match table {
                "applications" => "* EXCLUDE (first_seen_at, last_seen_at)",
                "application_status_history" => "organization, id, status, valid_to IS NULL",
                _ => "*",
            };
            let differ = format!(
                "SELECT count(*) FROM ((SELECT {columns} FROM kept.{table} EXCEPT ALL SELECT {columns} FROM whole.{table}) \
                 UNION ALL (SELECT {columns} FROM whole.{table} EXCEPT ALL SELECT {columns} FROM kept.{table}))"
            );
            assert_eq!(count(&c, &differ), 0, "{step}: `{table}` differs from the warehouse that writes every table");
        }
        for dir in [&kept, &whole] {
            assert_parquet_matches_warehouse(dir.path());
        }
    };

    for dir in [&kept, &whole] {
        sync(dir.path());
    }
    same_rows("the first sync");
    let c = db(&kept.path().join("out"));
    // One fingerprint per organization and frame table, `applications` aside.
    assert_eq!(count(&c, "SELECT count(*) FROM frame_fingerprints"), 3 * 5);
    drop(c);

    // Nothing changed: only `applications` is exported again.
    let before = versions(kept.path());
    forget(whole.path());
    for dir in [&kept, &whole] {
        let orgs = sync(dir.path());
        assert!(names.iter().all(|n| orgs[*n]["sync"] == "quick"), "{orgs:?}");
    }
    same_rows("a quick sync where nothing changed");
    let after = versions(kept.path());
    let moved: Vec<&String> = after.keys().filter(|t| before[*t] != after[*t]).collect();
    assert_eq!(moved, ["applications"], "the tables exported again");

    // A new application, no status changed: its first sighting opens a history row.
    let before = after;
    let new = emu.state.add_application(numbered_org(1), ApplicationStatus::Pending, chrono::Utc::now());
    forget(whole.path());
    for dir in [&kept, &whole] {
        sync(dir.path());
    }
    same_rows("a new application");
    let after = versions(kept.path());
    assert_ne!(before["application_status_history"], after["application_status_history"], "its history exported");
    let c = db(&kept.path().join("out"));
    let opened = format!("SELECT count(*) FROM application_status_history WHERE organization = 'a' AND id = {new}");
    assert_eq!(count(&c, &opened), 1);
    drop(c);

    // An account's post count (its application's, `connected_accounts`' and the cohorts'), a
    // status (the history) and the content's figures (every organization's recent days) change.
    let apps = emu.state.applications(numbered_org(2));
    let counted = newest_with_an_account(&emu, 2);
    assert!(emu.state.set_post_count(counted.id, 97));
    let pending = apps.iter().find(|a| a.status.as_str() == "pending").expect("a pending application").id;
    assert!(emu.state.set_application_status(pending, ApplicationStatus::Accepted));
    emu.state.store().content.seed ^= 0x5eed;
    let before = after;
    forget(whole.path());
    for dir in [&kept, &whole] {
        sync(dir.path());
    }
    same_rows("after the changes");
    let after = versions(kept.path());
    for table in ["applications", "connected_accounts", "content_daily", "application_status_history"] {
        assert_ne!(before[table], after[table], "`{table}` changed and was exported again");
    }
    assert_eq!(fleet_post_count(kept.path(), "b", counted.id), 97);
}

/// Organization k's newest application with an account: on its status's first page, which a
/// quick sync reads again.
fn newest_with_an_account(emu: &TestEmu, k: u32) -> creator_etl::api::models::Application {
    let apps = emu.state.applications(numbered_org(k));
    let newest = apps.iter().filter(|a| !a.connected_accounts.is_empty()).max_by_key(|a| (a.applied_at, a.id));
    newest.expect("an application with an account").clone()
}

/// An application's first account's post count in the published fleet warehouse.
fn fleet_post_count(dir: &Path, org: &str, application: i64) -> i64 {
    db(&dir.join("out"))
        .query_row(
            "SELECT monthly_post_count FROM connected_accounts WHERE organization = ? AND application_id = ?",
            duckdb::params![org, application],
            |r| r.get(0),
        )
        .unwrap()
}

/// A SIGKILL between a batch's load and its commit loses nothing: the warehouse keeps the
/// previous state, and the next run loads every organization of the batch exactly. An
/// organization's own warehouse (from `--warehouse per-org`) is taken into the fleet warehouse,
/// history and ledger included.
#[test]
fn a_fleet_warehouse_survives_a_kill_mid_batch_and_adopts_own_warehouses() {
    let emu = fleet_emulator(3, 90, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["x", "y", "z"], "");
    let keys = key_env(3);
    // x first syncs on its own warehouse.
    let per_org = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org", "--only", "x"];
    let o = fleet(dir.path(), &emu, &per_org, &keys);
    assert_exit(&per_org, &o, 0);
    let fleet_args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "fleet", "--batch-size", "3"];
    // A fleet run killed at a crash point.
    let crash_at = |point: &str| {
        let o = Bin::new(dir.path())
            .emu(&emu)
            .out(&dir.path().join("out"))
            .args(["fleet"])
            .args(fleet_args)
            .envs(keys.iter().cloned())
            .env("CREATOR_ETL_CRASH_AT", point)
            .run();
        assert!(!o.status.success(), "{}", show(&fleet_args, &o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&fleet_args, &o));
    };
    crash_at("fleet-load-before-commit");
    let o = fleet(dir.path(), &emu, &fleet_args, &keys);
    assert_exit(&fleet_args, &o, 0);
    let orgs = by_name(&report(&o));
    for (name, k) in [("x", 1), ("y", 2), ("z", 3)] {
        assert_eq!(orgs[name]["outcome"], "completed", "{}", show(&fleet_args, &o));
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k), "{name}");
    }
    assert_eq!(orgs["x"]["sync"], "quick", "x goes on from its own warehouse's state");
    let c = db(&dir.path().join("out"));
    assert_eq!(count(&c, "SELECT count(*) FROM runs WHERE organization = 'x'"), 2, "its own run, then the fleet's");
    assert_eq!(count(&c, "SELECT count(*) FROM runs WHERE organization = 'y'"), 1);
    // A fleet warehouse is not one organization's: `run`, `actions plan` and a per-organization
    // fleet run on it are refused before any request.
    let before = emu.state.requests().len();
    let o = Bin::new(dir.path()).emu(&emu).out(&dir.path().join("out")).key(&org_key(1)).args(["run"]).run();
    assert_exit(&[], &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("fleet's warehouse"), "{}", show(&[], &o));
    let csv = dir.path().join("reviewed.csv");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviewed.csv"), &csv).unwrap();
    let plan = ["actions", "plan", csv.to_str().unwrap()];
    let o = Bin::new(dir.path()).emu(&emu).out(&dir.path().join("out")).key(&org_key(1)).args(plan).run();
    assert_exit(&plan, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("fleet's warehouse"), "{}", show(&plan, &o));
    let per_org = ["run", "--config", file.to_str().unwrap(), "--warehouse", "per-org"];
    let o = fleet(dir.path(), &emu, &per_org, &keys);
    assert_exit(&per_org, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds a fleet warehouse"), "{}", show(&per_org, &o));
    assert_eq!(emu.state.requests().len(), before);

    // A kill during a publish, after the export: the next run publishes, even one that loads
    // nothing (here: no service to reach).
    let moved = emu.state.applications(numbered_org(2)).iter().find(|a| a.status.as_str() == "pending").unwrap().id;
    emu.state.set_application_status(moved, creator_etl::api::models::ApplicationStatus::Accepted);
    crash_at("fleet-publish-before-snapshot");
    let status = |dir: &Path| -> String {
        db(&dir.join("out"))
            .query_row("SELECT status FROM applications WHERE organization = 'y' AND id = ?", [moved], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(status(dir.path()), "pending", "the snapshot is the last published one");
    // A run that loads nothing: no service to reach.
    let offline = || {
        let o = Bin::new(dir.path())
            .out(&dir.path().join("out"))
            .args(["--base-url", "http://127.0.0.1:9", "--max-attempts", "1", "fleet"])
            .args(fleet_args)
            .envs(keys.iter().cloned())
            .run();
        assert_exit(&fleet_args, &o, 1);
    };
    offline();
    assert_eq!(status(dir.path()), "accepted", "published by a run that loaded nothing");
    assert_parquet_matches_warehouse(dir.path());

    // A kill in an export, after its first table: the next run exports every table of the
    // organizations not marked exported, so the history's change reaches the Parquet tree.
    emu.state.set_application_status(moved, creator_etl::api::models::ApplicationStatus::Rejected);
    crash_at("export-after-first-table");
    offline();
    assert_eq!(status(dir.path()), "rejected");
    assert_parquet_matches_warehouse(dir.path());
}

/// Rows per organization of a lake table, through `query --lake` (the Delta log's current
/// snapshot): `organization,n` lines.
fn lake_counts(dir: &Path, lake: &str, table: &str) -> String {
    let sql = dir.join(format!("lake_{table}.sql"));
    std::fs::write(&sql, format!("SELECT organization, count(*) AS n FROM {table} GROUP BY 1 ORDER BY 1\n")).unwrap();
    let scratch = dir.join("query-out");
    let args = ["--out", scratch.to_str().unwrap(), "query", sql.to_str().unwrap(), "--lake", lake, "--format", "csv"];
    let o = run_bin(dir, &args, &[]);
    assert_exit(&args, &o, 0);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The commits of a lake table's Delta log after its creation: each one's predicate, and the
/// organizations of the files it adds.
fn lake_commits(dir: &Path, table: &str) -> Vec<(String, BTreeSet<String>)> {
    let log = dir.join("lake").join(table).join("_delta_log");
    let mut commits: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits
        .iter()
        .skip(1)
        .map(|p| {
            let actions: Vec<Value> =
                std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let predicate = actions
                .iter()
                .find_map(|v| v["commitInfo"]["operationParameters"]["predicate"].as_str())
                .unwrap_or_default()
                .to_owned();
            let orgs = actions
                .iter()
                .filter_map(|v| v["add"]["partitionValues"]["organization"].as_str())
                .map(str::to_owned)
                .collect();
            (predicate, orgs)
        })
        .collect()
}

/// `--warehouse fleet --lake`: a batch is committed to the lake with one commit per table that
/// replaces exactly its organizations. A SIGKILL between two tables' commits leaves no table
/// with part of the batch, and the next run converges. A fresh `--out` restores every
/// organization from the lake into a new fleet warehouse, and its next run is quick.
#[test]
fn a_fleet_warehouse_commits_each_batch_to_the_lake_once_per_table() {
    let emu = fleet_emulator(3, 60, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = fleet_file(dir.path(), &["x", "y", "z"], "");
    let keys = key_env(3);
    let lake = format!("file://{}", dir.path().join("lake").display());
    let config = file.to_str().unwrap();
    // One batch of all three: it closes at three organizations, long before its wait.
    let args =
        ["run", "--config", config, "--warehouse", "fleet", "--lake", &lake, "--batch-size", "3", "--batch-wait", "5m"];
    let o = Bin::new(dir.path())
        .emu(&emu)
        .out(&dir.path().join("out"))
        .args(["fleet"])
        .args(args)
        .envs(keys.iter().cloned())
        .env("CREATOR_ETL_CRASH_AT", "lake-after-first-table")
        .run();
    assert!(String::from_utf8_lossy(&o.stderr).contains("crash injected"), "{}", show(&args, &o));
    let expected = |table: &str| {
        let c = db(&dir.path().join("out"));
        let mut st = c.prepare(&format!("SELECT organization, count(*) FROM {table} GROUP BY 1 ORDER BY 1")).unwrap();
        let rows: Vec<(String, i64)> =
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
        std::iter::once("organization,n".to_owned())
            .chain(rows.iter().map(|(o, n)| format!("{o},{n}")))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    };
    // The kill came after `applications`' commit: it holds the whole batch; `runs`, committed
    // last, holds none of it.
    let batch: BTreeSet<String> = ["x", "y", "z"].map(String::from).into();
    let predicate = "organization IN ('x', 'y', 'z')".to_owned();
    assert_eq!(lake_commits(dir.path(), "applications"), [(predicate.clone(), batch.clone())]);
    assert!(!dir.path().join("lake/runs").exists());

    let args =
        ["run", "--config", config, "--warehouse", "fleet", "--lake", &lake, "--batch-size", "3", "--batch-wait", "5m"];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    for name in ["x", "y", "z"] {
        assert_eq!(orgs[name]["outcome"], "completed", "{}", show(&args, &o));
    }
    // Converged: every lake table holds exactly what the fleet warehouse holds, per
    // organization, and each batch was one commit per table naming its organizations.
    for table in ["applications", "connected_accounts", "content_daily", "application_status_history", "runs"] {
        assert_eq!(lake_counts(dir.path(), &lake, table), expected(table), "{table}");
    }
    let batch_commit = (predicate, batch);
    assert_eq!(lake_commits(dir.path(), "applications"), [batch_commit.clone(), batch_commit.clone()]);
    assert_eq!(lake_commits(dir.path(), "runs"), [batch_commit]);

    // A fresh `--out`: every organization's state comes back from the lake, into a new fleet
    // warehouse, and the run is quick on it. (Meanwhile x's newest application's post count
    // changed: the lake gets it from this `--out`.)
    let newest = newest_with_an_account(&emu, 1);
    let posts = newest.connected_accounts[0].monthly_post_count;
    assert!(emu.state.set_post_count(newest.id, posts + 1000));
    std::fs::rename(dir.path().join("out"), dir.path().join("old-out")).unwrap();
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("restored its warehouse"), "{}", show(&args, &o));
    let orgs = by_name(&report(&o));
    for (name, k) in [("x", 1), ("y", 2), ("z", 3)] {
        assert_eq!(orgs[name]["sync"], "quick", "{}", orgs[name]);
        assert_eq!(fleet_ids(dir.path(), name), truth_ids(&emu, k), "{name}");
    }
    let c = db(&dir.path().join("out"));
    assert_eq!(count(&c, "SELECT count(*) FROM runs"), 9, "three runs of each organization, two restored");
    drop(c);
    for table in ["applications", "application_status_history", "runs"] {
        assert_eq!(lake_counts(dir.path(), &lake, table), expected(table), "{table}");
    }

    // Back on the first `--out`, whose fingerprints describe its own last load, with the post
    // count changed back: x is restored from the lake (which holds a run it does not know, with
    // the changed count), then syncs the original count again. Its restored rows are not what
    // its fingerprints describe, so its tables are written, not kept.
    assert!(emu.state.set_post_count(newest.id, posts));
    std::fs::rename(dir.path().join("out"), dir.path().join("new-out")).unwrap();
    std::fs::rename(dir.path().join("old-out"), dir.path().join("out")).unwrap();
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("restored"), "{}", show(&args, &o));
    assert_eq!(fleet_post_count(dir.path(), "x", newest.id), posts, "the service's count, not the restored one");
    assert_parquet_matches_warehouse(dir.path());
}

/// Two corrections of the emulator's main organization (sales 7001 and 7002), as `main.csv`.
pub(crate) fn write_main_corrections(dir: &Path) {
    std::fs::write(
        dir.join("main.csv"),
        format!("{ACTIONS_HEADER}\nupdate_sale,yes,7001,,1111,,,,,,\nupdate_sale,yes,7002,,2222,,,,,,\n"),
    )
    .unwrap();
}

/// `--warehouse fleet --lake` with corrections: the journal stays in the organization's own
/// state and reaches the lake (intents before sending, results after), so a fresh `--out`
/// restores it and sends nothing twice; the fleet warehouse holds the actions' results.
#[test]
fn a_fleet_warehouse_with_a_lake_sends_corrections_exactly_once_across_volumes() {
    let emu = fleet_emulator(1, 50, &[]);
    let dir = tempfile::tempdir().unwrap();
    write_main_corrections(dir.path());
    let file = dir.path().join("fleet.toml");
    std::fs::write(
        &file,
        "[defaults]\nsince_days = 60\n\
         [[organization]]\nname = \"main\"\nkey_env = \"KEY_MAIN\"\nactions = \"main.csv\"\n\
         [[organization]]\nname = \"plain\"\nkey_env = \"KEY_1\"\n",
    )
    .unwrap();
    let keys = vec![("KEY_MAIN".to_owned(), crate::util::FULL_KEY.to_owned()), ("KEY_1".to_owned(), org_key(1))];
    let lake = format!("file://{}", dir.path().join("lake").display());
    let args = ["run", "--config", file.to_str().unwrap(), "--warehouse", "fleet", "--lake", &lake];
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs["main"]["actions"], "completed", "{}", show(&args, &o));
    let sent = emu.state.writes().len();
    assert_eq!(sent, 2);
    let applied = "SELECT count(*) FROM action_results WHERE organization = 'main' AND outcome = 'applied'";
    assert_eq!(count(&db(&dir.path().join("out")), applied), 2);
    assert_eq!(lake_counts(dir.path(), &lake, "action_results"), "organization,n\nmain,2\n");
    // `main`'s `runs` row (the completion marker) and its actions' results reach the lake after
    // its actions, alone; its batch committed them for `plain` only.
    for table in ["runs", "action_results"] {
        let commits: Vec<String> = lake_commits(dir.path(), table).into_iter().map(|(p, _)| p).collect();
        assert!(commits.contains(&"organization = 'main'".to_owned()), "{table}: {commits:?}");
        assert!(commits.iter().all(|p| !p.contains("IN (")), "{table}: {commits:?}");
    }
    let applications: Vec<String> = lake_commits(dir.path(), "applications").into_iter().map(|(p, _)| p).collect();
    assert_eq!(applications, ["organization IN ('main', 'plain')"], "one batch of both");

    // A fresh volume: the journal comes back from the lake; nothing is sent again.
    std::fs::rename(dir.path().join("out"), dir.path().join("old-out")).unwrap();
    let o = fleet(dir.path(), &emu, &args, &keys);
    assert_exit(&args, &o, 0);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs["main"]["outcome"], "completed", "{}", show(&args, &o));
    assert_eq!(emu.state.writes().len(), sent, "nothing sent twice\n{}", show(&args, &o));
    assert_eq!(orgs["main"]["actions_rows"]["skipped_already_applied"], 2, "{}", orgs["main"]);
    assert!(count(&db(&dir.path().join("out")), applied) >= 2);
    assert_eq!(count(&db(&dir.path().join("out")), "SELECT count(DISTINCT organization) FROM runs"), 2);
}

/// A fleet larger than the process's open-file limit allows (here 256 descriptors for 120
/// organizations, each of which holds a lock, a landing and a connection) waits for slots
/// instead of failing organizations with "Too many open files".
#[test]
fn a_fleet_beyond_the_open_file_limit_completes_every_organization() {
    let n = 120;
    let emu = fleet_emulator(n, 5, &[]);
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=n).map(|k| format!("o{k}")).collect();
    let file = fleet_file(dir.path(), &names.iter().map(String::as_str).collect::<Vec<_>>(), "");
    let out = dir.path().join("out");
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "fleet", "run", "--config"])
        .arg(&file)
        .env_remove("CREATOR_ETL_LAKE")
        .env("CREATOR_MIN_INTERVAL_MS", "0")
        .env("CREATOR_HOURLY_CAP", "0")
        .envs(key_env(n))
        .output()
        .unwrap();
    assert_exit(&[], &o, 0);
    let orgs = by_name(&report(&o));
    assert_eq!(orgs.len(), n as usize);
    for (name, row) in &orgs {
        assert_eq!(row["outcome"], "completed", "{name}: {row}");
    }
    let c = db(&out);
    assert_eq!(count(&c, "SELECT count(DISTINCT organization) FROM runs"), i64::from(n));
}
