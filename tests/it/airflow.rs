//! The manual's Airflow DAG, run for real: Airflow 3 (`airflow dags test`, in a virtualenv of
//! its own made from `tests/airflow/requirements.txt`) runs the DAG exactly as the scheduling
//! chapter writes it, its paths, lake and `creator-etl` pointed at a temporary directory and the
//! emulator; the mapped shard tasks sync a fleet into one lake, read back exact with `deltalake`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use crate::fleet::{fleet_emulator, fleet_file, key_env, truth_ids};

/// A virtualenv with `tests/airflow/requirements.txt` under the target directory, made once (a
/// few minutes), apart from the notebooks' requirements that users install.
fn airflow_venv() -> PathBuf {
    static VENV: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    VENV.get_or_init(|| crate::needs::venv("airflow-venv", "tests/airflow/requirements.txt")).clone()
}

/// Replaces `from` (which must be in `text`: the DAG is the manual's, not a copy) with `to`.
fn point(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the manual's DAG no longer holds `{from}`");
    text.replace(from, to)
}

#[test]
fn the_manuals_airflow_dag_syncs_its_shards_into_one_lake() {
    let names = ["a1", "a2", "a3", "a4"];
    let emu = fleet_emulator(names.len() as u32, 40, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_file(dir.path(), &names, "");
    let lake = dir.path().join("lake");
    let out_root = dir.path().join("shards");
    let dags = dir.path().join("dags");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&dags).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_creator-etl"), bin.join("creator-etl")).unwrap();

    // The DAG as the manual writes it, pointed at this test's directories and lake.
    let dag = crate::manual::block("scheduling.md", "## Airflow", "python");
    assert!(dag.contains("from airflow.sdk import dag"), "Airflow 3's imports");
    let dag = point(&dag, "\"/mnt/creator-etl\"", &format!("{:?}", out_root.display().to_string()));
    let dag = point(&dag, "/etc/creator-etl/fleet.toml", &config.display().to_string());
    let dag = point(&dag, "s3://analytics/creator-etl", &format!("file://{}", lake.display()));
    std::fs::write(dags.join("creator_etl_fleet.py"), dag).unwrap();

    let venv = airflow_venv();
    let airflow = |args: &[&str]| {
        let path =
            format!("{}:{}:{}", bin.display(), venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let o = Command::new(venv.join("bin/airflow"))
            .args(args)
            .env("AIRFLOW_HOME", dir.path().join("airflow"))
            .env("AIRFLOW__CORE__DAGS_FOLDER", &dags)
            .env("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
            .env("PATH", path)
            // What the tasks inherit (`append_env=True`): the emulator, its keys, no pacing.
            .env("CREATOR_API_BASE_URL", &emu.base_url)
            .env("CREATOR_MIN_INTERVAL_MS", "0")
            .env("CREATOR_HOURLY_CAP", "0")
            .envs(key_env(names.len() as u32))
            .output()
            .unwrap();
        let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "airflow {args:?} failed:\n{log}");
        log
    };
    airflow(&["db", "migrate"]);
    let log = airflow(&["dags", "test", "creator_etl_fleet"]);
    let finished = log.lines().find(|l| l.contains("DagRun Finished: dag_id=creator_etl_fleet"));
    assert!(finished.is_some_and(|l| l.contains("state=success")), "the DAG run did not succeed:\n{log}");
    // One mapped task per shard, each with its own `--out`.
    for i in 0..4 {
        assert!(out_root.join(format!("shard-{i}")).is_dir(), "shard {i} ran:\n{log}");
    }

    // The lake, read back with `deltalake`: each organization's applications, exactly.
    let read = r#"
import json, sys
from deltalake import DeltaTable
t = DeltaTable(sys.argv[1]).to_pyarrow_table(columns=["organization", "id"]).to_pydict()
ids = {}
for org, i in zip(t["organization"], t["id"]):
    ids.setdefault(org, []).append(i)
print(json.dumps(ids), flush=True)
# deltalake sometimes aborts while the interpreter tears down, after the work is done (see
# lake.rs): leave without the teardown.
import os
os._exit(0)
"#;
    let o = Command::new(crate::demo::notebook_python())
        .args(["-c", read])
        .arg(lake.join("applications"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read: BTreeMap<String, Vec<i64>> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(read.keys().map(String::as_str).collect::<Vec<_>>(), names, "every shard's organizations, no other");
    for (k, name) in names.iter().enumerate() {
        let ids = &read[*name];
        let unique: BTreeSet<i64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "{name}: no application twice");
        assert_eq!(unique, truth_ids(&emu, k as u32 + 1), "{name}: exactly its applications");
    }
}
