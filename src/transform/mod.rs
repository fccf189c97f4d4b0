//! Transform: the analysts' tables as Polars frames, built from what extract landed.
//!
//! - `applications` and `connected_accounts`: one row per application (as last observed) and per
//!   listed account.
//! - `content_daily`: one row per (metric, date).
//! - `wow_deltas`: the API's week-over-week comparison per day, plus the 7-day sums of the day's
//!   week and of the week before, each NULL unless all seven of its days are loaded.
//! - `weekly_totals`: ISO weeks (Monday start) with the previous week's total.
//! - `post_count_cohorts`: applications by applied month, post-count bucket and status.
//!
//! A batch of organizations is transformed at once ([`run_batch`]): every frame is built over all
//! the members' rows with a member key, grouped and joined within each member (the 7-day sums in
//! one pass over each member's sorted days, [`week_sums`]), and split by member at the end, so a
//! fleet's batch costs one plan per table, not one per organization. One organization's
//! transform ([`run`]) is a batch of one.
//!
//! Dates are handled as day numbers (days since 1970-01-01) inside the plans and the 7-day sums,
//! and cast to DATE at the end: exact integer arithmetic, no time zones involved. Timestamps are
//! UTC.

use chrono::{Datelike, NaiveDate};
use polars::prelude::*;
use thiserror::Error;

use crate::api::models::ConnectedAccount;
use crate::extract::{ContentRow, Observation};

#[derive(Debug, Error)]
pub enum TransformError {
    /// The transform panicked (a bug): the message says where.
    #[error("{0}")]
    Panicked(String),
    #[error("cohort edges must be strictly increasing positive integers, got {0:?}")]
    Edges(Vec<i64>),
    #[error("building the `{table}` frame failed: {source}")]
    Polars {
        table: &'static str,
        // Not `#[source]`: the message says it.
        source: PolarsError,
    },
}

/// An application's posts in the last 30 days over its accounts. [`check_sums`] guards the
/// input, so saturation never happens in a load; it only keeps a direct caller from panicking.
fn monthly_posts(accounts: &[ConnectedAccount]) -> i64 {
    accounts.iter().fold(0i64, |s, a| s.saturating_add(a.monthly_post_count))
}

/// Checks that every sum the tables take of the service's integers fits in 64 bits: the sum of
/// the absolute values of monthly post counts, and of each metric's `current` and `last`. If
/// those fit, every partial sum does (weekly totals, 7-day sums, cohorts), which Polars would
/// otherwise wrap silently. `Err` names the field: a data-quality error, never a panic.
pub fn check_sums(apps: &[Observation], content: &[ContentRow]) -> Result<(), String> {
    let overflow = |what: &str| {
        format!("the service's `{what}` values add up past 64-bit integers; they cannot be real counts, so nothing was loaded")
    };
    let mut posts: i64 = 0;
    for a in apps.iter().flat_map(|o| &o.app.connected_accounts) {
        posts = posts
            .checked_add(a.monthly_post_count.checked_abs().unwrap_or(i64::MAX))
            .ok_or_else(|| overflow("monthly_post_count"))?;
    }
    for metric in [crate::extract::Metric::Views, crate::extract::Metric::Likes] {
        let (mut current, mut last) = (0i64, 0i64);
        for r in content.iter().filter(|r| r.metric == metric) {
            let abs = |v: i64| v.checked_abs().unwrap_or(i64::MAX);
            current = current.checked_add(abs(r.current)).ok_or_else(|| overflow("current"))?;
            last = last.checked_add(abs(r.last)).ok_or_else(|| overflow("last"))?;
        }
    }
    Ok(())
}

/// Default bucket edges of `total_monthly_posts`: `0`, `1-4`, `5-12`, `13-30`, `31+`.
pub const DEFAULT_COHORT_EDGES: [i64; 4] = [1, 5, 13, 31];
/// [`DEFAULT_COHORT_EDGES`] as the `--cohort-edges` flag writes it (a test checks they agree).
pub const DEFAULT_COHORT_EDGES_FLAG: &str = "1,5,13,31";

/// Every table the warehouse receives, by name.
#[derive(Debug, Default)]
pub struct Frames {
    pub applications: DataFrame,
    pub connected_accounts: DataFrame,
    pub content_daily: DataFrame,
    pub wow_deltas: DataFrame,
    pub weekly_totals: DataFrame,
    pub post_count_cohorts: DataFrame,
}

impl Frames {
    /// `(name, frame)` in load order, the order of the load's table catalog.
    pub fn tables(&self) -> [(&'static str, &DataFrame); 6] {
        [
            ("applications", &self.applications),
            ("connected_accounts", &self.connected_accounts),
            ("content_daily", &self.content_daily),
            ("wow_deltas", &self.wow_deltas),
            ("weekly_totals", &self.weekly_totals),
            ("post_count_cohorts", &self.post_count_cohorts),
        ]
    }

    /// `(name, frame)` in load order.
    pub fn tables_mut(&mut self) -> [(&'static str, &mut DataFrame); 6] {
        [
            ("applications", &mut self.applications),
            ("connected_accounts", &mut self.connected_accounts),
            ("content_daily", &mut self.content_daily),
            ("wow_deltas", &mut self.wow_deltas),
            ("weekly_totals", &mut self.weekly_totals),
            ("post_count_cohorts", &mut self.post_count_cohorts),
        ]
    }
}

fn ctx(table: &'static str) -> impl FnOnce(PolarsError) -> TransformError {
    move |source| TransformError::Polars { table, source }
}

const EPOCH: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date");

fn day_number(d: NaiveDate) -> i32 {
    (d - EPOCH).num_days() as i32
}

/// A post-count bucket: label and bounds (`max` is `None` for the open top bucket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub label: String,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

/// The buckets for these edges: `no_accounts`, then `[0, e0)`, `[e0, e1)`, …, `[e_last, ∞)`.
pub fn buckets(edges: &[i64]) -> Result<Vec<Bucket>, TransformError> {
    if edges.is_empty() || edges[0] < 1 || edges.windows(2).any(|w| w[0] >= w[1]) {
        return Err(TransformError::Edges(edges.to_vec()));
    }
    let label = |lo: i64, hi: i64| if hi - lo == 1 { lo.to_string() } else { format!("{lo}-{}", hi - 1) };
    let mut out = vec![Bucket { label: "no_accounts".into(), min: None, max: None }];
    let mut lo = 0;
    for &hi in edges {
        out.push(Bucket { label: label(lo, hi), min: Some(lo), max: Some(hi - 1) });
        lo = hi;
    }
    out.push(Bucket { label: format!("{lo}+"), min: Some(lo), max: None });
    Ok(out)
}

/// The bucket of an application with these accounts and posts.
pub fn bucket_of(buckets: &[Bucket], account_count: usize, posts: i64) -> &Bucket {
    if account_count == 0 {
        return &buckets[0];
    }
    buckets[1..]
        .iter()
        .find(|b| b.min.is_some_and(|m| posts >= m) && b.max.is_none_or(|m| posts <= m))
        .unwrap_or(&buckets[0])
}

fn micros(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp_micros()
}

fn datetime_col(name: &str, values: Vec<i64>) -> PolarsResult<Column> {
    Column::new(name.into(), values).cast(&DataType::Datetime(TimeUnit::Microseconds, None))
}

fn date_col(name: &str, values: Vec<i32>) -> PolarsResult<Column> {
    Column::new(name.into(), values).cast(&DataType::Date)
}

/// The member key column of a batch's frames (a member's index), dropped by [`split`].
const MEMBER: &str = "__member";

/// One member of a batch: its applications (sorted by id, one row each) and its content rows.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub apps: &'a [Observation],
    pub content: &'a [ContentRow],
}

/// The member key of every row: member `i`'s index, repeated `n` times for each of its rows.
fn member_col(counts: impl Iterator<Item = usize>) -> Column {
    let keys: Vec<u32> = counts.enumerate().flat_map(|(i, n)| std::iter::repeat_n(i as u32, n)).collect();
    Column::new(MEMBER.into(), keys)
}

fn applications_frame(batch: &[Input]) -> PolarsResult<(DataFrame, DataFrame)> {
    let apps: Vec<&Observation> = batch.iter().flat_map(|m| m.apps).collect();
    let accounts: Vec<(i64, &ConnectedAccount)> =
        apps.iter().flat_map(|o| o.app.connected_accounts.iter().map(move |a| (o.app.id, a))).collect();
    let apps_df = DataFrame::new_infer_height(vec![
        member_col(batch.iter().map(|m| m.apps.len())),
        Column::new("id".into(), apps.iter().map(|o| o.app.id).collect::<Vec<_>>()),
        Column::new("status".into(), apps.iter().map(|o| o.app.status.to_string()).collect::<Vec<_>>()),
        Column::new("campaign_id".into(), apps.iter().map(|o| o.app.campaign_id).collect::<Vec<_>>()),
        Column::new("campaign_name".into(), apps.iter().map(|o| o.app.campaign_name.clone()).collect::<Vec<_>>()),
        Column::new("user_id".into(), apps.iter().map(|o| o.app.user_id).collect::<Vec<_>>()),
        Column::new("creator_name".into(), apps.iter().map(|o| o.app.creator_name.clone()).collect::<Vec<_>>()),
        Column::new("email".into(), apps.iter().map(|o| o.app.email.clone()).collect::<Vec<_>>()),
        Column::new("signup_source".into(), apps.iter().map(|o| o.app.signup_source.to_string()).collect::<Vec<_>>()),
        datetime_col("applied_at", apps.iter().map(|o| micros(o.app.applied_at)).collect())?,
        Column::new(
            "account_count".into(),
            apps.iter().map(|o| o.app.connected_accounts.len() as i64).collect::<Vec<_>>(),
        ),
        Column::new(
            "total_monthly_posts".into(),
            apps.iter().map(|o| monthly_posts(&o.app.connected_accounts)).collect::<Vec<_>>(),
        ),
        datetime_col("first_seen_at", apps.iter().map(|o| micros(o.observed_at)).collect())?,
        datetime_col("last_seen_at", apps.iter().map(|o| micros(o.observed_at)).collect())?,
    ])?;
    let accounts_df = DataFrame::new_infer_height(vec![
        member_col(batch.iter().map(|m| m.apps.iter().map(|o| o.app.connected_accounts.len()).sum())),
        Column::new("application_id".into(), accounts.iter().map(|(id, _)| *id).collect::<Vec<_>>()),
        Column::new("account_id".into(), accounts.iter().map(|(_, a)| a.id).collect::<Vec<_>>()),
        Column::new("provider".into(), accounts.iter().map(|(_, a)| a.provider.to_string()).collect::<Vec<_>>()),
        Column::new("username".into(), accounts.iter().map(|(_, a)| a.username.clone()).collect::<Vec<_>>()),
        Column::new(
            "monthly_post_count".into(),
            accounts.iter().map(|(_, a)| a.monthly_post_count).collect::<Vec<_>>(),
        ),
    ])?;
    Ok((apps_df, accounts_df))
}

/// `content_daily` with the member key, sorted by member, metric and date.
fn content_frame(batch: &[Input]) -> PolarsResult<DataFrame> {
    let rows: Vec<&ContentRow> = batch.iter().flat_map(|m| m.content).collect();
    DataFrame::new_infer_height(vec![
        member_col(batch.iter().map(|m| m.content.len())),
        Column::new("metric".into(), rows.iter().map(|r| r.metric.as_str()).collect::<Vec<_>>()),
        date_col("date", rows.iter().map(|r| day_number(r.date)).collect())?,
        date_col("last_date", rows.iter().map(|r| day_number(r.last_date)).collect())?,
        Column::new("current".into(), rows.iter().map(|r| r.current).collect::<Vec<_>>()),
        Column::new("last".into(), rows.iter().map(|r| r.last).collect::<Vec<_>>()),
    ])?
    .lazy()
    .sort([MEMBER, "metric", "date"], SortMultipleOptions::default())
    .collect()
}

/// `a / b` as a rate, NULL when `b` is 0 or NULL.
fn rate(a: Expr, b: Expr) -> Expr {
    when(b.clone().eq(lit(0)).or(b.clone().is_null()))
        .then(lit(NULL).cast(DataType::Float64))
        .otherwise(a.cast(DataType::Float64) / b.cast(DataType::Float64))
}

/// `wow_deltas` from `content` ([`content_frame`]: sorted by member, metric and date, one row
/// per day), in the same order: each day against its comparison day, and the 7-day sums
/// ([`week_sums`]).
fn wow_frame(content: &DataFrame) -> PolarsResult<DataFrame> {
    let (current_7d, last_7d) = week_sums(content)?;
    let mut df = content.clone();
    df.with_column(Column::new("current_7d".into(), current_7d))?;
    df.with_column(Column::new("last_7d".into(), last_7d))?;
    df.lazy()
        .with_columns([
            (col("current") - col("last")).alias("delta"),
            rate(col("current") - col("last"), col("last")).alias("pct_change"),
            (col("current_7d") - col("last_7d")).alias("delta_7d"),
            rate(col("current_7d") - col("last_7d"), col("last_7d")).alias("pct_change_7d"),
        ])
        .select([
            col(MEMBER),
            col("metric"),
            col("date"),
            col("current"),
            col("last"),
            col("delta"),
            col("pct_change"),
            col("current_7d"),
            col("last_7d"),
            col("delta_7d"),
            col("pct_change_7d"),
        ])
        .collect()
}

/// Each row's 7-day sums ([`week_sums`]): of its week, and of the week before.
type WeekSums = (Vec<Option<i64>>, Vec<Option<i64>>);

/// For each row of `content` (sorted by member, metric and date, one row per day: a day twice or
/// out of order within a member's metric is an error, not a wrong sum), the sums of `current` over
/// its week (`date − 6 … date`) and over the week before (`date − 13 … date − 7`), each `None`
/// unless all seven of its days are loaded. One pass over each member's and metric's days with a
/// sliding window: a batch's transform used to pair every row with the 14 days before it (a cross
/// join, a join and a group-by over 14 times the rows), its largest cost (BENCHMARKS.md, "The 7-day
/// sums in one pass, and one DuckDB thread for the batches"). Sums wrap as Polars' do;
/// [`check_sums`] keeps every sum of a load within 64 bits.
fn week_sums(content: &DataFrame) -> PolarsResult<WeekSums> {
    let missing = |name: &str| PolarsError::ComputeError(format!("`content_daily` has a NULL `{name}`").into());
    let members: Vec<Option<u32>> = content.column(MEMBER)?.u32()?.iter().collect();
    let metrics: Vec<Option<&str>> = content.column("metric")?.str()?.iter().collect();
    let days = content.column("date")?.cast(&DataType::Int32)?;
    let days: Vec<i64> =
        days.i32()?.iter().map(|d| d.map(i64::from).ok_or_else(|| missing("date"))).collect::<PolarsResult<_>>()?;
    let current: Vec<i64> = content
        .column("current")?
        .i64()?
        .iter()
        .map(|v| v.ok_or_else(|| missing("current")))
        .collect::<PolarsResult<_>>()?;
    let n = days.len();
    let (mut week, mut before) = (vec![None; n], vec![None; n]);
    // `sums[i]`: the sum of `current` over the rows before row `i` of the group.
    let mut sums: Vec<i64> = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && members[end] == members[start] && metrics[end] == metrics[start] {
            end += 1;
        }
        // The window counts rows: each day must come once, after the one before.
        if let Some(i) = (start + 1..end).find(|&i| days[i] <= days[i - 1]) {
            let day = EPOCH + chrono::Duration::days(days[i]);
            let metric = metrics[i].unwrap_or("NULL");
            return Err(PolarsError::ComputeError(
                format!("`content_daily` is not one row per metric and day in date order: `{metric}` on {day}").into(),
            ));
        }
        sums.clear();
        sums.push(0);
        for v in &current[start..end] {
            sums.push(sums[sums.len() - 1].wrapping_add(*v));
        }
        let sum = |from: usize, to: usize| sums[to - start].wrapping_sub(sums[from - start]);
        // The rows of the week are `lo..=i`; of the week before, `from..to`.
        let (mut lo, mut from, mut to) = (start, start, start);
        for i in start..end {
            let day = days[i];
            while days[lo] < day - 6 {
                lo += 1;
            }
            while days[from] < day - 13 {
                from += 1;
            }
            while to < end && days[to] <= day - 7 {
                to += 1;
            }
            if i + 1 - lo == 7 {
                week[i] = Some(sum(lo, i + 1));
            }
            if to - from == 7 {
                before[i] = Some(sum(from, to));
            }
        }
        start = end;
    }
    Ok((week, before))
}

fn weekly_frame(content: &DataFrame) -> PolarsResult<DataFrame> {
    // 1970-01-01 was a Thursday: (day + 3) mod 7 is days since Monday.
    let day = col("date").cast(DataType::Int32);
    let since_monday = ((day.clone() + lit(3)) % lit(7) + lit(7)) % lit(7);
    let weeks = content
        .clone()
        .lazy()
        .with_column((day - since_monday).alias("week"))
        .group_by([col(MEMBER), col("metric"), col("week")])
        .agg([col("current").sum().cast(DataType::Int64).alias("total"), col("current").count().alias("days")]);
    let previous = weeks.clone().select([
        col(MEMBER),
        col("metric"),
        (col("week") + lit(7)).alias("week"),
        col("total").alias("previous_total"),
    ]);
    weeks
        .join(
            previous,
            [col(MEMBER), col("metric"), col("week")],
            [col(MEMBER), col("metric"), col("week")],
            JoinArgs::new(JoinType::Left),
        )
        .with_columns([
            col("week").cast(DataType::Date).alias("week_start"),
            (col("total") - col("previous_total")).alias("delta"),
            rate(col("total") - col("previous_total"), col("previous_total")).alias("pct_change"),
            col("days").eq(lit(7)).alias("complete"),
        ])
        .select([
            col(MEMBER),
            col("metric"),
            col("week_start"),
            col("total"),
            col("previous_total"),
            col("delta"),
            col("pct_change"),
            col("complete"),
        ])
        .sort([MEMBER, "metric", "week_start"], SortMultipleOptions::default())
        .collect()
}

fn cohorts_frame(batch: &[Input], buckets: &[Bucket]) -> PolarsResult<DataFrame> {
    let apps: Vec<&Observation> = batch.iter().flat_map(|m| m.apps).collect();
    let mut month = vec![];
    let mut bucket = vec![];
    let mut bmin = vec![];
    let mut bmax = vec![];
    for o in &apps {
        let a = &o.app;
        let d = a.applied_at.date_naive();
        month.push(day_number(NaiveDate::from_ymd_opt(d.year(), d.month(), 1).expect("first of month")));
        let posts = monthly_posts(&a.connected_accounts);
        let b = bucket_of(buckets, a.connected_accounts.len(), posts);
        bucket.push(b.label.clone());
        bmin.push(b.min);
        bmax.push(b.max);
    }
    DataFrame::new_infer_height(vec![
        member_col(batch.iter().map(|m| m.apps.len())),
        date_col("applied_month", month)?,
        Column::new("bucket".into(), bucket),
        Column::new("bucket_min".into(), bmin),
        Column::new("bucket_max".into(), bmax),
        Column::new("status".into(), apps.iter().map(|o| o.app.status.to_string()).collect::<Vec<_>>()),
        Column::new("user_id".into(), apps.iter().map(|o| o.app.user_id).collect::<Vec<_>>()),
        Column::new("accounts".into(), apps.iter().map(|o| o.app.connected_accounts.len() as i64).collect::<Vec<_>>()),
        Column::new("posts".into(), apps.iter().map(|o| monthly_posts(&o.app.connected_accounts)).collect::<Vec<_>>()),
    ])?
    .lazy()
    .group_by([col(MEMBER), col("applied_month"), col("bucket"), col("bucket_min"), col("bucket_max"), col("status")])
    .agg([
        len().cast(DataType::Int64).alias("applications"),
        col("user_id").n_unique().cast(DataType::Int64).alias("creators"),
        col("accounts").sum().cast(DataType::Int64).alias("accounts"),
        col("posts").sum().cast(DataType::Int64).alias("total_monthly_posts"),
    ])
    .sort_by_exprs(
        [col(MEMBER), col("applied_month"), col("bucket_min"), col("status")],
        SortMultipleOptions::default().with_nulls_last(false),
    )
    .collect()
}

/// A batch's frame split by member (its rows are sorted by member): member `i`'s rows, without
/// the member key, for each of `members` (an empty frame of the schema for a member without rows).
fn split(df: &DataFrame, members: usize) -> PolarsResult<Vec<DataFrame>> {
    let keys = df.column(MEMBER)?.u32()?;
    let rest = df.drop(MEMBER)?;
    let mut bounds = vec![0usize; members + 1];
    for key in keys.iter().flatten() {
        let i = key as usize;
        if i >= members {
            return Err(PolarsError::ComputeError(format!("member key {i} out of {members}").into()));
        }
        bounds[i + 1] += 1;
    }
    for i in 0..members {
        bounds[i + 1] += bounds[i];
    }
    Ok((0..members).map(|i| rest.slice(bounds[i] as i64, bounds[i + 1] - bounds[i])).collect())
}

/// Builds every frame from one organization's extracted data: a batch of one.
pub fn run(apps: &[Observation], content: &[ContentRow], cohort_edges: &[i64]) -> Result<Frames, TransformError> {
    let mut frames = run_batch(&[Input { apps, content }], cohort_edges)?;
    Ok(frames.pop().expect("a batch of one has one member's frames"))
}

/// Builds every frame of a batch of organizations together, one plan per table, and returns
/// each member's frames in the batch's order: the same frames as [`run`] on each member alone.
/// Each member's applications must be sorted by id; a member's rows never meet another's
/// (every group and join is within a member).
pub fn run_batch(batch: &[Input], cohort_edges: &[i64]) -> Result<Vec<Frames>, TransformError> {
    let buckets = buckets(cohort_edges)?;
    let n = batch.len();
    // Each frame's time, for the debug log.
    let mut laps = crate::progress::Laps::start();
    let (applications, connected_accounts) = applications_frame(batch).map_err(ctx("applications"))?;
    let applications_ms = laps.lap();
    let content_daily = content_frame(batch).map_err(ctx("content_daily"))?;
    let content_ms = laps.lap();
    let wow_deltas = wow_frame(&content_daily).map_err(ctx("wow_deltas"))?;
    let wow_ms = laps.lap();
    let weekly_totals = weekly_frame(&content_daily).map_err(ctx("weekly_totals"))?;
    let weekly_ms = laps.lap();
    let post_count_cohorts = cohorts_frame(batch, &buckets).map_err(ctx("post_count_cohorts"))?;
    let cohorts_ms = laps.lap();
    tracing::debug!(members = n, applications_ms, content_ms, wow_ms, weekly_ms, cohorts_ms, "transform stages (ms)");
    let split_all = |df: &DataFrame, table: &'static str| split(df, n).map_err(ctx(table)).map(Vec::into_iter);
    let mut applications = split_all(&applications, "applications")?;
    let mut connected_accounts = split_all(&connected_accounts, "connected_accounts")?;
    let mut content_daily = split_all(&content_daily, "content_daily")?;
    let mut wow_deltas = split_all(&wow_deltas, "wow_deltas")?;
    let mut weekly_totals = split_all(&weekly_totals, "weekly_totals")?;
    let mut post_count_cohorts = split_all(&post_count_cohorts, "post_count_cohorts")?;
    let mut next = || -> Option<Frames> {
        Some(Frames {
            applications: applications.next()?,
            connected_accounts: connected_accounts.next()?,
            content_daily: content_daily.next()?,
            wow_deltas: wow_deltas.next()?,
            weekly_totals: weekly_totals.next()?,
            post_count_cohorts: post_count_cohorts.next()?,
        })
    };
    Ok(std::iter::from_fn(&mut next).take(n).collect())
}

#[cfg(test)]
mod tests;
