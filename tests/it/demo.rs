//! `creator-etl demo`, the named queries over its warehouse, and the notebooks executed top to
//! bottom by a real Jupyter kernel against it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use creator_etl::query::{declared_columns, QUERIES};

use crate::util::*;

/// One demo output shared by the tests of this file (the demo takes a few seconds).
pub(crate) fn demo_out() -> &'static Path {
    static OUT: OnceLock<PathBuf> = OnceLock::new();
    OUT.get_or_init(|| {
        let dir = process_dir("demo");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("data");
        let args = ["demo", "--out", out.to_str().unwrap(), "--applications", "800"];
        let o = run_bin(&dir, &args, &[]);
        assert_exit(&args, &o, 0);
        let stdout = String::from_utf8_lossy(&o.stdout);
        for part in [
            "== rows per table",
            "== biggest week-over-week movers",
            "== acceptance by monthly-post-count bucket",
            "== status changes recorded by the second run: 24",
            "== actions replayed from examples/reviewed.csv",
            "applied 5",
            "== next",
            "creator-etl query wow_latest",
            "CREATOR_API_KEY",
        ] {
            assert!(stdout.contains(part), "the summary shows {part:?}:\n{}", show(&args, &o));
        }
        out
    })
}

/// A directory of this test process under the target's temporary directory, shared by its tests
/// (`demo`, `lake2`), so no test can remove it: `KIND-ID`, with an id of this process's own.
/// The process holds `ID.lock` (an advisory lock) while it lives; the first call removes the
/// directories of processes whose lock is free (gone: killed, or ended), which would otherwise
/// pile up at 18 MB a run. A lock is the one test that holds across PID namespaces (containers
/// sharing the target directory), where a PID is not.
fn process_dir(kind: &str) -> PathBuf {
    static OWNER: OnceLock<(String, std::fs::File)> = OnceLock::new();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (id, _) = OWNER.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let id = format!("p{}-{nanos}", std::process::id());
        let file = std::fs::File::create(tmp.join(format!("{id}.lock"))).unwrap();
        file.lock().unwrap();
        for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(other) = name.strip_suffix(".lock").filter(|o| o.starts_with('p') && *o != id) else { continue };
            let gone = std::fs::File::open(entry.path()).is_ok_and(|f| f.try_lock().is_ok());
            if gone {
                for kind in ["demo", "lake2"] {
                    let _ = std::fs::remove_dir_all(tmp.join(format!("{kind}-{other}")));
                }
                let _ = std::fs::remove_file(entry.path());
            }
        }
        (id, file)
    });
    tmp.join(format!("{kind}-{id}"))
}

fn query(out: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["query"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", out.to_str().unwrap()]);
    run_bin(out.parent().unwrap(), &all, &[])
}

/// The example reviewed file ends as it says, row by row, against the seed-42 emulator.
#[test]
fn the_demo_applies_the_example_file_as_documented() {
    let out = demo_out();
    let c = duckdb::Connection::open_with_flags(
        out.join("warehouse.duckdb"),
        duckdb::Config::default().access_mode(duckdb::AccessMode::ReadOnly).unwrap(),
    )
    .unwrap();
    let mut stmt = c.prepare("SELECT row_id, outcome FROM action_results ORDER BY line").unwrap();
    let got: Vec<(String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(|r| r.unwrap()).collect();
    let want = [
        ("fix-001", "applied"),
        ("fix-002", "applied"),
        ("fix-003", "applied"),
        ("fix-004", "skipped_not_approved"),
        ("fix-005", "failed"),
        ("pay-001", "applied"),
        ("pay-002", "applied"),
        ("pay-003", "noop"),
    ];
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, want);
    // A directory with data a demo did not make is refused.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("warehouse.duckdb"), b"real data").unwrap();
    let args = ["demo", "--out", dir.path().to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds data that a demo did not make"));
}

/// Every named query runs on the demo warehouse and answers with the columns its header names,
/// in every format.
#[test]
fn every_named_query_answers_with_its_declared_columns() {
    let out = demo_out();
    for (name, sql) in QUERIES {
        let columns = declared_columns(sql);
        let o = query(out, &[name, "--format", "csv"]);
        assert_exit(&[name], &o, 0);
        let text = String::from_utf8_lossy(&o.stdout);
        let header: Vec<&str> = text.lines().next().unwrap_or_default().split(',').collect();
        assert_eq!(header, columns, "{name}: columns");
        assert!(text.lines().count() > 1, "{name}: the demo warehouse gives it rows:\n{text}");
        let o = query(out, &[name, "--format", "json"]);
        assert_exit(&[name], &o, 0);
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), columns.len(), "{name}: {line}");
        }
        let o = query(out, &[name]);
        assert_exit(&[name], &o, 0);
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("+-"), "{name}: a table");
    }
    // Parameters, and their errors.
    let o = query(out, &["wow_latest", "--param", "days=3", "--format", "csv"]);
    assert_exit(&[], &o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1 + 2 * 3, "3 days of 2 metrics");
    let o = query(out, &["wow_latest", "--param", "weeks=3"]);
    assert_exit(&[], &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("the query takes only days"));
    let o = query(out, &["no_such_query"]);
    assert_exit(&[], &o, 2);
    // A SQL file works too.
    let file = out.parent().unwrap().join("mine.sql");
    std::fs::write(&file, "SELECT count(*) AS n FROM applications").unwrap();
    let o = query(out, &[file.to_str().unwrap(), "--format", "csv"]);
    assert_exit(&[], &o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "n\n800\n");

    // A warehouse a user added to (a table of the same name in another schema, one of their own,
    // a column of their own) answers the same: the named queries read the catalog's tables and
    // columns only.
    let scratch = tempfile::tempdir().unwrap();
    let theirs = scratch.path().join("out");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::copy(out.join("warehouse.duckdb"), theirs.join("warehouse.duckdb")).unwrap();
    let c = duckdb::Connection::open(theirs.join("warehouse.duckdb")).unwrap();
    c.execute_batch(
        "CREATE SCHEMA scratch; CREATE TABLE scratch.runs AS SELECT 1 AS x; CREATE TABLE my_notes AS SELECT 1 AS x;
         ALTER TABLE post_count_cohorts ADD COLUMN source VARCHAR;
         UPDATE post_count_cohorts SET source = CASE WHEN applications % 2 = 0 THEN 'a' ELSE 'b' END;",
    )
    .unwrap();
    drop(c);
    for name in ["cohort_acceptance", "run_health", "applications_by_status"] {
        let mine = query(&theirs, &[name, "--format", "csv"]);
        assert_exit(&[name], &mine, 0);
        assert_eq!(
            String::from_utf8_lossy(&mine.stdout),
            String::from_utf8_lossy(&query(out, &[name, "--format", "csv"]).stdout),
            "{name}"
        );
    }
}

/// A virtualenv with `notebooks/requirements.txt` under the target directory, made once. Tests
/// that need it run in parallel, so the first one makes it and the others wait.
pub(crate) fn notebook_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_notebook_venv).clone()
}

fn make_notebook_venv() -> PathBuf {
    crate::needs::venv("notebook-venv", "notebooks/requirements.txt").join("bin/python")
}

/// Each notebook runs top to bottom under a real Jupyter kernel against the demo warehouse
/// (`notebooks/execute.py`, fresh: the committed outputs are replaced); a failing cell fails the
/// test.
#[test]
fn notebooks_run_top_to_bottom_against_the_demo_warehouse() {
    let warehouse = demo_out().join("warehouse.duckdb");
    run_notebooks(&[("CREATOR_ETL_WAREHOUSE", warehouse.to_str().unwrap())], "reading the warehouse");
}

/// The same notebooks over the shared lake of two organizations, read with `deltalake` and
/// queried by DuckDB over Arrow, one organization picked by `CREATOR_ETL_ORG`.
#[test]
fn notebooks_run_top_to_bottom_against_a_lake_of_two_organizations() {
    let lake = two_org_lake();
    run_notebooks(
        &[("CREATOR_ETL_LAKE", &lake.url), ("CREATOR_ETL_ORG", "demo"), ("CREATOR_ETL_WAREHOUSE", "/nonexistent")],
        "reading the lake file://",
    );
    // The helper's table list is the lake's, and a lake of several organizations needs one named.
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks");
    let o = Command::new(notebook_python())
        .current_dir(&helper)
        .args(["-c", "import json, creator_etl_nb as nb\nprint(json.dumps(nb.LAKE_TABLES))\nnb.connect()"])
        .env("CREATOR_ETL_LAKE", &lake.url)
        .env_remove("CREATOR_ETL_ORG")
        .output()
        .unwrap();
    let tables: Vec<String> = serde_json::from_slice(o.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(tables, creator_etl::load::catalog::lake_tables());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("the lake holds 2 organizations (demo, other)"), "{stderr}");
}

/// The notebooks over a fleet warehouse of two organizations, one picked by `CREATOR_ETL_ORG`.
/// It is made by `fleet run --warehouse fleet` from two organizations' own warehouses (copies of
/// the demo's): a fleet run takes each organization's own warehouse in before its first request,
/// and with no service to reach it loads nothing more.
#[test]
fn notebooks_run_top_to_bottom_against_a_fleet_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut fleet = String::new();
    for (i, org) in ["demo", "other"].iter().enumerate() {
        let state = out.join("orgs").join(org).join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::copy(demo_out().join("state/warehouse.duckdb"), state.join("warehouse.duckdb")).unwrap();
        fleet.push_str(&format!("[[organization]]\nname = \"{org}\"\nkey_env = \"KEY_{i}\"\n"));
    }
    // And one without any data: its first sync fails.
    fleet.push_str("[[organization]]\nname = \"zeta\"\nkey_env = \"KEY_2\"\n");
    let file = dir.path().join("fleet.toml");
    std::fs::write(&file, fleet).unwrap();
    let args = ["--base-url", "http://127.0.0.1:9", "--out", out.to_str().unwrap(), "fleet", "run", "--config"];
    let o = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(args)
        .arg(&file)
        .args(["--warehouse", "fleet", "--max-attempts", "1"])
        .env("KEY_0", "key-of-demo")
        .env("KEY_1", "key-of-other")
        .env("KEY_2", "key-of-zeta")
        .env_remove("CREATOR_ETL_LAKE")
        .output()
        .unwrap();
    assert_exit(&args, &o, 1);
    let warehouse = out.join("warehouse.duckdb");
    run_notebooks(
        &[("CREATOR_ETL_WAREHOUSE", warehouse.to_str().unwrap()), ("CREATOR_ETL_ORG", "demo")],
        "reading the warehouse",
    );
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks");
    let o = Command::new(notebook_python())
        .current_dir(&helper)
        .args(["-c", "import creator_etl_nb as nb\nnb.connect()"])
        .env("CREATOR_ETL_WAREHOUSE", &warehouse)
        .env_remove("CREATOR_ETL_LAKE")
        .env_remove("CREATOR_ETL_ORG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("the fleet warehouse holds 2 organizations (demo, other)"), "{stderr}");
    // The report of the fleet warehouse: an overview with both organizations, failed at the top
    // (the fleet's status files hold this run's failure), over the data their warehouses held.
    let args = ["report", "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 7);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pages = summary["pages"].as_array().unwrap();
    assert_eq!(pages.len(), 3, "zeta has no rows, but a status file: it is listed");
    for (page, org) in pages.iter().zip(["demo", "other", "zeta"]) {
        assert_eq!(page["organization"], org);
        assert_eq!(page["health"], "failed", "{page}");
        let content = if org == "zeta" { "sentences" } else { "charted" };
        assert_eq!(page["sections"]["content"], content, "{page}");
    }
    let overview = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    assert!(overview.contains("3 organizations: 3 failed"), "the overview counts them");
    let zeta = std::fs::read_to_string(out.join("report/org/zeta.html")).unwrap();
    assert!(zeta.contains("Failed: the fleet&#39;s last run of it ended failed"));
    assert!(zeta.contains("Nothing has been loaded yet."));
    // A fleet warehouse loaded but not published (no snapshot beside its writer's file) is not
    // taken for a fleet with nothing loaded.
    std::fs::remove_file(&warehouse).unwrap();
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not published yet"), "{}", show(&args, &o));
    let page = std::fs::read_to_string(out.join("report/org/demo.html")).unwrap();
    assert!(page.contains("Failed: the fleet&#39;s last run of it ended failed"), "the status file's outcome");
}

/// The notebooks of `notebooks/` (three).
fn notebooks() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ipynb"))
        .collect();
    found.sort();
    assert_eq!(found.len(), 3, "{found:?}");
    found
}

fn run_notebooks(envs: &[(&str, &str)], reading: &str) {
    let python = notebook_python();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks");
    for path in notebooks() {
        let o = Command::new(&python)
            .arg(dir.join("execute.py"))
            .arg(&path)
            .env_remove("CREATOR_ETL_LAKE")
            .env_remove("CREATOR_ETL_ORG")
            .envs(envs.iter().copied())
            .env("MPLBACKEND", "module://matplotlib_inline.backend_inline")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{} failed:\n{}\n{}",
            path.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(!stdout.contains(" 0 figures"), "{}: {stdout}", path.display());
        assert!(stdout.contains(reading), "{}: {stdout}", path.display());
    }
}

/// The committed notebooks hold their outputs, so a repository browser shows them: every code
/// cell executed in order, figures in each, and nothing of the machine that made them (paths
/// outside the repository, keys). `examples/regenerate.sh` makes them.
#[test]
fn committed_notebooks_are_executed_with_their_outputs() {
    for path in notebooks() {
        let text = std::fs::read_to_string(&path).unwrap();
        let nb: serde_json::Value = serde_json::from_str(&text).unwrap();
        let code: Vec<&serde_json::Value> =
            nb["cells"].as_array().unwrap().iter().filter(|c| c["cell_type"] == "code").collect();
        let counts: Vec<i64> = code
            .iter()
            .map(|c| c["execution_count"].as_i64().unwrap_or_else(|| panic!("{}: a cell not executed", path.display())))
            .collect();
        assert_eq!(counts, (1..=code.len() as i64).collect::<Vec<_>>(), "{}: executed top to bottom", path.display());
        let images = code
            .iter()
            .flat_map(|c| c["outputs"].as_array().unwrap())
            .filter(|o| o["data"].get("image/png").is_some())
            .count();
        assert!(images > 0, "{}: its charts are committed", path.display());
        let first = code[0]["outputs"].to_string();
        assert!(first.contains("reading the warehouse data/warehouse.duckdb"), "{}: {first}", path.display());
        for leak in ["/root/", "/home/", "/tmp/", "/work/", "emu-full-key", "CREATOR_API_KEY="] {
            assert!(!text.contains(leak), "{}: holds `{leak}`", path.display());
        }
    }
}

/// A lake of two organizations, made once: `demo` (a copy of the demo's output, loaded into it)
/// and `other` (a second, smaller demo organization without actions).
pub(crate) struct TwoOrgLake {
    pub url: String,
    /// The `--out` of each organization, whose warehouse the lake must agree with.
    pub demo: PathBuf,
    pub other: PathBuf,
}

pub(crate) fn two_org_lake() -> &'static TwoOrgLake {
    static LAKE: OnceLock<TwoOrgLake> = OnceLock::new();
    LAKE.get_or_init(|| {
        let dir = process_dir("lake2");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let demo = dir.join("demo");
        copy_dir(demo_out(), &demo);
        let other = dir.join("other");
        let args = ["demo", "--out", other.to_str().unwrap(), "--applications", "300", "--seed", "7"];
        assert_exit(&args, &run_bin(&dir, &args, &[]), 0);
        let url = format!("file://{}", dir.join("lake").display());
        for (out, org) in [(&demo, "demo"), (&other, "other")] {
            let args = ["load", "--out", out.to_str().unwrap(), "--lake", &url, "--org", org];
            assert_exit(&args, &run_bin(&dir, &args, &[]), 0);
        }
        TwoOrgLake { url, demo, other }
    })
}

/// A copy of an `--out` directory, symbolic links (the Parquet tables' current versions) kept.
fn copy_dir(from: &Path, to: &Path) {
    let o = Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
    assert!(o.status.success(), "cp -a: {}", String::from_utf8_lossy(&o.stderr));
}

/// Every named query over the lake with `--org` answers exactly as over that organization's own
/// warehouse, including a table the organization has no rows in (`other` has no actions).
#[test]
fn named_queries_over_the_lake_answer_as_over_the_warehouse() {
    let lake = two_org_lake();
    let scratch = tempfile::tempdir().unwrap();
    let cache_out = scratch.path().join("data");
    for (org, out) in [("demo", &lake.demo), ("other", &lake.other)] {
        for (name, _) in QUERIES {
            let want = query(out, &[name, "--format", "csv"]);
            assert_exit(&[name], &want, 0);
            let args = [
                "query",
                name,
                "--format",
                "csv",
                "--lake",
                &lake.url,
                "--org",
                org,
                "--out",
                cache_out.to_str().unwrap(),
            ];
            let got = run_bin(scratch.path(), &args, &[]);
            assert_exit(&args, &got, 0);
            assert_eq!(String::from_utf8_lossy(&got.stdout), String::from_utf8_lossy(&want.stdout), "{org}: {name}");
        }
    }
    // `CREATOR_ETL_LAKE` works as `--lake` does.
    let args = ["query", "run_health", "--org", "other", "--out", cache_out.to_str().unwrap()];
    let o = run_bin(scratch.path(), &args, &[("CREATOR_ETL_LAKE", &lake.url)]);
    assert_exit(&args, &o, 0);
}

/// Over all organizations: the views add `organization`; the per-organization named queries ask
/// for `--org`; unknown organizations and missing lakes are usage errors.
#[test]
fn a_lake_of_several_organizations_is_queried_by_organization() {
    let lake = two_org_lake();
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("data");
    let sql = scratch.path().join("per_org.sql");
    std::fs::write(&sql, "SELECT organization, count(*) AS n FROM applications GROUP BY 1 ORDER BY 1").unwrap();
    let lake_args = |extra: &[&str]| -> std::process::Output {
        let mut args = vec!["query", "--lake", &lake.url, "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        run_bin(scratch.path(), &args, &[])
    };
    let o = lake_args(&[sql.to_str().unwrap(), "--format", "csv"]);
    assert_exit(&[], &o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "organization,n\ndemo,800\nother,300\n");
    let o = lake_args(&["run_health"]);
    assert_exit(&[], &o, 2);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("the lake holds 2 organizations (demo, other)") && stderr.contains("--org"), "{stderr}");
    let o = lake_args(&["run_health", "--org", "nobody"]);
    assert_exit(&[], &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no rows of it; it holds demo, other"));
    let missing = format!("file://{}", scratch.path().join("no-lake").display());
    let args = ["query", "run_health", "--lake", &missing, "--org", "demo", "--out", out.to_str().unwrap()];
    let o = run_bin(scratch.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no lake table `applications`"), "{}", show(&args, &o));
    let args = ["query", "run_health", "--org", "demo", "--out", out.to_str().unwrap()];
    assert_exit(&args, &run_bin(scratch.path(), &args, &[]), 2);
}
