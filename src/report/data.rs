//! What one organization's page shows, read with the named queries (`queries/*.sql`): their rows
//! exactly as `creator-etl query NAME --format json` prints them, and the figures derived from
//! those rows. Nothing here computes a number the named queries do not hold.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

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
    "SELECT organization, CAST(date_trunc('week', CAST(changed_at AS TIMESTAMP)) AS DATE) AS week_start, to_status, \
     count(*) AS changes FROM (\n{sql}\n) AS q GROUP BY ALL ORDER BY organization, week_start, to_status",
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
    /// Asks the queries of [`ASKED`] named in `only` about the organizations `orgs` at once (one
    /// query each: they are written with `organization` as a key), and splits the rows by
    /// organization, without it: each organization's rows are what `creator-etl query NAME
    /// --org ORG --format json` prints. One organization's own warehouse answers as
    /// [`query::OWN`].
    pub fn ask(
        keyed: &query::Keyed,
        source: &Source,
        only: &[&str],
        orgs: &[String],
    ) -> Result<BTreeMap<String, Answers>, QueryError> {
        let conn = keyed.select(orgs)?;
        let mut all: BTreeMap<String, Answers> = orgs.iter().map(|o| (o.clone(), Answers::default())).collect();
        for (name, params) in ASKED.into_iter().filter(|(name, _)| only.contains(name)) {
            let named = query::named(name).expect("the page asks named queries");
            let aggregate = AGGREGATED.iter().find(|(n, _)| *n == name).map(|(_, outer)| *outer);
            let sql = match aggregate {
                Some(outer) => outer.replace("{sql}", named.trim().trim_end_matches(';')),
                None => named.to_owned(),
            };
            let params: Vec<(String, String)> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let config =
                QueryConfig { source: source.clone(), name: name.to_owned(), sql, params, format: Format::Json };
            let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
            for mut row in query::json_rows(&query::execute(conn, &config)?)? {
                let Some(Value::String(org)) = row.remove(crate::load::catalog::ORGANIZATION) else {
                    return Err(QueryError::Db(format!("`{name}` gave a row without its organization")));
                };
                rows.entry(org).or_default().push(row);
            }
            let params: BTreeMap<String, String> = config.params.into_iter().collect();
            for (org, answers) in all.iter_mut() {
                let rows = rows.remove(org).unwrap_or_default();
                answers.0.insert(name, Answer { params: params.clone(), aggregate, rows });
            }
        }
        Ok(all)
    }

    pub fn rows(&self, name: &str) -> &[Row] {
        self.0.get(name).map_or(&[], |a| &a.rows)
    }

    /// The value the page gave parameter `key` of query `name`.
    pub fn param(&self, name: &str, key: &str) -> &str {
        self.0.get(name).and_then(|a| a.params.get(key)).map_or("", String::as_str)
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

    #[test]
    fn iso_weeks_and_durations_read_as_labelled() {
        assert_eq!(iso_week(NaiveDate::from_ymd_opt(2026, 11, 16).unwrap()), "2026-W47 (Nov 16 – Nov 22)");
        assert_eq!(iso_week(NaiveDate::from_ymd_opt(2024, 12, 30).unwrap()), "2025-W01 (Dec 30 – Jan 5)");
        assert_eq!(ago(std::time::Duration::from_secs(59)), "less than a minute");
        assert_eq!(ago(std::time::Duration::from_secs(3 * 3600 + 720)), "3 h 12 min");
    }
}
