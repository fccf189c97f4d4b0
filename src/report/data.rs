//! What one organization's page shows, read with the named queries (`queries/*.sql`): their rows
//! exactly as `creator-etl query NAME --format json` prints them, and the figures derived from
//! those rows. Nothing here computes a number the named queries do not hold.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use super::rows::RunHealth;
use crate::query::{self, Format, QueryConfig, QueryError, Source};

/// One row of a named query, as `creator-etl query NAME --format json` prints it.
pub type Row = Map<String, Value>;

/// The named queries the page asks, with the parameters it gives each (every parameter the
/// query declares, so no value of an earlier query's carries over on the connection).
pub const ASKED: [(&str, &[(&str, &str)]); 10] = [
    ("run_health", &[("runs", "20")]),
    ("wow_latest", &[("days", "91")]),
    ("weekly_trend", &[("weeks", "13")]),
    ("movers", &[("days", "28"), ("top", "5")]),
    ("applications_by_status", &[]),
    ("status_changes", &[("days", "91")]),
    ("pending_queue", &[]),
    ("cohort_acceptance", &[]),
    ("cohort_by_month", &[("months", "12")]),
    ("action_outcomes", &[]),
];

/// How the page reads a query whose rows can be many: the named query's SQL, whole, as a
/// subquery, counted by the outer query. The JSON block says so (`aggregate`).
const AGGREGATED: [(&str, &str); 1] = [(
    "status_changes",
    "SELECT CAST(date_trunc('week', CAST(changed_at AS TIMESTAMP)) AS DATE) AS week_start, to_status, \
     count(*) AS changes FROM (\n{sql}\n) AS q GROUP BY ALL ORDER BY week_start, to_status",
)];

/// A named query's answer.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    pub params: BTreeMap<String, String>,
    /// The outer query the named query's rows went through, when the page keeps a count of them
    /// rather than the rows (`{sql}` is the named query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<&'static str>,
    pub rows: Vec<Row>,
}

/// Every named query's answer for one organization.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Answers(pub BTreeMap<&'static str, Answer>);

impl Answers {
    /// Asks every query of [`ASKED`] on a connection to one organization's tables and views.
    pub fn ask(conn: &duckdb::Connection, source: &Source) -> Result<Answers, QueryError> {
        let mut answers = BTreeMap::new();
        for (name, params) in ASKED {
            let named = query::named(name).expect("the page asks named queries");
            let aggregate = AGGREGATED.iter().find(|(n, _)| *n == name).map(|(_, outer)| *outer);
            let sql = match aggregate {
                Some(outer) => outer.replace("{sql}", named.trim().trim_end_matches(';')),
                None => named.to_owned(),
            };
            let params: Vec<(String, String)> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let config =
                QueryConfig { source: source.clone(), name: name.to_owned(), sql, params, format: Format::Json };
            let text = query::render(&query::execute(conn, &config)?, Format::Json)?;
            let rows = text
                .lines()
                .map(|l| match serde_json::from_str(l) {
                    Ok(Value::Object(row)) => Ok(row),
                    _ => Err(QueryError::Db(format!("`{name}` gave a row that is not a JSON object: {l}"))),
                })
                .collect::<Result<Vec<Row>, _>>()?;
            answers.insert(name, Answer { params: config.params.into_iter().collect(), aggregate, rows });
        }
        Ok(Answers(answers))
    }

    pub fn rows(&self, name: &str) -> &[Row] {
        self.0.get(name).map_or(&[], |a| &a.rows)
    }

    /// The value the page gave parameter `key` of query `name`.
    pub fn param(&self, name: &str, key: &str) -> &str {
        self.0.get(name).and_then(|a| a.params.get(key)).map_or("", String::as_str)
    }
}

/// How the organization's data stands, shown at the top of its page. Ordered worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// A command that should have refreshed the data failed (its stage is on record, and no later
    /// command redid it), a run it extracted was not loaded or not published, or the last loaded
    /// run did not complete.
    Failed,
    /// A command started and did not end (killed, out of memory, the machine lost) and nothing
    /// holds the output directory now, or a run was stopped (Ctrl-C, a budget): a rerun resumes.
    Interrupted,
    /// A command has not ended, and whether it still runs cannot be told (the lock cannot be
    /// probed), or its record cannot be read.
    Unknown,
    /// The last sync finished longer ago than `--stale-after`.
    Stale,
    /// Nothing loaded yet.
    Never,
    /// A run holds the output directory now (its lock): the data is the last finished sync's.
    Running,
    Fresh,
}

impl HealthState {
    /// Every state, worst first.
    pub const ALL: [HealthState; 7] = [
        HealthState::Failed,
        HealthState::Interrupted,
        HealthState::Unknown,
        HealthState::Stale,
        HealthState::Never,
        HealthState::Running,
        HealthState::Fresh,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Failed => "failed",
            HealthState::Interrupted => "interrupted",
            HealthState::Unknown => "unknown",
            HealthState::Stale => "stale",
            HealthState::Never => "never synced",
            HealthState::Running => "running",
            HealthState::Fresh => "fresh",
        }
    }

    /// The state as a CSS class name: `never-synced`.
    pub fn css_class(self) -> String {
        self.as_str().replace(' ', "-")
    }

    /// Whether a monitor can leave it alone: fresh data, or a run in progress over fresh data (or
    /// a first sync in progress). Anything else makes `creator-etl report` exit 7.
    pub fn is_healthy(self) -> bool {
        matches!(self, HealthState::Fresh | HealthState::Running)
    }
}

/// What kind of trouble a [`RunProblem`] is, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    Failed,
    Interrupted,
    Unknown,
}

impl ProblemKind {
    fn state(self) -> HealthState {
        match self {
            ProblemKind::Failed => HealthState::Failed,
            ProblemKind::Interrupted => HealthState::Interrupted,
            ProblemKind::Unknown => HealthState::Unknown,
        }
    }
}

/// A run that did not bring the data up to date, as the output directory tells (its stage
/// ledger, its raw runs, the fleet's status file).
#[derive(Clone, Debug, Serialize)]
pub struct RunProblem {
    pub kind: ProblemKind,
    pub at: Option<DateTime<Utc>>,
    pub what: String,
}

/// The health of one organization: its state and the sentences that explain it.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    pub state: HealthState,
    pub headline: String,
    pub notes: Vec<String>,
    pub last_synced_at: Option<DateTime<Utc>>,
}

impl Health {
    /// `problems`: what the output directory knows that the data does not (the newest heads the
    /// page, the others follow as notes); `running`: who holds the output directory's lock now
    /// (another process), if anyone.
    pub fn of(
        runs: &[RunHealth],
        problems: &[RunProblem],
        running: Option<&str>,
        now: DateTime<Utc>,
        stale_after: std::time::Duration,
    ) -> Health {
        let last = runs.first();
        let last_synced_at = last.and_then(|r| r.finished_at);
        let mut notes = vec![];
        // The worst problem heads the page, the newest of those (one with no time counts as
        // newest); the others are said below it.
        let mut problems: Vec<&RunProblem> = problems.iter().collect();
        problems.sort_by_key(|p| (p.kind, std::cmp::Reverse((p.at.is_none(), p.at))));
        let (first, others) = match problems.split_first() {
            Some((first, others)) => (Some(*first), others),
            None => (None, &[][..]),
        };
        for p in others {
            notes.push(format!("Also: {}{}.", p.what, at(p.at)));
        }
        if let Some(r) = last {
            if let Some(w) = r.warnings.filter(|w| *w > 0) {
                notes.push(format!("The last loaded run reported {w} warning{}.", plural(w)));
            }
            if r.counts_agree == Some(false) {
                notes.push(
                    "The last loaded run's counts did not all agree with the service's totals; a full sync reconciles them."
                        .into(),
                );
            }
            if let Some(n) = r.rate_limited.filter(|n| *n > 0) {
                notes.push(format!("The last loaded run was answered 429 (rate limited) {n} time{}.", plural(n)));
            }
        }
        let completed = last.is_none_or(|r| r.status == "completed" || r.status == "loaded");
        let age = last_synced_at.map(|t| since(now, t));
        let (state, headline) = match (first, last_synced_at) {
            (Some(p), _) => {
                let state = p.kind.state();
                let word = match p.kind {
                    ProblemKind::Failed => "Failed",
                    ProblemKind::Interrupted => "Interrupted",
                    ProblemKind::Unknown => "Unknown",
                };
                (
                    state,
                    format!(
                        "{word}: {}{}. {}",
                        p.what,
                        at(p.at),
                        match last_synced_at {
                            Some(t) => format!("The data below is from the sync that finished {}.", stamp(t)),
                            None => "Nothing has been loaded yet.".into(),
                        }
                    ),
                )
            }
            (None, _) if !completed => (
                HealthState::Failed,
                format!("Failed: the last loaded run ended `{}`.", last.map_or("", |r| r.status.as_str())),
            ),
            (None, None) => (
                HealthState::Never,
                "Never synced: no run has been loaded yet, so there is nothing to show. Run `creator-etl run`.".into(),
            ),
            (None, Some(t)) => {
                let age = since(now, t);
                let mode = last.map_or("full", RunHealth::mode);
                if age > stale_after {
                    (
                        HealthState::Stale,
                        format!(
                            "Stale: the last sync finished {}, {} before this page was made (more than {}).",
                            stamp(t),
                            ago(age),
                            humantime::format_duration(stale_after)
                        ),
                    )
                } else {
                    (
                        HealthState::Fresh,
                        format!(
                            "Fresh: last synced {}, {} before this page was made, a {mode} sync.",
                            stamp(t),
                            ago(age)
                        ),
                    )
                }
            }
        };
        // A run in progress: the page says so, but never instead of a failure or of data
        // older than `--stale-after`.
        let (state, headline) = match (running, state) {
            (Some(holder), HealthState::Fresh | HealthState::Never) => (
                HealthState::Running,
                format!(
                    "Running: {holder} holds the output directory now. {}",
                    match (last_synced_at, age) {
                        (Some(t), Some(a)) => format!(
                            "The data below is from the sync that finished {}, {} before this page was made.",
                            stamp(t),
                            ago(a)
                        ),
                        _ => "Nothing has been loaded yet.".into(),
                    }
                ),
            ),
            (Some(holder), state) => {
                notes.insert(0, format!("A run holds the output directory now: {holder}."));
                (state, headline)
            }
            (None, state) => (state, headline),
        };
        Health { state, headline, notes, last_synced_at }
    }
}

/// ` (TIME)`, when a problem's time is known.
fn at(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(String::new, |t| format!(" ({})", stamp(t)))
}

/// How long before `now` a time was; nothing for a time after it (a clock set back).
fn since(now: DateTime<Utc>, t: DateTime<Utc>) -> std::time::Duration {
    (now - t).to_std().unwrap_or(std::time::Duration::ZERO)
}

fn plural(n: i64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A time as the page shows it: `2026-11-25 16:15 UTC`.
pub fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A duration as the page shows it: `3 h 12 min`, `2 days 4 h`.
pub fn ago(d: std::time::Duration) -> String {
    let m = d.as_secs() / 60;
    match m {
        0 => "less than a minute".into(),
        1..=59 => format!("{m} min"),
        60..=2879 => format!("{} h {} min", m / 60, m % 60),
        _ => format!("{} days {} h", m / 1440, (m % 1440) / 60),
    }
}

/// An ISO week as the page labels it: `2026-W47 (Nov 16 – Nov 22)`.
pub fn iso_week(start: NaiveDate) -> String {
    let end = start + chrono::Duration::days(6);
    let w = start.iso_week();
    format!("{}-W{:02} ({} – {})", w.year(), w.week(), start.format("%b %-d"), end.format("%b %-d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(runs: Vec<Value>) -> Vec<RunHealth> {
        let rows = runs.into_iter().map(|v| v.as_object().unwrap().clone()).collect();
        let mut a = Answers::default();
        a.0.insert("run_health", Answer { params: BTreeMap::new(), aggregate: None, rows });
        super::super::rows::Typed::of(&a).unwrap().run_health
    }

    #[test]
    fn health_is_fresh_stale_failed_or_never() {
        let now: DateTime<Utc> = "2026-11-25T12:00:00Z".parse().unwrap();
        let day = std::time::Duration::from_secs(26 * 3600);
        let run = |at: &str, status: &str| {
            serde_json::json!({"run_id": "r1", "started_at": null, "finished_at": at, "status": status,
                               "duration_s": 1.0, "requests": 7, "retries": 0, "rate_limited": 0, "pacing_wait_s": 0.0,
                               "status_changes": 0, "warnings": 2, "parquet_exported": true, "sync_mode": "quick",
                               "pages_verified": 3, "counts_agree": false, "last_reconcile_at": null})
        };
        let h = Health::of(&answers(vec![run("2026-11-25T09:59:59.5+00:00", "completed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Fresh);
        assert!(
            h.headline.contains("2 h 0 min before this page") && h.headline.contains("quick sync"),
            "{}",
            h.headline
        );
        assert_eq!(h.notes.len(), 2, "warnings and disagreeing counts: {:?}", h.notes);
        let h = Health::of(&answers(vec![run("2026-11-23T10:00:00+00:00", "completed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Stale);
        assert!(
            h.headline.contains("2 days 2 h before") && h.headline.contains("(more than 1day 2h)"),
            "{}",
            h.headline
        );
        let failed = RunProblem { kind: ProblemKind::Failed, at: Some(now), what: "run x did not finish".into() };
        let h = Health::of(
            &answers(vec![run("2026-11-25T10:00:00+00:00", "completed")]),
            std::slice::from_ref(&failed),
            None,
            now,
            day,
        );
        assert_eq!(h.state, HealthState::Failed);
        assert!(
            h.headline.starts_with("Failed: run x did not finish (2026-11-25 12:00 UTC). The data below"),
            "{}",
            h.headline
        );
        let h = Health::of(&answers(vec![run("2026-11-25T10:00:00+00:00", "failed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Failed);
        let h = Health::of(&answers(vec![]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Never);
        assert_eq!(h.last_synced_at, None);
        let h = Health::of(
            &answers(vec![run("2026-11-23T10:00:00+00:00", "completed")]),
            &[],
            Some("run 20261125T110000Z-1 (pid 7, since 2026-11-25T11:00:00Z)"),
            now,
            day,
        );
        assert_eq!(h.state, HealthState::Stale, "a run in progress does not hide old data");
        assert!(
            h.notes[0].starts_with("A run holds the output directory now: run 20261125T110000Z-1"),
            "{:?}",
            h.notes
        );
        let holder = Some("run 20261125T110000Z-1 (pid 7, since 2026-11-25T11:00:00Z)");
        let fresh = answers(vec![run("2026-11-25T10:00:00+00:00", "completed")]);
        let h = Health::of(&fresh, &[], holder, now, day);
        assert_eq!(h.state, HealthState::Running);
        assert!(h.headline.starts_with("Running: run 20261125T110000Z-1 (pid 7"), "{}", h.headline);
        let h = Health::of(&fresh, std::slice::from_ref(&failed), holder, now, day);
        assert_eq!(h.state, HealthState::Failed, "nor an earlier failure");
        // A killed run reads interrupted; the older of two problems follows as a note.
        let killed = RunProblem {
            kind: ProblemKind::Interrupted,
            at: Some(now - chrono::Duration::hours(1)),
            what: "`creator-etl run` started and did not end".into(),
        };
        let h = Health::of(&fresh, std::slice::from_ref(&killed), None, now, day);
        assert_eq!(h.state, HealthState::Interrupted);
        assert!(h.headline.starts_with("Interrupted: `creator-etl run` started and did not end"), "{}", h.headline);
        let h = Health::of(&fresh, &[killed, failed], None, now, day);
        assert_eq!(h.state, HealthState::Failed, "the worst heads the page");
        assert!(h.notes[0].starts_with("Also: `creator-etl run` started and did not end"), "{:?}", h.notes);
    }

    #[test]
    fn iso_weeks_and_durations_read_as_labelled() {
        assert_eq!(iso_week(NaiveDate::from_ymd_opt(2026, 11, 16).unwrap()), "2026-W47 (Nov 16 – Nov 22)");
        assert_eq!(iso_week(NaiveDate::from_ymd_opt(2024, 12, 30).unwrap()), "2025-W01 (Dec 30 – Jan 5)");
        assert_eq!(ago(std::time::Duration::from_secs(59)), "less than a minute");
        assert_eq!(ago(std::time::Duration::from_secs(3 * 3600 + 720)), "3 h 12 min");
    }
}
