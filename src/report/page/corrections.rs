//! The corrections section (`action_outcomes`).

use std::collections::BTreeSet;

use serde_json::json;

use super::html::{int_text, opt_int, Section};
use crate::report::charts::{self, Scale, Series, BLUE, GREEN, ORANGE, PALETTE, PURPLE, RED};
use crate::report::data::stamp;
use crate::report::rows::{ActionOutcome, Typed};

/// The outcomes of rows that need attention (`action::RowOutcome::is_failure`, exit 3).
pub(super) const NEED_ATTENTION: [&str; 4] = ["failed", "failed_transient", "in_doubt", "not_sent"];

pub(super) fn section(t: &Typed) -> Section {
    let mut s = Section::default();
    let rows = &t.action_outcomes;
    // Runs newest first, as the query orders them.
    let mut runs: Vec<&str> = vec![];
    for r in rows {
        if !runs.contains(&r.run_id.as_str()) {
            runs.push(&r.run_id);
        }
    }
    let Some(last) = runs.first() else {
        s.sentence(
            "No reviewed corrections have been applied to this organization's data (`creator-etl actions apply`, or `run --actions`).",
        );
        return s;
    };
    fn of<'a>(rows: &'a [ActionOutcome], run: &'a str) -> impl Iterator<Item = &'a ActionOutcome> + 'a {
        rows.iter().filter(move |r| r.run_id == run)
    }
    let finished = of(rows, last).map(|r| r.finished_at).max();
    let on = finished.map_or_else(String::new, |t| format!(" ({})", stamp(t)));
    let count = |run: &str, pred: &dyn Fn(&str) -> bool| -> i64 {
        of(rows, run).filter(|r| pred(&r.outcome)).map(|r| r.rows).sum()
    };
    let applied = count(last, &|o| o == "applied");
    let attention = count(last, &|o| NEED_ATTENTION.contains(&o));
    let total = count(last, &|_| true);
    s.figure("actions_last_rows", format!("Rows, last actions run{on}"), int_text(total), json!(total), None);
    s.figure("actions_last_applied", format!("Applied, last actions run{on}"), int_text(applied), json!(applied), None);
    s.figure(
        "actions_last_need_attention",
        format!("Need attention, last actions run{on}"),
        int_text(attention),
        json!(attention),
        Some("failed, failed_transient, in_doubt or not_sent: `actions apply` exits 3".into()),
    );
    let shown: Vec<&str> = runs.iter().take(5).rev().copied().collect();
    let outcomes: BTreeSet<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
    let series: Vec<Series> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let color = match *o {
                "applied" => GREEN,
                "failed" => RED,
                _ => [BLUE, ORANGE, PURPLE, PALETTE[5]][i % 4],
            };
            Series::new(*o, color, shown.iter().map(|run| Some(count(run, &|x| x == *o) as f64)).collect())
        })
        .collect();
    let labels: Vec<String> = shown
        .iter()
        .map(|run| {
            of(rows, run).map(|r| r.finished_at).max().map_or("?".into(), |t| t.format("%m-%d %H:%M").to_string())
        })
        .collect();
    s.chart(
        "action_outcomes",
        &match shown.len() {
            1 => "Rows per outcome of the only actions run so far, by when it finished (queries/action_outcomes.sql)."
                .to_owned(),
            n => format!(
                "Rows per outcome of the last {n} actions runs, by when each finished (queries/action_outcomes.sql)."
            ),
        },
        charts::bars(&labels, &series, true, Scale::Count),
        "The actions runs recorded no rows.",
    );
    let table_rows = of(rows, last)
        .map(|r| {
            vec![
                r.action.clone(),
                r.outcome.clone(),
                opt_int(Some(r.rows)),
                r.http_statuses.clone().unwrap_or_else(|| "–".to_owned()),
            ]
        })
        .collect();
    s.table(
        &format!("The last actions run{on}, by action and outcome"),
        &["action", "outcome", "rows", "HTTP statuses"],
        table_rows,
    );
    s
}
