//! A fleet's observability in the ecosystem's standard forms: the Prometheus node_exporter
//! textfile-collector format (`--metrics-file`) and OpenLineage run events
//! (`--openlineage-url`, `--openlineage-file`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use super::run::{Job, OrgReport, Outcome};
use crate::Error;

/// The job namespace of every OpenLineage event.
pub const LINEAGE_NAMESPACE: &str = "creator-etl";
/// The OpenLineage schema the events follow.
pub const LINEAGE_SCHEMA: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";
const PRODUCER: &str = concat!("https://github.com/creator-etl/creator-etl/tree/v", env!("CARGO_PKG_VERSION"));

/// The metrics, one gauge family each: name, help, value of a row.
type Gauge = (&'static str, &'static str, fn(&OrgReport) -> Option<f64>);

const GAUGES: [Gauge; 6] = [
    (
        "creator_etl_fleet_last_success_timestamp_seconds",
        "Unix time of the organization's last completed sync (this run or an earlier one).",
        |o| o.last_success_at.map(|t| t.timestamp_millis() as f64 / 1000.0),
    ),
    ("creator_etl_fleet_last_run_success", "1 when the organization's last sync completed, else 0.", |o| {
        Some(if o.outcome == Outcome::Completed { 1.0 } else { 0.0 })
    }),
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
];

/// The textfile-collector text of these organizations' last runs.
pub fn metrics_text(orgs: &[OrgReport]) -> String {
    let mut out = String::new();
    for (name, help, value) in GAUGES {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for o in orgs {
            if let Some(v) = value(o) {
                // Organization names are slugs: nothing in them needs escaping.
                out.push_str(&format!("{name}{{organization=\"{}\"}} {v}\n", o.name));
            }
        }
    }
    out
}

/// Writes the metrics atomically (aside, then renamed), as the textfile collector requires.
pub fn write_metrics(path: &std::path::Path, orgs: &[OrgReport]) -> Result<(), Error> {
    crate::out::write_atomic(path, metrics_text(orgs).as_bytes())?;
    Ok(())
}

/// Where OpenLineage events go.
#[derive(Clone, Debug)]
pub enum Lineage {
    /// POSTed as JSON to this URL (an OpenLineage HTTP endpoint, e.g. Marquez's
    /// `/api/v1/lineage`). A failed POST is logged and never fails a sync.
    Url { url: reqwest::Url, http: reqwest::Client },
    /// Appended as one JSON object per line.
    File { path: PathBuf, order: Arc<Mutex<()>> },
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
    pub async fn emit(&self, event: &Value) {
        match self {
            Lineage::Url { url, http } => {
                let sent = http.post(url.clone()).json(event).send().await.and_then(|r| r.error_for_status());
                if let Err(e) = sent {
                    tracing::warn!(url = %url, error = %e.without_url(), "cannot send an OpenLineage event");
                }
            }
            Lineage::File { path, order } => {
                let _order = order.lock().unwrap_or_else(|e| e.into_inner());
                let mut line = event.to_string();
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
    inputs: Vec<Value>,
    outputs: Vec<Value>,
}

impl LineageEvent {
    pub fn new(job: &Job) -> Self {
        let mut bytes = [0u8; 16];
        bytes.iter_mut().for_each(|b| *b = fastrand::u8(..));
        let run_id = uuid::Builder::from_random_bytes(bytes).into_uuid().to_string();
        let base = &job.client.base_url;
        let api = format!("{}://{}", base.scheme(), base.host_str().unwrap_or_default())
            + &base.port().map(|p| format!(":{p}")).unwrap_or_default();
        let path = base.path().trim_end_matches('/');
        let inputs = ["campaign_applications", "stats/content_24h_data"]
            .iter()
            .map(|e| json!({"namespace": api, "name": format!("{path}/{e}")}))
            .collect();
        let outputs = match &job.load.lake {
            Some(lake) => {
                crate::load::lake::tables().into_iter().map(|t| json!({"namespace": lake.url, "name": t})).collect()
            }
            None => {
                let warehouse = job.load.out.root().join("warehouse.duckdb");
                let warehouse = std::path::absolute(&warehouse).unwrap_or(warehouse);
                vec![json!({"namespace": "file", "name": warehouse.display().to_string()})]
            }
        };
        LineageEvent { run_id, job: format!("fleet.{}", job.name), inputs, outputs }
    }

    fn event(&self, kind: &str, at: DateTime<Utc>, facets: Value) -> Value {
        json!({
            "eventType": kind,
            "eventTime": at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "producer": PRODUCER,
            "schemaURL": LINEAGE_SCHEMA,
            "run": {"runId": self.run_id, "facets": facets},
            "job": {"namespace": LINEAGE_NAMESPACE, "name": self.job},
            "inputs": self.inputs,
            "outputs": self.outputs,
        })
    }

    pub fn start(&self, at: DateTime<Utc>) -> Value {
        self.event("START", at, json!({}))
    }

    /// COMPLETE for a completed sync; ABORT for one stopped by its budget or Ctrl-C (it resumes);
    /// FAIL for a failed one. Both with the reason as an `errorMessage` facet.
    pub fn end(&self, report: &OrgReport) -> Value {
        let kind = match report.outcome {
            Outcome::Completed => return self.event("COMPLETE", report.finished_at, json!({})),
            Outcome::Incomplete | Outcome::Interrupted => "ABORT",
            Outcome::Failed => "FAIL",
        };
        {
            let message = format!("{}: {}", report.outcome.as_str(), report.error.as_deref().unwrap_or(""));
            let facet = json!({"errorMessage": {
                "_producer": PRODUCER,
                "_schemaURL": "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet",
                "message": message,
                "programmingLanguage": "Rust",
            }});
            self.event(kind, report.finished_at, facet)
        }
    }
}
