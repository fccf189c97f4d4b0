//! The applications section (`applications_by_status`, `status_changes`, `pending_queue`).

use std::collections::BTreeSet;

use chrono::NaiveDate;
use serde_json::json;

use super::html::{int_text, opt_int, opt_json, Section};
use crate::report::charts::{self, Scale, Series, BLUE, GREEN, ORANGE, PALETTE, PURPLE, RED};
use crate::report::data::{stamp, Answers};
use crate::report::rows::Typed;

fn status_color(status: &str, i: usize) -> plotters::style::RGBColor {
    match status {
        "accepted" => GREEN,
        "rejected" => RED,
        "pending" => BLUE,
        _ => [ORANGE, PURPLE, PALETTE[5]][i % 3],
    }
}

pub(super) fn section(t: &Typed, a: &Answers) -> Section {
    let mut s = Section::default();
    let by_status = &t.applications_by_status;
    let total: i64 = by_status.iter().map(|r| r.applications).sum();
    let pending_now = by_status.iter().find(|r| r.status == "pending").map_or(0, |r| r.applications);
    s.figure(
        super::key::APPLICATIONS_TOTAL,
        "Applications, as of the last load".into(),
        int_text(total),
        json!(total),
        None,
    );
    s.figure(
        super::key::APPLICATIONS_PENDING,
        "Pending applications, as of the last load".into(),
        int_text(pending_now),
        json!(pending_now),
        None,
    );
    let statuses: Vec<String> = by_status.iter().map(|r| r.status.clone()).collect();
    s.chart(
        "applications_by_status",
        "Applications by status, as of the last load (queries/applications_by_status.sql).",
        charts::bars(
            &statuses,
            &[Series::new("applications", BLUE, by_status.iter().map(|r| Some(r.applications as f64)).collect())],
            false,
            Scale::Count,
        ),
        "No applications loaded yet.",
    );

    let changes = &t.status_changes;
    // Every week from the first with a change to the last, those without one included.
    let seen: BTreeSet<NaiveDate> = changes.iter().map(|r| r.week_start).collect();
    let weeks: Vec<NaiveDate> = match (seen.first(), seen.last()) {
        (Some(first), Some(last)) => {
            (0..).map(|k| *first + chrono::Duration::weeks(k)).take_while(|w| w <= last).collect()
        }
        _ => vec![],
    };
    let to: BTreeSet<&str> = changes.iter().map(|r| r.to_status.as_str()).collect();
    let series: Vec<Series> = to
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let values = weeks
                .iter()
                .map(|w| changes.iter().find(|r| r.week_start == *w && r.to_status == *st).map(|r| r.changes as f64))
                .collect();
            Series::new(format!("to {st}"), status_color(st, i), values)
        })
        .collect();
    let changed: i64 = changes.iter().map(|r| r.changes).sum();
    let days = a.param("status_changes", "days");
    s.figure(
        "status_changes",
        format!("Status changes, the last {days} days of history"),
        int_text(changed),
        json!(changed),
        None,
    );
    s.heading("Status changes over time");
    s.chart(
        "status_changes_weekly",
        &format!(
            "Status changes per ISO week (weeks starting Monday), by the status changed to, from the SCD2 history \
             (application_status_history), the last {days} days before the newest change (queries/status_changes.sql)."
        ),
        charts::bars(
            &weeks.iter().map(|w| w.format("%b %-d").to_string()).collect::<Vec<_>>(),
            &series,
            true,
            Scale::Count,
        ),
        "No status change recorded yet: the history shows changes from the second sync on.",
    );

    s.heading("Pending queue");
    let queue = &t.pending_queue;
    let (under, mid, over) =
        queue.iter().fold((0, 0, 0), |(u, m, o), r| (u + r.under_7d, m + r.from_7_to_30d, o + r.over_30d));
    let oldest = queue.iter().map(|r| r.oldest_applied_at).min();
    s.figure(
        "pending_over_30d",
        "Pending for over 30 days (to the last load)".into(),
        int_text(over),
        json!(over),
        Some(format!("of {} pending in {} campaigns", int_text(under + mid + over), queue.len())),
    );
    s.figure(
        "pending_oldest_applied_at",
        "Oldest pending application applied (UTC)".into(),
        oldest.map_or("–".into(), stamp),
        opt_json(oldest.map(|t| t.to_rfc3339())),
        None,
    );
    s.chart(
        "pending_age",
        "Pending applications by how long they have waited, counted to the last load (queries/pending_queue.sql).",
        charts::bars(
            &["under 7 days".into(), "7 to 30 days".into(), "over 30 days".into()],
            &[Series::new("pending", BLUE, vec![Some(under as f64), Some(mid as f64), Some(over as f64)])],
            false,
            Scale::Count,
        ),
        "No application is pending: the queue is empty.",
    );
    if !queue.is_empty() {
        let rows = queue
            .iter()
            .take(5)
            .map(|r| {
                vec![
                    r.campaign_name.clone().unwrap_or_else(|| int_text(r.campaign_id)),
                    opt_int(Some(r.pending)),
                    opt_int(Some(r.under_7d)),
                    opt_int(Some(r.from_7_to_30d)),
                    opt_int(Some(r.over_30d)),
                    r.median_age_days.map_or("–".into(), |d| format!("{d:.1}")),
                ]
            })
            .collect();
        s.table(
            "The campaigns with the most pending applications",
            &["campaign", "pending", "< 7 days", "7–30 days", "> 30 days", "median age (days)"],
            rows,
        );
    }
    s
}
