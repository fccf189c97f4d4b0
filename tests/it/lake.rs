//! The shared lake on the local filesystem: several processes loading organizations into one
//! Delta Lake at once, read back by Python `deltalake` (delta-rs's Python package, not our
//! code), every table and every version.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use creator_etl::emulator::EmulatorConfig;

use crate::moto::Moto;
use crate::util::*;

/// Per table: the current version, rows per organization, and whether every version reads.
const READ_LAKE: &str = r#"
import sys, json
from deltalake import DeltaTable
lake, tables = sys.argv[1], sys.argv[2].split(",")
out = {}
for t in tables:
    dt = DeltaTable(f"{lake}/{t}")
    counts = {}
    for o in dt.to_pyarrow_table(columns=["organization"]).column("organization").to_pylist():
        counts[o] = counts.get(o, 0) + 1
    for v in range(dt.version() + 1):
        DeltaTable(f"{lake}/{t}", version=v).to_pyarrow_table()
    out[t] = {"version": dt.version(), "rows": counts}
print(json.dumps(out), flush=True)
# deltalake 1.6.6 sometimes aborts while the interpreter tears down ("terminate called without
# an active exception"), after all the work is done: leave without the teardown.
import os
os._exit(0)
"#;

fn read_lake(lake: &str, envs: &[(String, String)]) -> serde_json::Value {
    let tables = creator_etl::load::catalog::lake_tables().join(",");
    let o = Command::new(crate::demo::notebook_python())
        .args(["-c", READ_LAKE, lake, &tables])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(o.status.success(), "deltalake could not read the lake:\n{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// An organization's rows of a table, as `read_lake` reported them (none: 0).
fn rows(got: &serde_json::Value, table: &str, org: &str) -> i64 {
    got[table]["rows"][org].as_i64().unwrap_or(0)
}

fn spawn_load(out: &Path, lake: &str, org: &str, envs: &[(String, String)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["load", "--out", out.to_str().unwrap(), "--lake", lake, "--org", org])
        .env_remove("CREATOR_ETL_LAKE")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Rows per table in an organization's own DuckDB warehouse: what the lake must hold for it.
fn warehouse_rows(out: &Path) -> std::collections::BTreeMap<String, i64> {
    let c = db(out);
    creator_etl::load::catalog::lake_tables()
        .into_iter()
        .map(|t| (t.to_owned(), count(&c, &format!("SELECT count(*) FROM {t}"))))
        .collect()
}

/// Extracts one organization's data into its own `--out` (no lake yet).
fn extract(emu: &TestEmu, out: &Path) {
    Bin::new(out.parent().unwrap())
        .args(["run"])
        .emu(emu)
        .out(out)
        .args(["--since-days", "20"])
        .key(FULL_KEY)
        .expect(0);
}

/// Four processes, each loading another organization into the same lake at the same time: every
/// organization's rows are all there, once, and the Delta log reads at every version. Loading
/// one organization again replaces only its rows.
fn four_organizations_at_once(lake: &str, envs: &[(String, String)]) {
    let emu = TestEmu::start(EmulatorConfig::for_tests(120));
    let dir = tempfile::tempdir().unwrap();
    let outs: Vec<_> = (0..4).map(|i| dir.path().join(format!("out{i}"))).collect();
    for out in &outs {
        extract(&emu, out);
    }
    let children: Vec<Child> =
        outs.iter().enumerate().map(|(i, out)| spawn_load(out, lake, &format!("org-{i}"), envs)).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_exit(&["load", "--lake"], &o, 0);
        let report: serde_json::Value = report(&o);
        assert!(report["lake"]["versions"]["runs"].is_u64(), "{report}");
    }
    let want = warehouse_rows(&outs[0]);
    let got = read_lake(lake, envs);
    for (table, n) in &want {
        for i in 0..4 {
            let org = format!("org-{i}");
            assert_eq!(rows(&got, table, &org), *n, "{table} rows of {org}: {}", got[table]);
        }
    }
    assert!(want["applications"] > 0 && want["content_daily"] > 0);
    query_matches_the_warehouse(lake, "org-2", &outs[2], envs);
    // Org 1 again, with one more run in its warehouse: only its rows change.
    extract(&emu, &outs[1]);
    let o = spawn_load(&outs[1], lake, "org-1", envs).wait_with_output().unwrap();
    assert_exit(&["load"], &o, 0);
    let again = read_lake(lake, envs);
    assert_eq!(rows(&again, "runs", "org-1"), warehouse_rows(&outs[1])["runs"]);
    assert_eq!(rows(&again, "runs", "org-1"), 2);
    for i in [0, 2, 3] {
        let org = format!("org-{i}");
        assert_eq!(rows(&again, "runs", &org), 1, "{org} untouched");
        assert_eq!(rows(&again, "applications", &org), want["applications"]);
    }
}

/// `query --lake --org` answers as the organization's own warehouse; from S3 the second run
/// reads the files it cached.
fn query_matches_the_warehouse(lake: &str, org: &str, out: &Path, envs: &[(String, String)]) {
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let dir = out.parent().unwrap();
    let q = dir.join("reader");
    let want = run_bin(dir, &["query", "status_changes", "--format", "csv", "--out", out.to_str().unwrap()], &[]);
    assert_exit(&["query"], &want, 0);
    for _ in 0..2 {
        let args =
            ["query", "status_changes", "--format", "csv", "--lake", lake, "--org", org, "--out", q.to_str().unwrap()];
        let got = run_bin(dir, &args, &envs);
        assert_exit(&args, &got, 0);
        assert_eq!(String::from_utf8_lossy(&got.stdout), String::from_utf8_lossy(&want.stdout));
    }
    // Data files are cached (by lake, then table) only from object storage.
    let cached = std::fs::read_dir(q.join("lake-cache"))
        .map(|dirs| dirs.flatten().any(|d| d.path().join("applications").is_dir()))
        .unwrap_or(false);
    assert_eq!(cached, lake.starts_with("s3://"), "only an object-storage lake is cached");
}

#[test]
fn four_organizations_load_one_local_lake_at_once() {
    let dir = tempfile::tempdir().unwrap();
    four_organizations_at_once(&format!("file://{}", dir.path().join("lake").display()), &[]);
}

#[test]
fn four_organizations_load_one_s3_lake_at_once() {
    let moto = Moto::start(&crate::demo::notebook_python(), "lake");
    four_organizations_at_once("s3://lake/creator-etl", &moto.envs);
}

/// The same organization from two processes at once: they serialize through Delta's conflict
/// detection (or one fails clearly); no table mixes their rows.
#[test]
fn the_same_organization_twice_at_once_never_mixes() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(80));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    extract(&emu, &a);
    extract(&emu, &b);
    extract(&emu, &b);
    let (ca, cb) = (spawn_load(&a, &lake, "acme", &[]), spawn_load(&b, &lake, "acme", &[]));
    let (oa, ob) = (ca.wait_with_output().unwrap(), cb.wait_with_output().unwrap());
    for o in [&oa, &ob] {
        let code = o.status.code();
        assert!(code == Some(0) || code == Some(1), "{}", show(&[], o));
        if code == Some(1) {
            assert!(String::from_utf8_lossy(&o.stderr).contains("lake: cannot commit"), "{}", show(&[], o));
        }
    }
    let got = read_lake(&lake, &[]);
    let (ra, rb) = (warehouse_rows(&a), warehouse_rows(&b));
    // `runs` differs between the two (1 run against 2): the lake holds one or the other, whole.
    let runs = rows(&got, "runs", "acme");
    assert!(runs == ra["runs"] || runs == rb["runs"], "runs mixed: {runs} from {} or {}", ra["runs"], rb["runs"]);
    for (table, n) in ra.iter().filter(|(t, _)| *t != "runs") {
        assert_eq!(rows(&got, table, "acme"), *n, "{table}: the same data from either process");
    }
}

/// A process killed between two table commits leaves every table readable at a committed
/// version, and the next load completes.
#[test]
fn a_load_killed_mid_commit_leaves_the_lake_readable_and_the_next_completes() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let out = dir.path().join("out");
    extract(&emu, &out);
    let crash = [("CREATOR_ETL_CRASH_AT".to_owned(), "lake-after-first-table".to_owned())];
    let o = spawn_load(&out, &lake, "acme", &crash).wait_with_output().unwrap();
    assert!(!o.status.success(), "{}", show(&[], &o));
    let tables = creator_etl::load::catalog::lake_tables();
    let probe = Command::new(crate::demo::notebook_python())
        .args([
            "-c",
            "import sys, os\nfrom deltalake import DeltaTable\nprint(DeltaTable(sys.argv[1]).to_pyarrow_table().num_rows, flush=True)\nos._exit(0)",
        ])
        .arg(format!("{lake}/{}", tables[0]))
        .output()
        .unwrap();
    assert!(probe.status.success(), "the committed table reads: {}", String::from_utf8_lossy(&probe.stderr));
    assert!(!dir.path().join("lake/runs").exists(), "no completion marker for the killed load");
    let o = spawn_load(&out, &lake, "acme", &[]).wait_with_output().unwrap();
    assert_exit(&["load"], &o, 0);
    let got = read_lake(&lake, &[]);
    for (table, n) in warehouse_rows(&out) {
        assert_eq!(rows(&got, &table, "acme"), n, "{table}");
    }
    // A lake of one organization: the named queries read it without `--org`.
    let want = run_bin(dir.path(), &["query", "cohort_acceptance", "--out", out.to_str().unwrap()], &[]);
    let args = ["query", "cohort_acceptance", "--lake", &lake, "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&want.stdout));
}

/// Bad lake flags are usage errors before anything is done.
#[test]
fn lake_flags_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cases: [(&[&str], &str); 4] = [
        (&["--lake", "file:///tmp/x"], "`--lake` needs `--org NAME`"),
        (&["--org", "acme"], "`--org` names the organization in a lake"),
        (&["--lake", "ftp://host/x", "--org", "acme"], "has the scheme `ftp`"),
        (&["--lake", "file:///tmp/x", "--org", "Acme Inc"], "is not a slug"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["load", "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run_bin(dir.path(), &args, &[]);
        assert_exit(&args, &o, 2);
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{}", show(&args, &o));
    }
}

/// A lake written before quick sync has a `runs` table without its columns: the next commit
/// adds them (schema merge), and the earlier rows read with them empty.
#[test]
fn a_lake_of_an_earlier_version_takes_the_new_runs_columns() {
    const DROP: &str = r#"
import sys, os
from deltalake import DeltaTable, write_deltalake
path, cols = sys.argv[1], sys.argv[2].split(",")
t = DeltaTable(path).to_pyarrow_table().drop_columns(cols)
write_deltalake(path, t, mode="overwrite", schema_mode="overwrite", partition_by=["organization"])
os._exit(0)
"#;
    const READ: &str = r#"
import sys, os, json
from deltalake import DeltaTable
t = DeltaTable(sys.argv[1]).to_pyarrow_table(columns=["organization", "sync_mode"])
print(json.dumps(sorted(set(zip(t.column("organization").to_pylist(), t.column("sync_mode").to_pylist())), key=str)), flush=True)
os._exit(0)
"#;
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let runs = dir.path().join("lake/runs");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    extract(&emu, &a);
    extract(&emu, &b);
    let o = spawn_load(&a, &lake, "earlier", &[]).wait_with_output().unwrap();
    assert_exit(&[], &o, 0);
    let python = crate::demo::notebook_python();
    let cols = "sync_mode,sync_scope,pages_verified,last_reconcile_at,counts_agree";
    let o = Command::new(&python).args(["-c", DROP, runs.to_str().unwrap(), cols]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let o = spawn_load(&b, &lake, "later", &[]).wait_with_output().unwrap();
    assert_exit(&[], &o, 0);
    let o = Command::new(&python).args(["-c", READ, runs.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<(String, Option<String>)> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(got, vec![("earlier".to_owned(), None), ("later".to_owned(), Some("full".to_owned()))]);

    // Regression: with `--org`, an organization whose files all predate the new columns still
    // binds every query (they read as NULL); `run_health` failed on the missing columns.
    for org in ["earlier", "later"] {
        let args =
            ["query", "run_health", "--lake", &lake, "--org", org, "--format", "csv", "--out", a.to_str().unwrap()];
        let o = run_bin(dir.path(), &args, &[]);
        assert_exit(&args, &o, 0);
        assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2, "{}", show(&args, &o));
    }
}

/// A table written anew without creator-etl's partition columns (here by Python `deltalake`) is
/// refused, naming it: its organizations' rows could not be replaced, and a load would double
/// them. The table is left as it was.
#[test]
fn a_table_partitioned_otherwise_is_refused_and_left_alone() {
    const UNPARTITION: &str = r#"
import sys, os, shutil
from deltalake import DeltaTable, write_deltalake
t = DeltaTable(sys.argv[1]).to_pyarrow_table()
shutil.rmtree(sys.argv[1])
write_deltalake(sys.argv[1], t)
os._exit(0)
"#;
    let emu = TestEmu::start(EmulatorConfig::for_tests(60));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let runs = dir.path().join("lake/runs");
    let a = dir.path().join("a");
    extract(&emu, &a);
    let o = spawn_load(&a, &lake, "acme", &[]).wait_with_output().unwrap();
    assert_exit(&[], &o, 0);
    let python = crate::demo::notebook_python();
    let o = Command::new(&python).args(["-c", UNPARTITION, runs.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = rows(&read_lake(&lake, &[]), "runs", "acme");
    let o = spawn_load(&a, &lake, "acme", &[]).wait_with_output().unwrap();
    assert_exit(&[], &o, 1);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("the lake's `runs` is partitioned by []"), "{stderr}");
    assert_eq!(rows(&read_lake(&lake, &[]), "runs", "acme"), before, "the table is left as it was");
}

/// Regression: a data file's path from the Delta log was joined to the table's directory (read
/// in place) or to the cache (written) unchecked, so a log entry naming `..` or an absolute
/// path read or wrote anywhere on the reader's machine. Such an entry is now refused, naming
/// the table and the path.
#[test]
fn a_delta_log_naming_a_file_outside_its_table_is_refused() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let a = dir.path().join("a");
    extract(&emu, &a);
    let o = spawn_load(&a, &lake, "acme", &[]).wait_with_output().unwrap();
    assert_exit(&[], &o, 0);
    // A real data file, copied outside the lake, named by a commit that climbs out of the table.
    let table = dir.path().join("lake/applications");
    let part = std::fs::read_dir(table.join("organization=acme")).unwrap().flatten().next().unwrap().path();
    std::fs::copy(&part, dir.path().join("evil.parquet")).unwrap();
    let log = table.join("_delta_log");
    let last = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse::<u64>().ok())
        .max()
        .unwrap();
    for (n, path) in [(last + 1, "organization=acme/../../../evil.parquet"), (last + 2, "/etc/passwd")] {
        let add = serde_json::json!({"add": {
            "path": path, "partitionValues": {"organization": "acme"}, "size": 100,
            "modificationTime": 0, "dataChange": true
        }});
        std::fs::write(log.join(format!("{n:020}.json")), format!("{add}\n")).unwrap();
        let args = ["query", "status_changes", "--lake", &lake, "--org", "acme", "--out", a.to_str().unwrap()];
        let o = run_bin(dir.path(), &args, &[]);
        assert_exit(&args, &o, 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("`applications`") && err.contains(path) && err.contains("not a plain path"), "{err}");
    }
}

/// Regression: with `--org`, the cache kept only that organization's files and removed the
/// other organizations' current files once they were an hour old, so every query of another
/// organization fetched them again. Only files no snapshot names are pruned.
#[test]
fn a_query_of_one_organization_keeps_the_others_cached_files() {
    let moto = Moto::start(&crate::demo::notebook_python(), "lake");
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let lake = "s3://lake/creator-etl";
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    extract(&emu, &a);
    extract(&emu, &b);
    for (out, org) in [(&a, "acme"), (&b, "brand-2")] {
        let o = spawn_load(out, lake, org, &moto.envs).wait_with_output().unwrap();
        assert_exit(&[], &o, 0);
    }
    let envs: Vec<(&str, &str)> = moto.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let reader = dir.path().join("reader");
    let query = |org: &str| {
        let args = ["query", "status_changes", "--lake", lake, "--org", org, "--out", reader.to_str().unwrap()];
        assert_exit(&args, &run_bin(dir.path(), &args, &envs), 0);
    };
    query("brand-2");
    let cached = |org: &str| -> Vec<std::path::PathBuf> {
        let mut found = vec![];
        let mut stack = vec![reader.join("lake-cache")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.to_string_lossy().contains(&format!("organization={org}/"))
                    && !p.starts_with(reader.join("lake-cache").join("schema"))
                {
                    found.push(p);
                }
            }
        }
        found
    };
    let brand = cached("brand-2");
    assert!(!brand.is_empty());
    // Two hours old: past the cache's grace, but still named by the current snapshot.
    for f in &brand {
        let o = Command::new("touch").args(["-d", "2 hours ago"]).arg(f).output().unwrap();
        assert!(o.status.success());
    }
    query("acme");
    let missing: Vec<_> = brand.iter().filter(|f| !f.exists()).collect();
    assert!(missing.is_empty(), "current files of brand-2 were pruned: {missing:?}");
}

/// `query --at-versions FILE` reads every table at the versions one load committed (its report's
/// `lake.versions`): exactly that sync, whatever was committed since. A file without them is a
/// usage error.
#[test]
fn a_query_at_the_versions_of_a_load_reads_that_sync() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(40));
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let a = dir.path().join("a");
    extract(&emu, &a);
    let first = spawn_load(&a, &lake, "acme", &[]).wait_with_output().unwrap();
    assert_exit(&[], &first, 0);
    let report = dir.path().join("first-load.json");
    std::fs::write(&report, &first.stdout).unwrap();
    // A second sync of the same organization, committed after the first.
    let args = ["run", "--base-url", &emu.base_url, "--out", a.to_str().unwrap(), "--lake", &lake, "--org", "acme"];
    assert_exit(&args, &run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]), 0);
    let sql = dir.path().join("runs.sql");
    std::fs::write(&sql, "SELECT count(*) AS runs FROM runs").unwrap();
    let query = |extra: &[&str]| {
        let mut args = vec!["query", sql.to_str().unwrap(), "--format", "csv", "--lake", &lake, "--org", "acme"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", a.to_str().unwrap()]);
        run_bin(dir.path(), &args, &[])
    };
    let now = query(&[]);
    assert_exit(&[], &now, 0);
    assert_eq!(String::from_utf8_lossy(&now.stdout), "runs\n2\n");
    let then = query(&["--at-versions", report.to_str().unwrap()]);
    assert_exit(&[], &then, 0);
    assert_eq!(String::from_utf8_lossy(&then.stdout), "runs\n1\n");
    let bad = query(&["--at-versions", sql.to_str().unwrap()]);
    assert_exit(&[], &bad, 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--at-versions"), "{}", show(&[], &bad));
}

/// Delta's commits on object storage are atomic only where the endpoint honours conditional
/// writes. The first commit to an `s3://` lake probes it: an endpoint that accepts a second
/// create-if-absent write of one object is refused, naming it, unless
/// `--lake-unsafe-no-conditional-writes` accepts the risk. moto honours them (every S3 test).
#[test]
fn an_s3_endpoint_without_conditional_writes_is_refused() {
    let careless = Careless::start();
    let emu = TestEmu::start(EmulatorConfig::for_tests(30));
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    extract(&emu, &a);
    let envs: Vec<(&str, &str)> = careless.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let endpoint = envs.iter().find(|(k, _)| *k == "AWS_ENDPOINT_URL").unwrap().1;
    let args = ["load", "--out", a.to_str().unwrap(), "--lake", "s3://lake/x", "--org", "acme"];
    let o = run_bin(dir.path(), &args, &envs);
    assert_exit(&args, &o, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ignores conditional writes")
            && err.contains(endpoint)
            && err.contains("--lake-unsafe-no-conditional-writes"),
        "{err}"
    );
    // Accepted: the probe is skipped (this fake store serves no listing, so the commit itself
    // then fails, for another reason).
    let args = [&args[..], &["--lake-unsafe-no-conditional-writes"]].concat();
    let o = run_bin(dir.path(), &args, &envs);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("conditional writes"), "{}", show(&args, &o));
}

/// An S3-like endpoint that ignores `If-None-Match`: every PUT is stored and answered 200, as
/// some S3-compatible stores do. Enough of S3 for the lake's conditional-write probe.
const CARELESS: &str = r#"
import hashlib, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
store = {}
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def _send(self, code, body=b"", etag=None):
        self.send_response(code)
        if etag: self.send_header("ETag", '"%s"' % etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD": self.wfile.write(body)
    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        store[self.path] = body
        self._send(200, etag=hashlib.md5(body).hexdigest())
    def do_GET(self):
        if self.path in store: self._send(200, store[self.path], hashlib.md5(store[self.path]).hexdigest())
        else: self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
    do_HEAD = do_GET
    def do_DELETE(self):
        store.pop(self.path, None); self._send(204)
s = HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// A local endpoint that ignores conditional writes, with the AWS variables that point at it.
pub struct Careless {
    child: Child,
    pub envs: Vec<(String, String)>,
}

impl Careless {
    pub fn start() -> Careless {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(crate::needs::python3())
            .args(["-c", CARELESS])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let envs = crate::moto::aws_envs(line.trim());
        Careless { child, envs }
    }
}

impl Drop for Careless {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
