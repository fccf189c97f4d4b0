//! The views and likes section (`wow_latest`, `weekly_trend`, `movers`).

use super::html::{capital, change_text, day, opt_int, opt_json, Section};
use crate::report::charts::{self, Scale, Series, BLUE, ORANGE, PURPLE};
use crate::report::data::{iso_week, Answers};
use crate::report::rows::{Typed, Week, WowDay};

/// The days of one metric of `wow_latest`, oldest first.
fn metric_days<'a>(t: &'a Typed, metric: &str) -> Vec<&'a WowDay> {
    let mut rows: Vec<&WowDay> = t.wow_latest.iter().filter(|r| r.metric == metric).collect();
    rows.sort_by_key(|r| r.date);
    rows
}

/// A full week's change on the week before (`weekly_trend`'s `{metric}_pct_change`), only when
/// the week before is full too: a change on a partly loaded week would read as a jump.
/// Otherwise why there is none.
pub(super) fn full_week_change(all: &[Week], week: &Week, metric: &str) -> Result<f64, String> {
    let not_full = || "the week before is not fully loaded".to_owned();
    let before = all.iter().find(|r| r.week_start == week.week_start - chrono::Duration::days(7));
    match before {
        Some(b) if b.complete => week.of(metric).1.ok_or_else(|| format!("the week before had no {metric}")),
        _ => Err(not_full()),
    }
}

pub(super) fn section(t: &Typed, a: &Answers) -> Section {
    let mut s = Section::default();
    let all = &t.weekly_trend;
    let weeks: Vec<&Week> = all.iter().filter(|r| r.complete).collect();
    match weeks.last() {
        Some(w) => {
            let label = iso_week(w.week_start);
            for metric in ["views", "likes"] {
                let total = w.of(metric).0;
                let change = full_week_change(all, w, metric);
                s.figure(
                    &super::key::last_full_week(metric),
                    format!("{}, ISO week {label}", capital(metric)),
                    opt_int(total),
                    opt_json(total),
                    Some(match &change {
                        Ok(c) => format!("{} on the week before", change_text(Some(*c))),
                        Err(why) => why.clone(),
                    }),
                );
                let change = change.ok();
                s.figure(
                    &super::key::wow_change(metric),
                    format!("{} week over week, ISO week {label}", capital(metric)),
                    change_text(change),
                    opt_json(change),
                    None,
                );
            }
        }
        None => s.sentence("No full ISO week (Monday to Sunday, every day loaded) of content yet: no weekly totals."),
    }
    for metric in ["views", "likes"] {
        let rows = metric_days(t, metric);
        let x: Vec<String> = rows.iter().map(|r| day(r.date)).collect();
        let range = match (rows.first(), rows.last()) {
            (Some(a), Some(b)) => format!("{} to {}", a.date, b.date),
            _ => String::new(),
        };
        s.chart(
            &format!("{metric}_daily"),
            &format!(
                "{} per day (24-hour statistics) and the 7-day average, {range} (the {} days up to the newest loaded day).",
                capital(metric),
                a.param("wow_latest", "days")
            ),
            charts::lines(
                &x,
                &[
                    Series::new(
                        format!("{metric} per day"),
                        if metric == "views" { BLUE } else { PURPLE },
                        rows.iter().map(|r| Some(r.current as f64)).collect(),
                    ),
                    Series::new(
                        "7-day average",
                        ORANGE,
                        rows.iter().map(|r| r.current_7d.map(|v| v as f64 / 7.0)).collect(),
                    ),
                ],
                Scale::Count,
            ),
            &format!("No daily {metric} loaded yet: the organization has no content statistics in the warehouse."),
        );
    }
    if !weeks.is_empty() {
        let rows = weeks
            .iter()
            .rev()
            .take(6)
            .map(|w| {
                vec![
                    iso_week(w.week_start),
                    opt_int(Some(w.views)),
                    change_text(full_week_change(all, w, "views").ok()),
                    opt_int(w.likes),
                    change_text(full_week_change(all, w, "likes").ok()),
                ]
            })
            .collect();
        s.heading("Full ISO weeks");
        s.table(
            "The last full ISO weeks, newest first, with the change on the week before when that week is full too (queries/weekly_trend.sql)",
            &["ISO week", "views", "change", "likes", "change"],
            rows,
        );
    }
    s.heading("Biggest movers");
    if t.movers.is_empty() {
        s.sentence("No day of the last 28 loaded days has a week before to compare with yet.");
    } else {
        let rows = t
            .movers
            .iter()
            .map(|r| {
                vec![
                    r.metric.clone(),
                    format!("{} to {}", r.date - chrono::Duration::days(6), r.date),
                    opt_int(r.current_7d),
                    opt_int(r.last_7d),
                    change_text(Some(r.pct_change_7d)),
                ]
            })
            .collect();
        s.table(
            "The 7-day sums that changed most on the week before, in the last 28 loaded days (queries/movers.sql)",
            &["metric", "7 days", "sum", "week before", "change"],
            rows,
        );
    }
    s
}
