//! The page's first section: freshness and health (`run_health`).

use serde_json::json;

use super::html::{opt_int, opt_json, Section};
use crate::report::charts::{self, Scale, Series, BLUE, RED};
use crate::report::data::stamp;
use crate::report::rows::{RunHealth, Typed};

pub(super) fn section(t: &Typed) -> Section {
    let mut s = Section::default();
    let runs = &t.run_health;
    let Some(last) = runs.first() else {
        s.sentence("No run has been loaded: no freshness or request figures yet.");
        return s;
    };
    let finished = last.finished_at;
    let on = finished.map_or_else(String::new, |t| format!(" ({})", stamp(t)));
    s.figure(
        "last_synced_at",
        "Last sync finished (UTC)".into(),
        finished.map_or("–".into(), stamp),
        opt_json(finished.map(|t| t.to_rfc3339())),
        None,
    );
    let mode = last.mode();
    s.figure(
        super::key::LAST_SYNC_MODE,
        "Mode of the last sync".into(),
        mode.to_owned(),
        json!(mode),
        last.counts_agree.map(|c| if c { "every count agreed".into() } else { "counts disagreed".into() }),
    );
    // The last full sync: the last run's own reconcile time, or the newest full run shown.
    let reconciled = last.last_reconcile_at.or_else(|| runs.iter().find(|r| r.full()).and_then(|r| r.finished_at));
    s.figure(
        "last_reconciled_at",
        "Last reconciled by a full sync (UTC)".into(),
        reconciled.map_or("not in the last runs".into(), stamp),
        opt_json(reconciled.map(|t| t.to_rfc3339())),
        None,
    );
    for (key, label, v) in [
        (super::key::LAST_RUN_REQUESTS, "Requests, last run", last.requests),
        (super::key::LAST_RUN_RATE_LIMITED, "429 responses, last run", last.rate_limited),
        ("last_run_warnings", "Warnings, last run", last.warnings),
    ] {
        s.figure(key, format!("{label}{on}"), opt_int(v), opt_json(v), None);
    }
    let d = last.duration_s;
    s.figure(
        "last_run_duration_s",
        format!("Duration, last run{on}"),
        d.map_or("–".into(), |d| format!("{d:.1} s")),
        opt_json(d),
        None,
    );
    let oldest_first: Vec<&RunHealth> = runs.iter().rev().collect();
    let labels: Vec<String> = oldest_first
        .iter()
        .map(|r| r.finished_at.map_or("?".into(), |t| t.format("%m-%d %H:%M").to_string()))
        .collect();
    let range = match (oldest_first.first().and_then(|r| r.finished_at), finished) {
        (Some(a), Some(b)) if a == b => format!(", finished {}", stamp(a)),
        (Some(a), Some(b)) => format!(", {} to {}", stamp(a), stamp(b)),
        _ => String::new(),
    };
    let count = |v: Option<i64>| v.map(|v| v as f64);
    s.chart(
        "runs_requests",
        &match runs.len() {
            1 => format!("Requests and 429 responses of the only loaded run so far{range}."),
            n => format!("Requests and 429 responses per loaded run: the last {n} runs{range}."),
        },
        charts::bars(
            &labels,
            &[
                Series::new("requests", BLUE, oldest_first.iter().map(|r| count(r.requests)).collect()),
                Series::new("429s", RED, oldest_first.iter().map(|r| count(r.rate_limited)).collect()),
            ],
            false,
            Scale::Count,
        ),
        "The loaded runs made no requests to chart (runs loaded from a landing without its report).",
    );
    let rows = runs
        .iter()
        .take(10)
        .map(|r| {
            vec![
                r.finished_at.map_or("–".into(), stamp),
                r.mode().to_owned(),
                r.status.clone(),
                r.duration_s.map_or("–".into(), |d| format!("{d:.1}")),
                opt_int(r.requests),
                opt_int(r.rate_limited),
                opt_int(r.warnings),
                opt_int(r.status_changes),
            ]
        })
        .collect();
    s.table(
        "The last loaded runs, newest first (queries/run_health.sql)",
        &["finished (UTC)", "mode", "status", "duration (s)", "requests", "429s", "warnings", "status changes"],
        rows,
    );
    s
}
