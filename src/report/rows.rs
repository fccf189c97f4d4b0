//! The named queries' rows as the page reads them: a struct per query, whose fields are the
//! query's columns (its `-- columns:` header in `queries/NAME.sql`). A row with a column missing,
//! a column the struct does not know, or NULL where the field is not an `Option` is an error that
//! names the query: a renamed column never reads as a default.
//!
//! A field is an `Option` exactly where the data may hold NULL: the catalog's nullable columns
//! (`runs.finished_at`, `wow_deltas.pct_change`, …) and what the query itself can make NULL (a
//! `LEFT JOIN`'s missing side, a rate over no decision).

// A row struct has every column of its query, so that a row is checked whole; the page reads
// only some of them.
#![allow(dead_code)]

use chrono::{DateTime, NaiveDate, Utc};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::data::{Answers, Row};
use crate::query::QueryError;

/// `run_health`: the last loaded runs, newest first.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunHealth {
    pub run_id: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub finished_at: Option<DateTime<Utc>>,
    pub status: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub duration_s: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub requests: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub retries: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub rate_limited: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub pacing_wait_s: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub status_changes: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub warnings: Option<i64>,
    pub parquet_exported: bool,
    /// `quick` or `full` (the query reads a run loaded before the mode was recorded as full).
    pub sync_mode: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub pages_verified: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub counts_agree: Option<bool>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_reconcile_at: Option<DateTime<Utc>>,
}

impl RunHealth {
    /// Whether the run was a full sync (a reconcile).
    pub fn full(&self) -> bool {
        self.sync_mode == "full"
    }

    /// The run's mode as the page names it.
    pub fn mode(&self) -> &str {
        &self.sync_mode
    }
}

/// `wow_latest`: the last loaded days of views and likes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WowDay {
    pub metric: String,
    pub date: NaiveDate,
    pub current: i64,
    pub last: i64,
    pub delta: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub pct_change: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub current_7d: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_7d: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub delta_7d: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub pct_change_7d: Option<f64>,
}

/// `weekly_trend`: views and likes per ISO week.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Week {
    pub week_start: NaiveDate,
    pub views: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub views_delta: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub views_pct_change: Option<f64>,
    /// NULL when the week has no likes row (the query's `LEFT JOIN`).
    #[serde(deserialize_with = "Option::deserialize")]
    pub likes: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub likes_delta: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub likes_pct_change: Option<f64>,
    pub complete: bool,
}

impl Week {
    /// The week's total and its change on the week before, of `metric` (`views` or `likes`).
    pub fn of(&self, metric: &str) -> (Option<i64>, Option<f64>) {
        match metric {
            "views" => (Some(self.views), self.views_pct_change),
            _ => (self.likes, self.likes_pct_change),
        }
    }
}

/// `movers`: the days whose 7-day sums changed most.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mover {
    pub metric: String,
    pub date: NaiveDate,
    #[serde(deserialize_with = "Option::deserialize")]
    pub current_7d: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_7d: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub delta_7d: Option<i64>,
    /// Never NULL: the query keeps only the days that have one.
    pub pct_change_7d: f64,
}

/// `applications_by_status`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCount {
    pub status: String,
    pub applications: i64,
    pub creators: i64,
    pub campaigns: i64,
    pub oldest_applied_at: DateTime<Utc>,
    pub newest_applied_at: DateTime<Utc>,
}

/// `status_changes`, counted per ISO week and new status by the page's outer query.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeeklyChanges {
    pub week_start: NaiveDate,
    pub to_status: String,
    pub changes: i64,
}

/// `pending_queue`: pending applications per campaign, by age.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingCampaign {
    pub campaign_id: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub campaign_name: Option<String>,
    pub pending: i64,
    pub under_7d: i64,
    pub from_7_to_30d: i64,
    pub over_30d: i64,
    pub oldest_applied_at: DateTime<Utc>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub median_age_days: Option<f64>,
}

/// `cohort_acceptance`: per post-count bucket.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub bucket: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub bucket_min: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub bucket_max: Option<i64>,
    pub applications: i64,
    pub creators: i64,
    pub accepted: i64,
    pub rejected: i64,
    pub pending: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub acceptance_rate: Option<f64>,
}

/// `cohort_by_month`: per applied month and bucket.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonthBucket {
    pub applied_month: NaiveDate,
    pub bucket: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub bucket_min: Option<i64>,
    pub applications: i64,
    pub accepted: i64,
    pub rejected: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub acceptance_rate: Option<f64>,
}

/// `action_outcomes`: rows per actions run, action and outcome.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionOutcome {
    pub run_id: String,
    pub finished_at: DateTime<Utc>,
    pub action: String,
    pub outcome: String,
    pub rows: i64,
    /// NULL when no row of the group had an answer.
    #[serde(deserialize_with = "Option::deserialize")]
    pub http_statuses: Option<String>,
}

/// Every named query's rows, typed.
#[derive(Clone, Debug, Default)]
pub struct Typed {
    pub run_health: Vec<RunHealth>,
    pub wow_latest: Vec<WowDay>,
    pub weekly_trend: Vec<Week>,
    pub movers: Vec<Mover>,
    pub applications_by_status: Vec<StatusCount>,
    pub status_changes: Vec<WeeklyChanges>,
    pub pending_queue: Vec<PendingCampaign>,
    pub cohort_acceptance: Vec<Bucket>,
    pub cohort_by_month: Vec<MonthBucket>,
    pub action_outcomes: Vec<ActionOutcome>,
}

impl Typed {
    /// Reads every answer as its query's rows; the first row that does not fit is an error
    /// naming the query and the row.
    pub fn of(answers: &Answers) -> Result<Typed, QueryError> {
        Ok(Typed {
            run_health: read(answers, "run_health")?,
            wow_latest: read(answers, "wow_latest")?,
            weekly_trend: read(answers, "weekly_trend")?,
            movers: read(answers, "movers")?,
            applications_by_status: read(answers, "applications_by_status")?,
            status_changes: read(answers, "status_changes")?,
            pending_queue: read(answers, "pending_queue")?,
            cohort_acceptance: read(answers, "cohort_acceptance")?,
            cohort_by_month: read(answers, "cohort_by_month")?,
            action_outcomes: read(answers, "action_outcomes")?,
        })
    }
}

/// The rows of the named query `name`, as `T`.
fn read<T: DeserializeOwned>(answers: &Answers, name: &str) -> Result<Vec<T>, QueryError> {
    answers
        .rows(name)
        .iter()
        .enumerate()
        .map(|(i, row): (usize, &Row)| {
            serde_json::from_value(serde_json::Value::Object(row.clone())).map_err(|e| {
                QueryError::Db(format!(
                    "the named query `{name}` gave a row the report cannot read (row {}): {e}; the query and the report disagree on its columns",
                    i + 1
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: serde_json::Value) -> Row {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_missing_renamed_or_null_column_is_an_error_naming_the_query() {
        let good = json!({"week_start": "2026-11-16", "to_status": "accepted", "changes": 3});
        let parse = |v: serde_json::Value| serde_json::from_value::<WeeklyChanges>(serde_json::Value::Object(row(v)));
        assert_eq!(parse(good.clone()).unwrap().changes, 3);
        let mut renamed = good.clone();
        renamed.as_object_mut().unwrap().remove("to_status");
        renamed.as_object_mut().unwrap().insert("new_status".into(), json!("accepted"));
        assert!(parse(renamed).is_err(), "a renamed column");
        let mut null = good;
        null["changes"] = serde_json::Value::Null;
        assert!(parse(null).is_err(), "NULL where the page takes a number");
        // An `Option` column is still required: missing is not NULL.
        let missing = json!({"bucket": "0", "bucket_min": 0, "applications": 1, "creators": 1, "accepted": 1,
                             "rejected": 0, "pending": 0, "acceptance_rate": 1.0});
        assert!(serde_json::from_value::<Bucket>(missing).unwrap_err().to_string().contains("bucket_max"));
    }
}
