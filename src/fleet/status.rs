//! Each organization's status file, `OUT/orgs/<name>/state/fleet-status.json`: what `fleet
//! status` shows and the next run carries over.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::report::{ActionsOutcome, OrgReport, SyncOutcome};
use crate::out::OutDir;

/// What `fleet status` and the next run read about an organization's last syncs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OrgStatus {
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_outcome: Option<SyncOutcome>,
    /// How the last run's actions stage ended, when it had one.
    #[serde(default)]
    pub last_actions: Option<ActionsOutcome>,
    pub last_success_at: Option<DateTime<Utc>>,
    pub last_success_run_id: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// The last run's report row.
    pub last_run: Option<OrgReport>,
}

/// An organization's directory under the fleet's `--out`.
pub fn org_dir(out: &Path, name: &str) -> PathBuf {
    OutDir::new(out).org(name).root().to_path_buf()
}

/// The organization's status file, `OUT/orgs/<name>/state/fleet-status.json`.
pub fn status_path(org_out: &Path) -> PathBuf {
    OutDir::new(org_out).fleet_status_file()
}

/// An organization's status file: the empty status when it never ran. When the file cannot be
/// read, or is not a status as a whole (a torn write, an edit, a field this release does not
/// know), what can be read of it field by field, and why the rest could not.
pub fn read_status(org_out: &Path) -> (OrgStatus, Option<String>) {
    let path = status_path(org_out);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (OrgStatus::default(), None),
        Err(e) => return (OrgStatus::default(), Some(format!("cannot read `{}`: {e}", path.display()))),
    };
    match serde_json::from_slice::<OrgStatus>(&bytes) {
        Ok(st) => (st, None),
        Err(e) => (salvage(&bytes), Some(format!("`{}` is not a valid fleet status: {e}", path.display()))),
    }
}

/// The fields of a damaged status file that still read on their own.
fn salvage(bytes: &[u8]) -> OrgStatus {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(bytes) else { return OrgStatus::default() };
    fn field<T: DeserializeOwned>(map: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<T> {
        map.get(name).cloned().and_then(|v| serde_json::from_value(v).ok())
    }
    OrgStatus {
        last_run_at: field(&map, "last_run_at"),
        last_outcome: field(&map, "last_outcome"),
        last_actions: field(&map, "last_actions"),
        last_success_at: field(&map, "last_success_at"),
        last_success_run_id: field(&map, "last_success_run_id"),
        last_error: field(&map, "last_error"),
        last_error_at: field(&map, "last_error_at"),
        last_run: field(&map, "last_run"),
    }
}

/// Records the run in the organization's status file, and its last success in the report. The
/// caller holds the organization's lock. A status file that cannot be read is never overwritten
/// silently: it is kept aside (`fleet-status.json.corrupt-<time>`), with a warning, and what
/// could be read of it is carried over; if it cannot be kept aside, it is left as it is.
pub(super) fn write_status(org_out: &Path, report: &mut OrgReport) {
    let path = status_path(org_out);
    let (mut st, problem) = read_status(org_out);
    if let Some(problem) = problem {
        let aside =
            path.with_file_name(format!("fleet-status.json.corrupt-{}", Utc::now().format("%Y%m%dT%H%M%S%.3fZ")));
        if let Err(e) = std::fs::rename(&path, &aside) {
            tracing::warn!(organization = %report.name, %problem, error = %e, "the organization's fleet status cannot be read, nor kept aside; it is left as it is, and this run is not recorded in it");
            report.last_success_at = st.last_success_at.max(success_of(report));
            return;
        }
        tracing::warn!(
            organization = %report.name,
            %problem,
            kept_aside = %aside.display(),
            last_success_at = ?st.last_success_at,
            "the organization's fleet status cannot be read; it is kept aside, and what could be read of it carries over"
        );
    }
    st.last_run_at = Some(report.finished_at);
    st.last_outcome = Some(report.outcome);
    st.last_actions = report.actions;
    match report.outcome {
        SyncOutcome::Completed => {
            st.last_success_at = Some(report.finished_at);
            st.last_success_run_id.clone_from(&report.run_id);
        }
        _ => {
            st.last_error.clone_from(&report.error);
            st.last_error_at = Some(report.finished_at);
        }
    }
    report.last_success_at = st.last_success_at;
    st.last_run = Some(report.clone());
    if let Err(e) = crate::out::write_json_atomic(&path, &st) {
        tracing::warn!(organization = %report.name, error = %e, "cannot keep the organization's fleet status");
    }
}

/// This run's success time, when its sync completed.
fn success_of(report: &OrgReport) -> Option<DateTime<Utc>> {
    (report.outcome == SyncOutcome::Completed).then_some(report.finished_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_status_gives_what_it_can() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_status(dir.path()).1.is_none(), "no file: the empty status");
        let path = status_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            r#"{"last_outcome": "exploded", "last_success_at": "2026-01-02T03:04:05Z", "last_error": 7}"#,
        )
        .unwrap();
        let (st, problem) = read_status(dir.path());
        assert!(problem.unwrap().contains("fleet-status.json"));
        assert_eq!(st.last_success_at.unwrap().to_rfc3339(), "2026-01-02T03:04:05+00:00");
        assert!(st.last_outcome.is_none() && st.last_error.is_none());
        std::fs::write(&path, "{\"last_success_at\": \"2026-01-0").unwrap();
        let (st, problem) = read_status(dir.path());
        assert!(problem.is_some() && st.last_success_at.is_none());
    }
}
