//! Actions: replay the approved rows of a reviewed CSV against the service, exactly once.
//!
//! Parse, validate, act: the whole file is validated first ([`reviewed::parse`]), and one bad
//! row means nothing is sent. Every row is decided from one look at the journal, each change
//! (fingerprint) once: a copy of an earlier row is `skipped_duplicate`. Then each approved row,
//! in file order:
//! 1. is skipped when the journal says it was already applied (or `--only` leaves it out), and
//!    held back when it failed for good or ended in doubt before (unless `--retry-failed`);
//! 2. has its intent committed to the journal, is sent through the paced client, and has its
//!    outcome committed (see [`journal`] for why this gives exactly once across crashes);
//! 3. ends as one [`RowOutcome`].
//!
//! **Lost answers.** A write can take effect while its answer never arrives (a dropped
//! connection, a proxy's 502, a body cut short). Any 2xx is `applied`, whatever its body. A write
//! whose answer was lost, in this run or in a run that died, is sent again (both writes of the API
//! may be: see [`crate::api::Client`]) and the answer to the re-send is read in that light
//! ([`settle`]): a refusal that proves the first attempt took effect ("Cancelled sales cannot be
//! updated." for a row that cancels, "current status is paid_externally" for a mark) is
//! `applied`; a refusal that does not depend on the first attempt (404, an invalid value) is
//! `failed`; anything else is `in_doubt`, which the operator settles.
//!
//! A 401 or 403 stops the run at once: the rest are `not_sent`, and nothing more is requested.
//! The results go to `OUT/actions/<run_id>-results.csv` (the input plus outcome columns) and the
//! warehouse's `action_results` table.

pub mod journal;
pub mod reviewed;
mod send;

use send::{check_hint, send};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, Client};
use crate::load::LoadError;
use crate::out::{write_atomic, OutDir, OutError};
use journal::{Journal, Known, Scope};
pub use reviewed::{ActionKind, Reviewed, ReviewedRow, RowError, Target};

#[derive(Debug, Error)]
pub enum ActionError {
    #[error("cannot read the reviewed CSV `{path}`")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` has {} problem(s); nothing was sent:\n  {}", .errors.len(), .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n  "))]
    Invalid { path: String, errors: Vec<RowError> },
    #[error("{rows} rows would be sent, more than `--max-rows {max}`; nothing was sent. Raise `--max-rows` if this is intended")]
    TooManyRows { rows: usize, max: usize },
    #[error("action journal: cannot {context}: {message}")]
    Journal { context: &'static str, message: String },
    #[error(transparent)]
    Warehouse(#[from] LoadError),
    #[error(transparent)]
    Out(#[from] OutError),
}

/// A validated actions request.
#[derive(Clone, Debug)]
pub struct ActionConfig {
    pub out: OutDir,
    pub file: PathBuf,
    /// Refuse to send more than this many rows.
    pub max_rows: Option<usize>,
    /// Only rows of this action.
    pub only: Option<ActionKind>,
    /// Send again rows that failed for good or ended in doubt in an earlier run.
    pub retry_failed: bool,
    /// The service and key the rows go to: the journal's scope.
    pub scope: Scope,
}

/// How a row ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowOutcome {
    /// The service applied it.
    Applied,
    /// Nothing to do: the payout was already paid externally.
    Noop,
    SkippedNotApproved,
    /// An earlier run applied the same change (same fingerprint).
    SkippedAlreadyApplied,
    /// Left out by `--only`.
    SkippedNotSelected,
    /// A copy of an earlier row of the same file (same change, same approval): decided once, by
    /// the first copy; never sent, and never touches the first copy's journal row.
    SkippedDuplicate,
    /// The service refused it (404, 422, …); fix the row, or apply with `--retry-failed`.
    Failed,
    /// Retries were spent on 429s, 5xx or network errors; the next apply tries again.
    FailedTransient,
    /// An answer was lost and no later answer settled whether the write took effect: the
    /// operator checks the target, then leaves it or applies with `--retry-failed`.
    InDoubt,
    /// Not sent because the run stopped first (401/403 or Ctrl-C); the next apply sends it.
    NotSent,
}

impl RowOutcome {
    /// The name stored in the journal, the results and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            RowOutcome::Applied => "applied",
            RowOutcome::Noop => "noop",
            RowOutcome::SkippedNotApproved => "skipped_not_approved",
            RowOutcome::SkippedAlreadyApplied => "skipped_already_applied",
            RowOutcome::SkippedNotSelected => "skipped_not_selected",
            RowOutcome::SkippedDuplicate => "skipped_duplicate",
            RowOutcome::Failed => "failed",
            RowOutcome::FailedTransient => "failed_transient",
            RowOutcome::InDoubt => "in_doubt",
            RowOutcome::NotSent => "not_sent",
        }
    }

    /// Whether the row needs attention: exit 3.
    pub fn is_failure(self) -> bool {
        matches!(self, RowOutcome::Failed | RowOutcome::FailedTransient | RowOutcome::InDoubt | RowOutcome::NotSent)
    }
}

/// One row's result.
#[derive(Clone, Debug, Serialize)]
pub struct RowResult {
    pub line: u64,
    pub row_id: Option<String>,
    pub action: &'static str,
    pub target: String,
    pub approved: bool,
    pub reviewer: Option<String>,
    pub fingerprint: String,
    pub outcome: RowOutcome,
    pub http_status: Option<u16>,
    /// The service's message, or why the row was skipped.
    pub message: Option<String>,
    /// The start of the service's answer.
    pub response_excerpt: Option<String>,
    /// For applied sale updates: the sale as the service returned it.
    pub result_total: Option<i64>,
    pub result_commission: Option<i64>,
    pub result_status: Option<String>,
}

/// What `actions apply` did; printed as JSON on stdout.
#[derive(Clone, Debug, Serialize)]
pub struct ActionReport {
    pub run_id: String,
    pub file: PathBuf,
    pub results_csv: PathBuf,
    /// Rows per outcome.
    pub outcomes: BTreeMap<RowOutcome, u64>,
    /// Why the run stopped early (401/403, Ctrl-C), if it did.
    pub stopped: Option<String>,
    /// The stop was a rejected key (exit 4).
    #[serde(skip)]
    pub stopped_by_auth: bool,
    /// The stop was the client's spent request budget of this many requests.
    #[serde(skip)]
    pub stopped_by_budget: Option<u64>,
    /// Intents of earlier runs that had no outcome and are not in this file.
    pub unresolved_intents: Vec<String>,
    pub requests: crate::api::MetricsSnapshot,
    pub rows: Vec<RowResult>,
}

impl ActionReport {
    /// Every approved row ended applied, a no-op or already applied.
    pub fn all_ok(&self) -> bool {
        self.rows.iter().all(|r| !r.outcome.is_failure())
    }
}

/// Reads and validates a reviewed file; every problem at once.
pub fn read(path: &Path) -> Result<Reviewed, ActionError> {
    let bytes = std::fs::read(path).map_err(|source| ActionError::Read { path: path.display().to_string(), source })?;
    reviewed::parse(&bytes).map_err(|errors| ActionError::Invalid { path: path.display().to_string(), errors })
}

/// The decision for one row before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Skip(RowOutcome, String),
    /// `resend_of`: an earlier run sent this row and lost its answer (it died, or the row ended in
    /// doubt): the answer to this send is read knowing that.
    Send {
        resend_of: Option<String>,
        retry: bool,
    },
}

fn decide(row: &ReviewedRow, config: &ActionConfig, known: Option<&HashMap<String, Known>>) -> Decision {
    if !row.approved {
        return Decision::Skip(RowOutcome::SkippedNotApproved, "not approved".into());
    }
    if config.only.is_some_and(|k| k != row.action) {
        return Decision::Skip(RowOutcome::SkippedNotSelected, "left out by `--only`".into());
    }
    match known.and_then(|k| k.get(&row.fingerprint())) {
        Some(Known::Done { run_id }) => {
            Decision::Skip(RowOutcome::SkippedAlreadyApplied, format!("already applied by run {run_id}"))
        }
        Some(Known::Interrupted { run_id }) => Decision::Send { resend_of: Some(run_id.clone()), retry: false },
        Some(Known::InDoubt { run_id, .. }) if config.retry_failed => {
            Decision::Send { resend_of: Some(run_id.clone()), retry: true }
        }
        Some(Known::InDoubt { run_id, message }) => Decision::Skip(
            RowOutcome::InDoubt,
            format!("in doubt since run {run_id}: {message}; not sent again until `--retry-failed`"),
        ),
        Some(Known::FailedBefore { .. }) if config.retry_failed => Decision::Send { resend_of: None, retry: true },
        Some(Known::FailedBefore { run_id, status, message }) => Decision::Skip(
            RowOutcome::Failed,
            format!(
                "failed before in run {run_id} ({status} {message}); not sent again: fix the row, or apply with `--retry-failed`"
            ),
        ),
        Some(Known::New) | None => Decision::Send { resend_of: None, retry: false },
    }
}

/// Every row's decision, in file order, from one look at the journal: a row that repeats an
/// earlier one (the same fingerprint: validation refused copies that disagree) is decided once,
/// by its first copy, and every later copy is `skipped_duplicate`. Two copies decided apart
/// would both be sent, and the second would overwrite the first's journal row.
fn decide_rows(config: &ActionConfig, file: &Reviewed, known: Option<&HashMap<String, Known>>) -> Vec<Decision> {
    let mut first: HashMap<String, u64> = HashMap::new();
    file.rows
        .iter()
        .map(|row| match first.entry(row.fingerprint()) {
            std::collections::hash_map::Entry::Occupied(line) => {
                Decision::Skip(RowOutcome::SkippedDuplicate, format!("duplicate of line {}", line.get()))
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(row.line);
                decide(row, config, known)
            }
        })
        .collect()
}

/// Every row's decision, and how many would be sent; refuses more than `--max-rows`.
fn decide_all(
    config: &ActionConfig,
    file: &Reviewed,
    known: Option<&HashMap<String, Known>>,
) -> Result<Vec<Decision>, ActionError> {
    let decisions = decide_rows(config, file, known);
    let to_send = decisions.iter().filter(|d| matches!(d, Decision::Send { .. })).count();
    match config.max_rows.filter(|m| to_send > *m) {
        Some(max) => Err(ActionError::TooManyRows { rows: to_send, max }),
        None => Ok(decisions),
    }
}

/// The checks an apply makes before its first request, made before a `run` fetches anything:
/// the journal can be read and written, and `--max-rows` holds for what would be sent.
pub fn preflight(config: &ActionConfig, file: &Reviewed) -> Result<(), ActionError> {
    let journal = Journal::open(&config.out)?;
    decide_all(config, file, Some(&journal.known_all(&config.scope)?)).map(|_| ())
}

/// The plan for a file: each row's fate, without sending anything. Reads the journal read-only.
pub fn plan(config: &ActionConfig, file: &Reviewed) -> Result<String, ActionError> {
    let (journal, note) = match Journal::open_read_only(&config.out)? {
        Some((j, note)) => (Some(j), note),
        None => (None, None),
    };
    let known = journal.map(|j| j.known_all(&config.scope)).transpose()?;
    let mut text = String::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (row, decision) in file.rows.iter().zip(decide_rows(config, file, known.as_ref())) {
        let what = match decision {
            Decision::Skip(outcome, why) => {
                *totals.entry(outcome.as_str().to_owned()).or_default() += 1;
                match outcome {
                    RowOutcome::InDoubt => format!("hold ({why}); check {}", check_hint(row)),
                    RowOutcome::Failed => format!("hold ({why})"),
                    _ => format!("skip ({why})"),
                }
            }
            Decision::Send { resend_of, retry } => {
                *totals.entry(format!("send {}", row.action)).or_default() += 1;
                match (resend_of, retry) {
                    (Some(run), false) => {
                        format!("send again (run {run} was interrupted before its answer): {}", row.changes())
                    }
                    (Some(run), true) => {
                        format!("send again (in doubt since run {run}, `--retry-failed`): {}", row.changes())
                    }
                    (None, true) => format!("send again (failed before, `--retry-failed`): {}", row.changes()),
                    (None, false) => format!("send: {}", row.changes()),
                }
            }
        };
        text.push_str(&format!("line {:>4}  {:<11}  {:<44}  {what}\n", row.line, row.action, row.target.to_string()));
    }
    let sends: u64 = totals.iter().filter(|(k, _)| k.starts_with("send")).map(|(_, v)| v).sum();
    text.push_str(&format!("\n{} rows; {sends} to send", file.rows.len()));
    for (k, v) in &totals {
        text.push_str(&format!("; {k}: {v}"));
    }
    if let Some(max) = config.max_rows.filter(|m| (sends as usize) > *m) {
        text.push_str(&format!("\nmore than `--max-rows {max}`: `actions apply` would refuse this file"));
    }
    text.push_str(&format!("\njournal scope: {}", config.scope));
    if let Some(note) = note {
        text.push_str(&format!("\nnote: {note}"));
    }
    text.push('\n');
    Ok(text)
}

/// Applies a validated file. The caller holds the lock on the output directory. `client`
/// should carry the stop signal ([`Client::with_stop`]) so that Ctrl-C ends a pacing wait.
pub async fn apply(
    config: &ActionConfig,
    file: &Reviewed,
    client: &Client,
    stop: CancellationToken,
) -> Result<ActionReport, ActionError> {
    let begun = begin(config, file)?;
    send_all(begun, config, file, client, stop).await
}

/// An apply whose journal is open and whose rows are decided, before anything is sent.
pub struct Begun {
    run_id: String,
    journal: Journal,
    decisions: Vec<Decision>,
}

impl Begun {
    /// Rows this apply will send, unless it is stopped first.
    pub fn to_send(&self) -> usize {
        self.decisions.iter().filter(|d| matches!(d, Decision::Send { .. })).count()
    }

    /// Runs `f` on the journal as it would be with the intent of every row about to be sent
    /// recorded, then undoes those intents: how they reach a store that outlives `--out` (the
    /// lake) before the first send, while this journal keeps recording each row's intent just
    /// before it goes out.
    pub fn with_intents<T>(
        &self,
        config: &ActionConfig,
        file: &Reviewed,
        f: impl FnOnce(&duckdb::Connection) -> Result<T, ActionError>,
    ) -> Result<T, ActionError> {
        let file_name = config.file.display().to_string();
        let rows: Vec<&ReviewedRow> = file
            .rows
            .iter()
            .zip(&self.decisions)
            .filter(|(_, d)| matches!(d, Decision::Send { .. }))
            .map(|(r, _)| r)
            .collect();
        self.journal.with_intents(&self.run_id, &file_name, &rows, &config.scope, f)
    }
}

/// Opens the journal and decides every row (refusing more than `--max-rows`); sends nothing.
pub fn begin(config: &ActionConfig, file: &Reviewed) -> Result<Begun, ActionError> {
    let journal = Journal::open(&config.out)?;
    let known = journal.known_all(&config.scope)?;
    let decisions = decide_all(config, file, Some(&known))?;
    Ok(Begun { run_id: crate::out::new_run_id(), journal, decisions })
}

/// Sends the rows [`begin`] decided to send, recording each in the journal.
pub async fn send_all(
    begun: Begun,
    config: &ActionConfig,
    file: &Reviewed,
    client: &Client,
    stop: CancellationToken,
) -> Result<ActionReport, ActionError> {
    let to_send = begun.to_send();
    let Begun { run_id, journal, decisions } = begun;
    let file_name = config.file.display().to_string();
    let approved: std::collections::HashSet<String> =
        file.rows.iter().filter(|r| r.approved).map(ReviewedRow::fingerprint).collect();
    let unresolved_intents: Vec<String> = journal
        .interrupted(&config.scope)?
        .into_iter()
        .filter(|i| !approved.contains(&i.fingerprint))
        .map(|i| format!("{}: line {} of `{}`, run {}", i.target, i.line, i.file, i.run_id))
        .collect();
    for u in &unresolved_intents {
        tracing::warn!(intent = %u, "an interrupted action is not in this file; apply its file again to resolve it");
    }
    tracing::info!(run_id = %run_id, rows = file.rows.len(), to_send, scope = %config.scope, "applying reviewed actions");
    let client = client.with_stop(stop.clone());

    let mut rows = vec![];
    let mut stopped: Option<String> = None;
    let mut stopped_by_auth = false;
    let mut stopped_by_budget = None;
    for (row, decision) in file.rows.iter().zip(decisions) {
        let mut result = RowResult {
            line: row.line,
            row_id: row.row_id.clone(),
            action: row.action.as_str(),
            target: row.target.to_string(),
            approved: row.approved,
            reviewer: row.reviewer.clone(),
            fingerprint: row.fingerprint(),
            outcome: RowOutcome::NotSent,
            http_status: None,
            message: None,
            response_excerpt: None,
            result_total: None,
            result_commission: None,
            result_status: None,
        };
        match decision {
            Decision::Skip(outcome, why) => {
                result.outcome = outcome;
                result.message = Some(why);
            }
            Decision::Send { .. } if stopped.is_some() || stop.is_cancelled() => {
                stopped.get_or_insert_with(|| "interrupted".into());
                result.message = Some("not sent: the run stopped first; apply again to send it".into());
            }
            Decision::Send { resend_of, .. } => {
                // Each fingerprint is decided once per run (a copy is `skipped_duplicate`), and
                // this run holds the lock: the journal is as the decision read it.
                if let Some(run) = &resend_of {
                    tracing::warn!(line = row.line, target = %row.target, earlier_run = %run, "sending again a row whose answer was lost");
                }
                journal.record_intent(&run_id, &file_name, row, &config.scope)?;
                crate::out::crash_point("actions-after-intent");
                let halt = send(&client, row, &mut result, resend_of.is_some()).await;
                crate::out::crash_point("actions-before-outcome");
                if result.outcome == RowOutcome::NotSent {
                    // Interrupted before it went out: no intent is left open.
                    journal.forget_intent(&run_id, row)?;
                } else {
                    journal.record_outcome(&run_id, row, &result, &config.scope)?;
                }
                tracing::debug!(line = row.line, target = %row.target, outcome = result.outcome.as_str(), status = ?result.http_status, "action");
                if let Some(e) = halt {
                    stopped_by_auth = e.is_auth();
                    if let ApiError::BudgetSpent { max, .. } = &e {
                        stopped_by_budget = Some(*max);
                    }
                    stopped = Some(if stopped_by_auth { e.to_string() } else { "interrupted".into() });
                }
            }
        }
        rows.push(result);
    }

    let finished_at = Utc::now();
    journal.record_results(&run_id, &file_name, finished_at, &rows)?;
    journal.publish(&config.out)?;
    let results_csv = config.out.results_csv(&run_id);
    write_atomic(&results_csv, &results_csv_bytes(file, &rows, &run_id))?;
    let mut outcomes = BTreeMap::new();
    for r in &rows {
        *outcomes.entry(r.outcome).or_default() += 1;
    }
    Ok(ActionReport {
        run_id,
        file: config.file.clone(),
        results_csv,
        outcomes,
        stopped,
        stopped_by_auth,
        stopped_by_budget,
        unresolved_intents,
        requests: client.metrics(),
        rows,
    })
}

/// The extra columns of the results file.
pub const RESULT_COLUMNS: [&str; 8] =
    ["line", "outcome", "http_status", "message", "result_total", "result_commission", "result_status", "run_id"];

/// The input rows, as written, plus the outcome columns.
fn results_csv_bytes(file: &Reviewed, rows: &[RowResult], run_id: &str) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(vec![]);
    let header: Vec<&str> = file.headers.iter().map(String::as_str).chain(RESULT_COLUMNS).collect();
    let opt = |v: Option<String>| v.unwrap_or_default();
    // Writing into memory cannot fail.
    w.write_record(&header).expect("in-memory CSV");
    for (row, r) in file.rows.iter().zip(rows) {
        let extra = [
            r.line.to_string(),
            r.outcome.as_str().to_owned(),
            opt(r.http_status.map(|s| s.to_string())),
            opt(r.message.clone()),
            opt(r.result_total.map(|v| v.to_string())),
            opt(r.result_commission.map(|v| v.to_string())),
            opt(r.result_status.clone()),
            run_id.to_owned(),
        ];
        w.write_record(row.cells.iter().map(String::as_str).chain(extra.iter().map(String::as_str)))
            .expect("in-memory CSV");
    }
    w.into_inner().expect("in-memory CSV")
}

/// The human summary printed on stderr.
pub fn summary(report: &ActionReport) -> String {
    let mut s = format!("actions run {}: ", report.run_id);
    s.push_str(&report.outcomes.iter().map(|(k, v)| format!("{} {v}", k.as_str())).collect::<Vec<_>>().join(", "));
    for r in report.rows.iter().filter(|r| r.outcome.is_failure()) {
        let status = r.http_status.map_or(String::new(), |s| format!(" ({s})"));
        s.push_str(&format!(
            "\n  line {}: {} {}{status}: {}",
            r.line,
            r.outcome.as_str(),
            r.target,
            r.message.as_deref().unwrap_or("")
        ));
    }
    if let Some(why) = &report.stopped {
        s.push_str(&format!("\n  stopped early: {why}"));
    }
    s.push_str(&format!("\n  results: {}", report.results_csv.display()));
    s
}
