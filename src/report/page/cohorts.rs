//! The cohorts section (`cohort_acceptance`, `cohort_by_month`).

use std::collections::BTreeMap;

use chrono::NaiveDate;

use super::html::{int_text, opt_int, opt_json, rate_text, Section};
use crate::report::charts::{self, Scale, Series, GREEN};
use crate::report::data::Answers;
use crate::report::rows::Typed;

pub(super) fn section(t: &Typed, a: &Answers) -> Section {
    let mut s = Section::default();
    let buckets = &t.cohort_acceptance;
    let accepted: i64 = buckets.iter().map(|r| r.accepted).sum();
    let rejected: i64 = buckets.iter().map(|r| r.rejected).sum();
    let overall = (accepted + rejected > 0).then(|| accepted as f64 / (accepted + rejected) as f64);
    s.figure(
        super::key::ACCEPTANCE_RATE,
        "Acceptance rate, every application decided so far".into(),
        rate_text(overall),
        opt_json(overall),
        Some(format!("{} accepted, {} rejected", int_text(accepted), int_text(rejected))),
    );
    s.chart(
        "acceptance_by_cohort",
        "Acceptance rate, accepted / (accepted + rejected), by the creator's monthly post count (queries/cohort_acceptance.sql).",
        charts::bars(
            &buckets.iter().map(|r| r.bucket.clone()).collect::<Vec<_>>(),
            &[Series::new("acceptance rate", GREEN, buckets.iter().map(|r| r.acceptance_rate).collect())],
            false,
            Scale::Percent,
        ),
        &if accepted + rejected > 0 {
            format!(
                "No application has been accepted: all {} decided so far were rejected, 0 % in every cohort.",
                int_text(rejected)
            )
        } else {
            "No application has been accepted or rejected yet: no acceptance rate by post count.".to_owned()
        },
    );
    if !buckets.is_empty() {
        let rows = buckets
            .iter()
            .map(|r| {
                vec![
                    r.bucket.clone(),
                    opt_int(Some(r.applications)),
                    opt_int(Some(r.creators)),
                    opt_int(Some(r.accepted)),
                    opt_int(Some(r.rejected)),
                    opt_int(Some(r.pending)),
                    rate_text(r.acceptance_rate),
                ]
            })
            .collect();
        s.table(
            "Applications per monthly-post-count cohort",
            &["posts per month", "applications", "creators", "accepted", "rejected", "pending", "acceptance"],
            rows,
        );
    }
    // Per month of application: the grid's cells summed over the buckets.
    let mut months: BTreeMap<NaiveDate, (i64, i64)> = BTreeMap::new();
    for r in &t.cohort_by_month {
        let e = months.entry(r.applied_month).or_default();
        e.0 += r.accepted;
        e.1 += r.rejected;
    }
    let labels: Vec<String> = months.keys().map(|m| m.format("%Y-%m").to_string()).collect();
    let rates: Vec<Option<f64>> =
        months.values().map(|(acc, rej)| (acc + rej > 0).then(|| *acc as f64 / (acc + rej) as f64)).collect();
    s.heading("By month of application");
    s.chart(
        "acceptance_by_month",
        &format!(
            "Acceptance rate by month of application, the {} months up to the newest month with applications (queries/cohort_by_month.sql, summed over the cohorts).",
            a.param("cohort_by_month", "months")
        ),
        charts::bars(&labels, &[Series::new("acceptance rate", GREEN, rates)], false, Scale::Percent),
        if months.values().any(|(acc, rej)| acc + rej > 0) {
            "No application of these months has been accepted: every one decided was rejected, 0 % in each month."
        } else {
            "No month has an accepted or rejected application yet."
        },
    );
    s
}
