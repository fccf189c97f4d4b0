//! A fleet's observability in the ecosystem's standard forms: the Prometheus node_exporter
//! textfile-collector format (`--metrics-file`) and OpenLineage run events
//! (`--openlineage-url`, `--openlineage-file`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::job::Job;
use super::report::{ActionsOutcome, OrgReport, SyncOutcome};
use crate::Error;

/// The job namespace of every OpenLineage event.
pub const LINEAGE_NAMESPACE: &str = "creator-etl";
/// The OpenLineage schema the events follow.
pub const LINEAGE_SCHEMA: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";
const PRODUCER: &str = concat!("https://github.com/creator-etl/creator-etl/tree/v", env!("CARGO_PKG_VERSION"));

/// The metrics, one gauge family each: name, help, value of a row (`None`: no sample).
type Gauge = (&'static str, &'static str, fn(&OrgReport) -> Option<f64>);

const GAUGES: [Gauge; 8] = [
    (
        "creator_etl_fleet_last_success_timestamp_seconds",
        "Unix time of the organization's last completed sync (this run or an earlier one).",
        |o| o.last_success_at.map(|t| t.timestamp_millis() as f64 / 1000.0),
    ),
    (
        "creator_etl_fleet_last_run_success",
        "1 when the organization's last sync (extract, load, lake commit) completed, else 0.",
        |o| Some(if o.outcome == SyncOutcome::Completed { 1.0 } else { 0.0 }),
    ),
    ("creator_etl_fleet_last_run_rows", "Applications the organization's last sync extracted and loaded.", |o| {
        Some(o.applications as f64)
    }),
    ("creator_etl_fleet_last_run_requests", "Requests the organization's last sync sent.", |o| Some(o.requests as f64)),
    ("creator_etl_fleet_last_run_rate_limited", "429 answers the organization's last sync received.", |o| {
        Some(o.rate_limited as f64)
    }),
    ("creator_etl_fleet_last_run_duration_seconds", "How long the organization's last sync took.", |o| {
        Some(o.duration_ms as f64 / 1000.0)
    }),
    (
        "creator_etl_fleet_last_run_actions_success",
        "1 when every approved row of the organization's last actions stage succeeded, else 0; no sample when it had none.",
        |o| o.actions.map(|a| if a == ActionsOutcome::Completed { 1.0 } else { 0.0 }),
    ),
    (
        "creator_etl_fleet_last_run_actions_held_rows",
        "Approved rows of the organization's last actions stage that did not succeed; no sample when it had none.",
        |o| o.actions.map(|_| o.actions_held_rows() as f64),
    ),
];

/// The textfile-collector text of these organizations' last runs, plus `kept`: sample lines of
/// earlier runs, `(gauge, organization, line)`.
pub fn metrics_text(orgs: &[OrgReport], kept: &[(String, String, String)]) -> String {
    let mut out = String::new();
    for (name, help, value) in GAUGES {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        let mut lines: Vec<(&str, String)> = kept
            .iter()
            .filter(|(gauge, _, _)| gauge == name)
            .map(|(_, org, line)| (org.as_str(), line.clone()))
            .collect();
        for o in orgs {
            if let Some(v) = value(o) {
                // Organization names are slugs: nothing in them needs escaping.
                lines.push((o.name.as_str(), format!("{name}{{organization=\"{}\"}} {v}", o.name)));
            }
        }
        lines.sort();
        for (_, line) in lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// The sample lines of `text` (a metrics file this module wrote) to keep: those of this
/// module's gauges whose organization is in `scope` and not among `replaced`.
fn kept_samples(text: &str, scope: &[String], replaced: &[&str]) -> Vec<(String, String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (gauge, rest) = l.split_once("{organization=\"")?;
            let (org, _) = rest.split_once("\"}")?;
            let ours = GAUGES.iter().any(|(name, _, _)| *name == gauge);
            (ours && scope.iter().any(|s| s == org) && !replaced.contains(&org))
                .then(|| (gauge.to_owned(), org.to_owned(), l.to_owned()))
        })
        .collect()
}

/// Writes the metrics atomically (aside, then renamed), as the textfile collector requires.
/// The series of organizations in `scope` that this run did not sync (`--only`) keep their
/// values from the file as it was; series of organizations outside `scope` (another shard's, or
/// no longer in the fleet file) are dropped. A lock beside the file orders fleet processes that
/// share it.
pub fn write_metrics(path: &Path, orgs: &[OrgReport], scope: &[String]) -> Result<(), Error> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("metrics");
    let lock_path = dir.join(format!(".{name}.lock"));
    let io = |context: String| move |source| Error::Io { context, source };
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create `{}`", dir.display())))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(format!("cannot open `{}`", lock_path.display())))?;
    lock.lock().map_err(io(format!("cannot lock `{}`", lock_path.display())))?;
    let before = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(format!("cannot read `{}`", path.display()))(e)),
    };
    let replaced: Vec<&str> = orgs.iter().map(|o| o.name.as_str()).collect();
    let kept = kept_samples(&before, scope, &replaced);
    crate::out::write_atomic(path, metrics_text(orgs, &kept).as_bytes())?;
    Ok(())
}

/// A URL as it may be shown in a log or an error: its scheme, host, port and path, without the
/// user name, password, query and fragment, which may carry credentials. Text that is not a URL
/// with a host is not shown at all.
pub fn shown_url(text: &str) -> String {
    match reqwest::Url::parse(text) {
        Ok(url) if url.has_host() => {
            let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
            if let Some(port) = url.port() {
                shown.push_str(&format!(":{port}"));
            }
            shown.push_str(url.path());
            if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
                shown.push_str(" (credentials and query hidden)");
            }
            shown
        }
        _ => "(not a URL)".into(),
    }
}

/// Where OpenLineage events go.
#[derive(Clone)]
pub enum Lineage {
    /// POSTed as JSON to this URL (an OpenLineage HTTP endpoint, e.g. Marquez's
    /// `/api/v1/lineage`). A failed POST is logged and never fails a sync.
    Url { url: reqwest::Url, http: reqwest::Client },
    /// Appended as one JSON object per line.
    File { path: PathBuf, order: Arc<Mutex<()>> },
}

impl std::fmt::Debug for Lineage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lineage::Url { url, .. } => f.debug_struct("Url").field("url", &shown_url(url.as_str())).finish(),
            Lineage::File { path, .. } => f.debug_struct("File").field("path", path).finish(),
        }
    }
}

impl Lineage {
    pub fn url(url: reqwest::Url) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Api(crate::api::ApiError::Setup(e.to_string())))?;
        Ok(Lineage::Url { url, http })
    }

    pub fn file(path: PathBuf) -> Self {
        Lineage::File { path, order: Arc::new(Mutex::new(())) }
    }

    /// Sends or appends one event; a failure is a warning.
    pub async fn emit(&self, event: &RunEvent<'_>) {
        match self {
            Lineage::Url { url, http } => {
                let sent = http.post(url.clone()).json(event).send().await.and_then(|r| r.error_for_status());
                if let Err(e) = sent {
                    tracing::warn!(url = %shown_url(url.as_str()), error = %e.without_url(), "cannot send an OpenLineage event");
                }
            }
            Lineage::File { path, order } => {
                let _order = order.lock().unwrap_or_else(|e| e.into_inner());
                let mut line = serde_json::to_string(event).unwrap_or_default();
                line.push('\n');
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(line.as_bytes()));
                if let Err(e) = written {
                    tracing::warn!(path = %path.display(), error = %e, "cannot write an OpenLineage event");
                }
            }
        }
    }
}

/// The OpenLineage identity of one organization's run: its run id, job and datasets.
#[derive(Clone, Debug)]
pub struct LineageEvent {
    run_id: String,
    job: String,
    inputs: Vec<Dataset>,
    outputs: Vec<Dataset>,
}

/// An OpenLineage dataset: where it lives and its name there.
#[derive(Clone, Debug, Serialize)]
pub struct Dataset {
    namespace: String,
    name: String,
}

/// An OpenLineage `RunEvent` (spec 2-0-2).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent<'a> {
    event_type: &'static str,
    event_time: String,
    producer: &'static str,
    #[serde(rename = "schemaURL")]
    schema_url: &'static str,
    run: Run<'a>,
    job: JobName<'a>,
    inputs: &'a [Dataset],
    outputs: &'a [Dataset],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Run<'a> {
    run_id: &'a str,
    facets: RunFacets<'a>,
}

#[derive(Debug, Serialize)]
struct JobName<'a> {
    namespace: &'static str,
    name: &'a str,
}

#[derive(Debug, Default, Serialize)]
struct RunFacets<'a> {
    #[serde(rename = "errorMessage", skip_serializing_if = "Option::is_none")]
    error_message: Option<ErrorMessageFacet>,
    /// Named [`ACTIONS_FACET`].
    #[serde(rename = "creatorEtl_actions", skip_serializing_if = "Option::is_none")]
    actions: Option<ActionsFacet<'a>>,
}

/// OpenLineage's standard `ErrorMessageRunFacet`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorMessageFacet {
    #[serde(rename = "_producer")]
    producer: &'static str,
    #[serde(rename = "_schemaURL")]
    schema_url: &'static str,
    message: String,
    programming_language: &'static str,
}

/// The [`ACTIONS_FACET`] run facet.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ActionsFacet<'a> {
    #[serde(rename = "_producer")]
    producer: &'static str,
    #[serde(rename = "_schemaURL")]
    schema_url: &'static str,
    outcome: &'static str,
    exit_code: Option<u8>,
    held_rows: u64,
    rows: &'a BTreeMap<crate::action::RowOutcome, u64>,
    message: Option<&'a str>,
}

const ERROR_MESSAGE_SCHEMA: &str =
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";

impl LineageEvent {
    /// The events of one organization's run; its output is the lake, or `warehouse` (the
    /// fleet warehouse's snapshot) when given, or its own warehouse's.
    pub fn new(job: &Job, warehouse: Option<&std::path::Path>) -> Self {
        let run_id = uuid::Uuid::new_v4().to_string();
        let base = &job.client.base_url;
        let api = format!("{}://{}", base.scheme(), base.host_str().unwrap_or_default())
            + &base.port().map(|p| format!(":{p}")).unwrap_or_default();
        let path = base.path().trim_end_matches('/');
        let inputs = ["campaign_applications", "stats/content_24h_data"]
            .iter()
            .map(|e| Dataset { namespace: api.clone(), name: format!("{path}/{e}") })
            .collect();
        let outputs = match &job.sync.load.lake {
            Some(lake) => crate::load::catalog::lake_tables()
                .into_iter()
                .map(|t| Dataset { namespace: lake.url.clone(), name: t.to_owned() })
                .collect(),
            None => {
                let warehouse = warehouse.map_or_else(|| job.sync.load.out.warehouse(), |w| w.to_path_buf());
                let warehouse = std::path::absolute(&warehouse).unwrap_or(warehouse);
                vec![Dataset { namespace: "file".to_owned(), name: warehouse.display().to_string() }]
            }
        };
        LineageEvent { run_id, job: format!("fleet.{}", job.name), inputs, outputs }
    }

    fn event<'a>(&'a self, kind: &'static str, at: DateTime<Utc>, facets: RunFacets<'a>) -> RunEvent<'a> {
        RunEvent {
            event_type: kind,
            event_time: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            producer: PRODUCER,
            schema_url: LINEAGE_SCHEMA,
            run: Run { run_id: &self.run_id, facets },
            job: JobName { namespace: LINEAGE_NAMESPACE, name: &self.job },
            inputs: &self.inputs,
            outputs: &self.outputs,
        }
    }

    pub fn start(&self, at: DateTime<Utc>) -> RunEvent<'_> {
        self.event("START", at, RunFacets::default())
    }

    /// COMPLETE for a completed sync, its data loaded and committed, whatever its actions did;
    /// ABORT for one stopped by its budget or Ctrl-C (it resumes); FAIL for a failed one, the
    /// last two with the reason as an `errorMessage` facet. A sync that had an actions stage
    /// carries the [`ACTIONS_FACET`] facet, which says whether its corrections were held.
    pub fn end<'a>(&'a self, report: &'a OrgReport) -> RunEvent<'a> {
        let kind = match report.outcome {
            SyncOutcome::Completed => "COMPLETE",
            SyncOutcome::Incomplete | SyncOutcome::Interrupted => "ABORT",
            SyncOutcome::Failed => "FAIL",
        };
        let error_message = (report.outcome != SyncOutcome::Completed).then(|| ErrorMessageFacet {
            producer: PRODUCER,
            schema_url: ERROR_MESSAGE_SCHEMA,
            message: format!("{}: {}", report.outcome.as_str(), report.error.as_deref().unwrap_or("")),
            programming_language: "Rust",
        });
        let actions = report.actions.map(|actions| ActionsFacet {
            producer: PRODUCER,
            schema_url: ACTIONS_FACET_SCHEMA,
            outcome: actions.as_str(),
            exit_code: report.actions_exit_code,
            held_rows: report.actions_held_rows(),
            rows: &report.actions_rows,
            message: report.actions_error.as_deref(),
        });
        self.event(kind, report.finished_at, RunFacets { error_message, actions })
    }
}

/// The custom run facet of a sync's actions stage: `outcome` (`completed`, `held`,
/// `incomplete`, `interrupted`, `failed`), `exitCode`, `heldRows` (approved rows that did not
/// succeed), `rows` per outcome and `message`.
pub const ACTIONS_FACET: &str = "creatorEtl_actions";
const ACTIONS_FACET_SCHEMA: &str = concat!(
    "https://github.com/creator-etl/creator-etl/tree/v",
    env!("CARGO_PKG_VERSION"),
    "/docs/src/metrics-and-lineage.md"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_modules_series_in_scope_are_kept() {
        let text = "# HELP creator_etl_fleet_last_run_rows x\n# TYPE creator_etl_fleet_last_run_rows gauge\n\
            creator_etl_fleet_last_run_rows{organization=\"a\"} 5\n\
            creator_etl_fleet_last_run_rows{organization=\"b\"} 6\n\
            creator_etl_fleet_last_run_rows{organization=\"gone\"} 7\n\
            other_metric{organization=\"a\"} 1\n";
        let scope = vec!["a".to_owned(), "b".to_owned()];
        let kept = kept_samples(text, &scope, &["b"]);
        assert_eq!(
            kept,
            [(
                "creator_etl_fleet_last_run_rows".to_owned(),
                "a".to_owned(),
                "creator_etl_fleet_last_run_rows{organization=\"a\"} 5".to_owned()
            )]
        );
    }

    #[test]
    fn the_actions_facet_is_named_as_documented() {
        let facets = RunFacets {
            error_message: None,
            actions: Some(ActionsFacet {
                producer: PRODUCER,
                schema_url: ACTIONS_FACET_SCHEMA,
                outcome: "held",
                exit_code: Some(3),
                held_rows: 1,
                rows: &BTreeMap::new(),
                message: None,
            }),
        };
        let json = serde_json::to_value(&facets).unwrap();
        assert_eq!(json[ACTIONS_FACET]["heldRows"], 1);
        assert_eq!(json[ACTIONS_FACET]["exitCode"], 3);
        assert!(json.get("errorMessage").is_none());
    }

    #[test]
    fn shown_urls_carry_no_credentials() {
        let shown = shown_url("https://user:tok3n@lineage.example/api/v1/lineage?api_key=q5ecret#frag");
        assert!(shown.starts_with("https://lineage.example/api/v1/lineage"), "{shown}");
        for secret in ["user", "tok3n", "q5ecret", "frag"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(shown_url("https://lineage.example/x"), "https://lineage.example/x");
        assert_eq!(shown_url("user:tok3n@host"), "(not a URL)");
    }
}
