//! Reading the warehouse back into typed values: the previous sync's lists for a quick sync,
//! the content, the applications a quick run keeps, and the ledger's content cursor. Every value
//! is read as the type the code needs; a value that does not fit stops the run, naming the
//! table, the column and the value, instead of being read as a default.

use chrono::{DateTime, NaiveDate, Utc};
use duckdb::types::{TimeUnit, Type, ValueRef};
use duckdb::{Connection, OptionalExt};

use super::LoadError;
use crate::api::models::{Application, ApplicationStatus, ConnectedAccount, Provider, SignupSource};
use crate::extract::{ContentRow, Metric, Observation, Snapshot};
use crate::load::catalog::ORGANIZATION;

/// One row read back from a warehouse table. Each getter reads the column as the type the code
/// needs and names the table, the column and the value when it cannot: a damaged warehouse
/// stops the run instead of being read as defaults (an unreadable date is not 1970-01-01).
struct Cells<'a, 'stmt> {
    table: &'static str,
    row: &'a duckdb::Row<'stmt>,
    /// The result's column names, in order: a column is found by its place (duckdb's lookup by
    /// name lowercases the name into a new string at every call).
    columns: &'a [String],
}

impl Cells<'_, '_> {
    fn unreadable(&self, column: &str, problem: impl Into<String>) -> LoadError {
        LoadError::Unreadable {
            table: self.table.to_owned(),
            column: column.to_owned(),
            problem: problem.into(),
            warehouse: None,
        }
    }

    /// The column's place in the result.
    fn at(&self, column: &str) -> Result<usize, LoadError> {
        // Case aside, as duckdb's own lookup (DuckDB names a column as its table declares it).
        let at = self.columns.iter().position(|c| c.eq_ignore_ascii_case(column));
        at.ok_or_else(|| self.unreadable(column, "is not in the result"))
    }

    /// A value duckdb converts itself: integers, text, and `Option`s of them for nullable columns.
    fn get<T: duckdb::types::FromSql>(&self, column: &str) -> Result<T, LoadError> {
        self.row.get(self.at(column)?).map_err(|e| match e {
            duckdb::Error::InvalidColumnType(_, _, Type::Null) => self.unreadable(column, "is NULL"),
            e => self.unreadable(column, format!("cannot be read: {e}")),
        })
    }

    /// The column's value, `None` for NULL.
    fn value(&self, column: &str) -> Result<Option<ValueRef<'_>>, LoadError> {
        match self.row.get_ref(self.at(column)?) {
            Ok(ValueRef::Null) => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(self.unreadable(column, format!("cannot be read: {e}"))),
        }
    }

    /// A `DATE`, read as DuckDB's day number. DuckDB's `infinity` and dates beyond chrono's
    /// range are errors here; duckdb's own chrono conversion would panic on them.
    fn date(&self, column: &str) -> Result<NaiveDate, LoadError> {
        match self.value(column)? {
            None => Err(self.unreadable(column, "is NULL")),
            Some(ValueRef::Date32(days)) => {
                DateTime::from_timestamp(i64::from(days) * 86_400, 0).map(|t| t.date_naive()).ok_or_else(|| {
                    self.unreadable(column, format!("holds {}, which is not a calendar date", day_text(days)))
                })
            }
            Some(other) => Err(self.unreadable(column, format!("holds {}, not a DATE", describe(&other)))),
        }
    }

    /// A `TIMESTAMPTZ` (or `TIMESTAMP`, taken as UTC), read as DuckDB's count of time units,
    /// `None` for NULL. As for dates, `infinity` and instants beyond chrono's range are errors.
    fn timestamp_opt(&self, column: &str) -> Result<Option<DateTime<Utc>>, LoadError> {
        let Some(value) = self.value(column)? else { return Ok(None) };
        let ValueRef::Timestamp(unit, t) = value else {
            return Err(self.unreadable(column, format!("holds {}, not a TIMESTAMPTZ", describe(&value))));
        };
        let micros = match unit {
            TimeUnit::Second => t.checked_mul(1_000_000),
            TimeUnit::Millisecond => t.checked_mul(1_000),
            TimeUnit::Microsecond => Some(t),
            TimeUnit::Nanosecond => Some(t.div_euclid(1_000)),
        };
        micros.and_then(DateTime::from_timestamp_micros).map(Some).ok_or_else(|| {
            self.unreadable(column, format!("holds {}, which is not a point in time", instant_text(unit, t)))
        })
    }

    /// A `TIMESTAMPTZ` that must be present.
    fn timestamp(&self, column: &str) -> Result<DateTime<Utc>, LoadError> {
        self.timestamp_opt(column)?.ok_or_else(|| self.unreadable(column, "is NULL"))
    }
}

/// A day number as DuckDB shows it when it is one of its infinities.
fn day_text(days: i32) -> String {
    match days {
        i32::MAX => "`infinity`".to_owned(),
        d if d == -i32::MAX => "`-infinity`".to_owned(),
        d => format!("day {d} from 1970-01-01"),
    }
}

/// A timestamp as DuckDB shows it when it is one of its infinities.
fn instant_text(unit: TimeUnit, t: i64) -> String {
    match t {
        i64::MAX => "`infinity`".to_owned(),
        t if t == -i64::MAX => "`-infinity`".to_owned(),
        t => format!("{t} {}s from 1970-01-01", format!("{unit:?}").to_lowercase()),
    }
}

/// A value of an unexpected type, for a message.
fn describe(value: &ValueRef<'_>) -> String {
    match value {
        ValueRef::Text(bytes) => format!("the text `{}`", String::from_utf8_lossy(bytes)),
        other => format!("a value of type {}", other.data_type()),
    }
}

/// Runs `sql` with `params` and reads every row of it with `read`, naming `table` in every error.
fn read_rows<T>(
    conn: &Connection,
    table: &'static str,
    sql: &str,
    params: impl duckdb::Params,
    mut read: impl FnMut(&Cells<'_, '_>) -> Result<T, LoadError>,
) -> Result<Vec<T>, LoadError> {
    let failed = |e| LoadError::db(format!("read `{table}`"), e);
    let mut stmt = conn.prepare(sql).map_err(failed)?;
    let mut rows = stmt.query(params).map_err(failed)?;
    let columns: Vec<String> = rows.as_ref().map(|s| s.column_names()).unwrap_or_default();
    let mut out = vec![];
    while let Some(row) = rows.next().map_err(failed)? {
        out.push(read(&Cells { table, row, columns: &columns }).map_err(|e| in_file(conn, e))?);
    }
    Ok(out)
}

/// An unreadable value's error, naming the warehouse file it is in (which a message tells the
/// user to correct).
fn in_file(conn: &Connection, e: LoadError) -> LoadError {
    match e {
        LoadError::Unreadable { table, column, problem, warehouse: None } => {
            let path = conn
                .query_row("SELECT path FROM duckdb_databases() WHERE database_name = current_database()", [], |r| {
                    r.get::<_, Option<String>>(0)
                })
                .ok()
                .flatten();
            LoadError::Unreadable { table, column, problem, warehouse: path }
        }
        e => e,
    }
}

/// A `content_daily.metric`: only the metrics creator-etl writes.
fn metric(cells: &Cells<'_, '_>) -> Result<Metric, LoadError> {
    let text: String = cells.get("metric")?;
    [Metric::Views, Metric::Likes].into_iter().find(|m| m.as_str() == text).ok_or_else(|| {
        cells.unreadable(
            "metric",
            format!("holds `{text}`, which is not one of {}, {}", Metric::Views.as_str(), Metric::Likes.as_str()),
        )
    })
}

/// The scope of a sync, as `runs.sync_scope` records it: a quick sync compares only with a
/// warehouse whose last load had the same scope.
pub fn sync_scope(statuses: &[String], campaign_id: Option<i64>) -> String {
    format!("statuses={};campaign={}", statuses.join(","), campaign_id.map_or("all".to_owned(), |c| c.to_string()))
}

/// `WHERE` clause of the applications a sync of this scope covers; `None` for all of them.
pub fn scope_filter(statuses: &[String], campaign_id: Option<i64>) -> Option<String> {
    let mut parts = vec![];
    if statuses.len() < ApplicationStatus::KNOWN.len() {
        let list = statuses.iter().map(|s| format!("'{}'", s.replace('\'', "''"))).collect::<Vec<_>>().join(", ");
        parts.push(format!("status IN ({list})"));
    }
    if let Some(c) = campaign_id {
        parts.push(format!("campaign_id = {c}"));
    }
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

/// The run the warehouse loaded last, with its `sync_scope` (an error on a warehouse older than
/// schema version 4).
fn last_run(conn: &Connection) -> duckdb::Result<Option<(String, Option<String>)>> {
    conn.query_row(
        "SELECT run_id, sync_scope FROM runs ORDER BY finished_at DESC NULLS LAST, run_id DESC LIMIT 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

/// The last day of content the warehouse has loaded: the latest `content.to` of the runs in its
/// ledger (each run's report is kept in `runs.report_json`). Incremental content starts there
/// minus the lookback, so a day extracted by a run whose load failed is fetched again by the
/// next run instead of being skipped. A run that met windows without statistics counts as
/// loaded only up to the day before the first of them. `None` before the first load.
pub fn content_cursor(conn: &Connection) -> Result<Option<NaiveDate>, LoadError> {
    if !super::has_table(conn, "runs")? {
        return Ok(None);
    }
    let mut stmt = conn
        .prepare("SELECT run_id, report_json FROM runs WHERE report_json IS NOT NULL")
        .map_err(|e| LoadError::db("read `runs`", e))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(|e| LoadError::db("read `runs`", e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LoadError::db("read `runs`", e))?;
    cursor_of(conn, rows)
}

/// The content cursor of a ledger's `(run_id, report_json)` rows ([`content_cursor`]); `conn`
/// names the warehouse in an error.
fn cursor_of(conn: &Connection, rows: Vec<(String, String)>) -> Result<Option<NaiveDate>, LoadError> {
    cursor_from(conn, rows.iter().map(|(run_id, json)| loaded_until(run_id, json)))
}

/// The content cursor of the ledger's runs' [`loaded_until`]s, the first that cannot be read
/// failing it; `conn` names the warehouse in the error.
fn cursor_from(
    conn: &Connection,
    runs: impl IntoIterator<Item = Result<Option<NaiveDate>, String>>,
) -> Result<Option<NaiveDate>, LoadError> {
    let mut last = None;
    for loaded in runs {
        let loaded = loaded.map_err(|problem| {
            in_file(
                conn,
                LoadError::Unreadable { table: "runs".into(), column: "report_json".into(), problem, warehouse: None },
            )
        })?;
        last = last.max(loaded);
    }
    Ok(last)
}

/// The last day of content run `run_id` loaded, from its `report_json` ([`content_cursor`]), or
/// what about the report cannot be read.
fn loaded_until(run_id: &str, json: &str) -> Result<Option<NaiveDate>, String> {
    let day = |v: &serde_json::Value| v.as_str().and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
    let report: serde_json::Value = serde_json::from_str(json).map_err(|e| {
        format!("of run `{run_id}` is not JSON ({e}), so where incremental content starts is unknown (a run with `--from DATE` does not read it)")
    })?;
    let to = day(&report["content"]["to"]).ok_or_else(|| {
        format!("of run `{run_id}` has no readable `content.to`, where incremental content starts (a run with `--from DATE` does not read it)")
    })?;
    // Days from a window the service had no statistics for are asked again: the run loaded up to
    // the day before the first such window, or nothing when its range began with one.
    Ok(match day(&report["content"]["first_empty_day"]) {
        None => Some(to),
        Some(first_empty) if first_empty > day(&report["content"]["from"]).unwrap_or(first_empty) => {
            first_empty.pred_opt().map(|d| d.min(to))
        }
        Some(_) => None,
    })
}

/// The run the warehouse loaded last.
pub fn latest_run(conn: &Connection) -> Result<Option<String>, LoadError> {
    Ok(last_run(conn).map_err(|e| LoadError::db("read `runs`", e))?.map(|(run_id, _)| run_id))
}

/// The previous sync's lists in the warehouse `conn`, for a quick sync of this scope: `None` when
/// its last load was of another scope (or by a version before quick sync), or there was none.
pub fn snapshot(
    conn: &Connection,
    statuses: &[String],
    campaign_id: Option<i64>,
) -> Result<Option<Snapshot>, LoadError> {
    let scope = sync_scope(statuses, campaign_id);
    // No `runs` table, or one without the quick-sync columns: no snapshot to trust.
    let Ok(Some((base_run, Some(last_scope)))) = last_run(conn) else { return Ok(None) };
    if last_scope != scope {
        return Ok(None);
    }
    let last_reconcile = read_rows(
        conn,
        "runs",
        "SELECT max(finished_at) AS finished_at FROM runs WHERE sync_mode = 'full' AND sync_scope = ?",
        [&scope],
        |c| c.timestamp_opt("finished_at"),
    )?
    .into_iter()
    .next()
    .flatten();
    let filter = scope_filter(statuses, campaign_id).unwrap_or_else(|| "true".into());
    // The status is the service's text, kept as the client received it (an unknown status
    // included); the quick sync compares it with the service's lists as text.
    let rows = read_rows(
        conn,
        "applications",
        &format!("SELECT status, applied_at, id FROM applications WHERE {filter}"),
        [],
        |c| Ok((c.get::<String>("status")?, (c.timestamp("applied_at")?.timestamp_micros(), c.get::<i64>("id")?))),
    )?;
    Ok(Some(Snapshot::new(base_run, last_reconcile, rows)))
}

/// Content already in the warehouse.
pub fn content(conn: &Connection) -> Result<Vec<ContentRow>, LoadError> {
    read_rows(
        conn,
        "content_daily",
        "SELECT metric, date, last_date, current, last FROM content_daily",
        [],
        content_row,
    )
}

/// Applications (with their accounts) already in the warehouse that match `keep`, as
/// observations at their `last_seen_at`.
///
/// Status, signup source and provider are the service's text: the client keeps a value it does
/// not know (a new status, a new provider) as `Other`, the load writes it as it came, and it
/// reads back the same. A NULL where the model requires a value is an error.
pub fn applications_where(conn: &Connection, keep: &str) -> Result<Vec<Observation>, LoadError> {
    let sql = format!("SELECT {APPLICATION_COLUMNS} FROM applications WHERE {keep} ORDER BY id");
    let mut apps = read_rows(conn, "applications", &sql, [], observation)?;
    if apps.is_empty() {
        return Ok(apps);
    }
    let accounts = read_rows(
        conn,
        "connected_accounts",
        &format!(
            "SELECT {ACCOUNT_COLUMNS} FROM connected_accounts \
             WHERE application_id IN (SELECT id FROM applications WHERE {keep}) ORDER BY application_id, account_id"
        ),
        [],
        account,
    )?;
    for (app_id, account) in accounts {
        add_account(&mut apps, app_id, account);
    }
    Ok(apps)
}

/// The columns of `applications` that [`observation`] reads.
const APPLICATION_COLUMNS: &str =
    "id, status, campaign_id, campaign_name, user_id, creator_name, email, signup_source, applied_at, last_seen_at";

/// The columns of `connected_accounts` that [`account`] reads.
const ACCOUNT_COLUMNS: &str = "application_id, account_id, provider, username, monthly_post_count";

/// An `applications` row as an observation at its `last_seen_at`, without its accounts.
fn observation(c: &Cells<'_, '_>) -> Result<Observation, LoadError> {
    Ok(Observation {
        seq: 0,
        first_pass: 1,
        observed_at: c.timestamp("last_seen_at")?,
        app: Application {
            id: c.get("id")?,
            status: ApplicationStatus::parse(&c.get::<String>("status")?),
            campaign_id: c.get("campaign_id")?,
            campaign_name: c.get("campaign_name")?,
            user_id: c.get("user_id")?,
            creator_name: c.get("creator_name")?,
            email: c.get("email")?,
            signup_source: SignupSource::parse(&c.get::<String>("signup_source")?),
            connected_accounts: vec![],
            applied_at: c.timestamp("applied_at")?,
        },
    })
}

/// A `connected_accounts` row: its application's id and the account.
fn account(c: &Cells<'_, '_>) -> Result<(i64, ConnectedAccount), LoadError> {
    Ok((
        c.get::<i64>("application_id")?,
        ConnectedAccount {
            id: c.get("account_id")?,
            provider: Provider::parse(&c.get::<String>("provider")?),
            username: c.get("username")?,
            monthly_post_count: c.get("monthly_post_count")?,
        },
    ))
}

/// Gives the application `app_id` of `apps` (sorted by id) the account, after those it has; an
/// application with no row in `connected_accounts` listed no account.
fn add_account(apps: &mut [Observation], app_id: i64, account: ConnectedAccount) {
    if let Ok(i) = apps.binary_search_by_key(&app_id, |o| o.app.id) {
        apps[i].app.connected_accounts.push(account);
    }
}

/// A `content_daily` row, its totals zero (the table keeps none).
fn content_row(c: &Cells<'_, '_>) -> Result<ContentRow, LoadError> {
    Ok(ContentRow {
        metric: metric(c)?,
        date: c.date("date")?,
        last_date: c.date("last_date")?,
        current: c.get("current")?,
        last: c.get("last")?,
        total: 0,
        last_total: 0,
    })
}

/// One organization's previous rows as a fleet batch's load reads them ([`load_rows`]): what
/// [`content`], [`latest_run`] and [`applications_where`] read through its views, for a load
/// that merges a run with them.
#[derive(Debug, Default)]
pub struct LoadRows {
    /// A row of the organization could not be read as the batch reader reads it: its state is
    /// read through its views instead ([`PreviousRows::damaged`]).
    pub damaged: bool,
    /// `runs`: run id and finished at.
    runs: Vec<(String, Option<DateTime<Utc>>)>,
    content: Vec<ContentRow>,
    /// Its applications with their accounts, sorted by id: read only when asked for
    /// ([`load_rows`]'s `apps_of`), `None` otherwise.
    apps: Option<Vec<Observation>>,
    /// Its frame tables' fingerprints as its last load wrote them (`frame_fingerprints`), by
    /// table.
    fingerprints: std::collections::BTreeMap<String, String>,
    /// The status of each of the organization's open rows of `application_status_history`
    /// (`valid_to` NULL), by application id (`None`: an id with more than one): read with its
    /// applications.
    open_statuses: Option<OpenStatuses>,
}

/// The statuses of an organization's open `application_status_history` rows, by application
/// id; `None` for an id with more than one open row.
pub type OpenStatuses = std::collections::BTreeMap<i64, Option<String>>;

/// The previous rows of the organizations `orgs` of the fleet warehouse `conn` that their
/// batch's load merges with, with one query per table: the ledger and content of each, and the
/// applications of those in `apps_of`. An organization without rows gets empty ones.
pub fn load_rows(
    conn: &Connection,
    orgs: &[String],
    apps_of: &[String],
) -> Result<std::collections::BTreeMap<String, LoadRows>, LoadError> {
    let mut out = empty_rows::<LoadRows>(orgs);
    if orgs.is_empty() {
        return Ok(out);
    }
    let list = super::sql_list(orgs);
    // Each query's time, for the debug log.
    let mut laps = crate::progress::Laps::start();
    read_keyed(
        conn,
        "runs",
        &format!("SELECT organization, run_id, finished_at FROM runs WHERE organization IN ({list})"),
        |c| Ok((c.get::<String>("run_id")?, c.timestamp_opt("finished_at")?)),
        &mut out,
        |rows, run| rows.runs.push(run),
    )?;
    let runs_ms = laps.lap();
    read_keyed(
        conn,
        "content_daily",
        &format!(
            "SELECT organization, metric, date, last_date, current, last FROM content_daily WHERE organization IN ({list})"
        ),
        content_row,
        &mut out,
        |rows, row| rows.content.push(row),
    )?;
    let content_ms = laps.lap();
    read_keyed(
        conn,
        crate::load::catalog::FINGERPRINTS,
        &format!(
            "SELECT organization, table_name, fingerprint FROM {} WHERE organization IN ({list})",
            crate::load::catalog::FINGERPRINTS
        ),
        |c| Ok((c.get::<String>("table_name")?, c.get::<String>("fingerprint")?)),
        &mut out,
        |rows, (table, fingerprint)| {
            rows.fingerprints.insert(table, fingerprint);
        },
    )?;
    let fingerprints_ms = laps.lap();
    if !apps_of.is_empty() {
        for org in apps_of {
            let rows = out.entry(org.clone()).or_default();
            rows.apps = Some(vec![]);
            rows.open_statuses = Some(OpenStatuses::new());
        }
        let list = super::sql_list(apps_of);
        read_keyed(
            conn,
            "applications",
            &format!(
                "SELECT organization, {APPLICATION_COLUMNS} FROM applications WHERE organization IN ({list}) ORDER BY organization, id"
            ),
            observation,
            &mut out,
            |rows, app| rows.apps.get_or_insert_with(Vec::new).push(app),
        )?;
        // Each account to its application (sorted by id above).
        read_keyed(
            conn,
            "connected_accounts",
            &format!(
                "SELECT organization, {ACCOUNT_COLUMNS} FROM connected_accounts WHERE organization IN ({list}) \
                 ORDER BY organization, application_id, account_id"
            ),
            account,
            &mut out,
            |rows, (app_id, account)| add_account(rows.apps.get_or_insert_with(Vec::new), app_id, account),
        )?;
        read_keyed(
            conn,
            "application_status_history",
            &format!(
                "SELECT organization, id, status FROM application_status_history \
                 WHERE organization IN ({list}) AND valid_to IS NULL"
            ),
            |c| Ok((c.get::<i64>("id")?, c.get::<String>("status")?)),
            &mut out,
            |rows, (id, status)| {
                let open = rows.open_statuses.get_or_insert_with(OpenStatuses::new);
                match open.entry(id) {
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(Some(status));
                    }
                    std::collections::btree_map::Entry::Occupied(mut e) => {
                        e.insert(None);
                    }
                }
            },
        )?;
    }
    tracing::debug!(
        organizations = orgs.len(),
        runs_ms,
        content_ms,
        fingerprints_ms,
        applications_ms = laps.lap(),
        "previous rows read (ms; applications_ms: with their accounts and open history rows)"
    );
    Ok(out)
}

/// Previous rows of many organizations, as a batch reader files them: a row with a value that
/// cannot be read marks its organization damaged.
trait Filed: Default {
    fn damage(&mut self);
}

impl Filed for LoadRows {
    fn damage(&mut self) {
        self.damaged = true;
    }
}

impl Filed for PreviousRows {
    fn damage(&mut self) {
        self.damaged = true;
    }
}

/// Empty rows for each of `orgs`: what an organization without rows gets.
fn empty_rows<R: Filed>(orgs: &[String]) -> std::collections::BTreeMap<String, R> {
    orgs.iter().map(|o| (o.clone(), R::default())).collect()
}

/// Runs `sql`, whose rows have an `organization` column, reads each row with `read`, and files
/// it into its organization's rows of `out` with `file`; a row `read` cannot read damages its
/// organization instead.
fn read_keyed<R: Filed, T>(
    conn: &Connection,
    table: &'static str,
    sql: &str,
    read: impl Fn(&Cells<'_, '_>) -> Result<T, LoadError>,
    out: &mut std::collections::BTreeMap<String, R>,
    mut file: impl FnMut(&mut R, T),
) -> Result<(), LoadError> {
    // Each row filed as it is read, its organization's name borrowed from the result.
    read_rows(conn, table, sql, [], |c| {
        let org = match c.value(ORGANIZATION)? {
            Some(ValueRef::Text(bytes)) => {
                std::str::from_utf8(bytes).map_err(|e| c.unreadable(ORGANIZATION, format!("is not text: {e}")))?
            }
            Some(other) => return Err(c.unreadable(ORGANIZATION, format!("holds {}, not text", describe(&other)))),
            None => return Err(c.unreadable(ORGANIZATION, "is NULL")),
        };
        let row = read(c).ok();
        if !out.contains_key(org) {
            out.insert(org.to_owned(), R::default());
        }
        let rows = out.get_mut(org).expect("inserted above");
        match row {
            Some(row) => file(rows, row),
            None => rows.damage(),
        }
        Ok(())
    })?;
    Ok(())
}

impl LoadRows {
    /// [`latest_run`] of these rows.
    pub fn latest_run(&self) -> Option<String> {
        // By `finished_at`, a missing one last, then by id, as `last_run` orders them.
        self.runs.iter().max_by_key(|r| (r.1.is_some(), r.1, &r.0)).map(|r| r.0.clone())
    }

    /// Its frame tables' fingerprints as its last load wrote them, taken.
    pub fn take_fingerprints(&mut self) -> std::collections::BTreeMap<String, String> {
        std::mem::take(&mut self.fingerprints)
    }

    /// The statuses of its applications' open history rows, taken; `None` when they were not
    /// read (with its applications, [`load_rows`]'s `apps_of`).
    pub fn take_open_statuses(&mut self) -> Option<OpenStatuses> {
        self.open_statuses.take()
    }

    /// [`content`] of these rows, taken.
    pub fn take_content(&mut self) -> Vec<ContentRow> {
        std::mem::take(&mut self.content)
    }

    /// Whether its applications were read ([`load_rows`]'s `apps_of`).
    pub fn has_applications(&self) -> bool {
        self.apps.is_some()
    }

    /// About how many bytes these rows hold in memory (their content rows, their applications
    /// with their strings and accounts, their runs and open history statuses): what bounds the
    /// rows read ahead.
    pub fn approximate_bytes(&self) -> usize {
        use std::mem::size_of;
        let apps: usize = self.apps.iter().flatten().map(Observation::approximate_bytes).sum();
        let runs: usize = self.runs.iter().map(|r| size_of::<(String, Option<DateTime<Utc>>)>() + r.0.len()).sum();
        let open: usize = self
            .open_statuses
            .iter()
            .flatten()
            .map(|(_, status)| size_of::<(i64, Option<String>)>() + status.as_ref().map_or(0, String::len))
            .sum();
        self.content.len() * size_of::<ContentRow>() + apps + runs + open
    }

    /// The applications of which `keep` holds, sorted by id as [`applications_where`] gives
    /// them; `None` when they were not read ([`load_rows`]'s `apps_of`).
    pub fn applications_if(&self, keep: impl Fn(&Observation) -> bool) -> Option<Vec<Observation>> {
        Some(self.apps.as_ref()?.iter().filter(|o| keep(o)).cloned().collect())
    }
}

/// One organization's ledger and applications as a sync reads them before its first request,
/// read for many organizations of a fleet warehouse at once ([`previous_rows`]): what
/// [`snapshot`] and [`content_cursor`] read, for any scope ([`PreviousRows::snapshot`],
/// [`PreviousRows::content_cursor`]).
#[derive(Debug, Default)]
pub struct PreviousRows {
    /// A row of the organization could not be read as the batch reader reads it (a damaged
    /// value): its previous state is read by the one-organization readers instead, which read
    /// only what its sync needs and name what they cannot read.
    pub damaged: bool,
    runs: Vec<LedgerRow>,
    /// `applications`: status, applied at (microseconds), id, campaign id.
    apps: Vec<(String, i64, i64, i64)>,
}

/// A `runs` row as the batch reader keeps it: run id, finished at, sync mode, sync scope, and
/// the last day of content its report says it loaded ([`loaded_until`]; `None`: no report),
/// reduced so when read: a report is a few kilobytes, and the rows of several batches of
/// organizations, each with every run of its ledger, are held until they ask.
type LedgerRow =
    (String, Option<DateTime<Utc>>, Option<String>, Option<String>, Option<Result<Option<NaiveDate>, String>>);

/// The previous rows of the organizations `orgs` of the fleet warehouse `conn`, with one query
/// per table; an organization without rows gets empty ones.
pub fn previous_rows(
    conn: &Connection,
    orgs: &[String],
) -> Result<std::collections::BTreeMap<String, PreviousRows>, LoadError> {
    let mut out = empty_rows::<PreviousRows>(orgs);
    if orgs.is_empty() {
        return Ok(out);
    }
    let list = super::sql_list(orgs);
    read_keyed(
        conn,
        "runs",
        &format!("SELECT organization, run_id, finished_at, sync_mode, sync_scope, report_json FROM runs WHERE organization IN ({list})"),
        |c| {
            let run_id = c.get::<String>("run_id")?;
            let loaded = c.get::<Option<String>>("report_json")?.map(|json| loaded_until(&run_id, &json));
            Ok((
                run_id,
                c.timestamp_opt("finished_at")?,
                c.get::<Option<String>>("sync_mode")?,
                c.get::<Option<String>>("sync_scope")?,
                loaded,
            ))
        },
        &mut out,
        |rows, run| rows.runs.push(run),
    )?;
    read_keyed(
        conn,
        "applications",
        &format!(
            "SELECT organization, status, applied_at, id, campaign_id FROM applications WHERE organization IN ({list})"
        ),
        |c| {
            Ok((
                c.get::<String>("status")?,
                c.timestamp("applied_at")?.timestamp_micros(),
                c.get::<i64>("id")?,
                c.get::<i64>("campaign_id")?,
            ))
        },
        &mut out,
        |rows, app| rows.apps.push(app),
    )?;
    Ok(out)
}

impl PreviousRows {
    /// [`snapshot`] of these rows: the previous sync's lists for a quick sync of this scope.
    pub fn snapshot(&self, statuses: &[String], campaign_id: Option<i64>) -> Option<Snapshot> {
        let scope = sync_scope(statuses, campaign_id);
        // The last run (by `finished_at`, a missing one last, then by id, as `last_run` orders
        // them), of this scope, or no snapshot.
        let last = self.runs.iter().max_by_key(|r| (r.1.is_some(), r.1, &r.0))?;
        if last.3.as_deref() != Some(scope.as_str()) {
            return None;
        }
        let last_reconcile = self
            .runs
            .iter()
            .filter(|r| r.2.as_deref() == Some("full") && r.3.as_deref() == Some(scope.as_str()))
            .filter_map(|r| r.1)
            .max();
        let rows = self
            .apps
            .iter()
            .filter(|(status, _, _, campaign)| in_scope(statuses, campaign_id, status, *campaign))
            .map(|(status, applied, id, _)| (status.clone(), (*applied, *id)));
        Some(Snapshot::new(last.0.clone(), last_reconcile, rows))
    }

    /// [`content_cursor`] of these rows; `conn` names the warehouse in an error.
    pub fn content_cursor(&self, conn: &Connection) -> Result<Option<NaiveDate>, LoadError> {
        cursor_from(conn, self.runs.iter().filter_map(|r| r.4.clone()))
    }
}

/// Whether an application of this status and campaign is in a sync's scope: [`scope_filter`]'s
/// rule, in Rust.
pub fn in_scope(statuses: &[String], campaign_id: Option<i64>, status: &str, campaign: i64) -> bool {
    (statuses.len() >= ApplicationStatus::KNOWN.len() || statuses.iter().any(|s| s == status))
        && campaign_id.is_none_or(|c| c == campaign)
}

#[cfg(test)]
mod previous_tests {
    use super::*;

    /// The batch reader's snapshot and cursor are the one-organization readers', for every scope.
    #[test]
    fn the_batch_reader_reads_what_the_one_organization_readers_read() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (organization VARCHAR, run_id VARCHAR, finished_at TIMESTAMPTZ, sync_mode VARCHAR, sync_scope VARCHAR, report_json VARCHAR);
             CREATE TABLE applications (organization VARCHAR, status VARCHAR, applied_at TIMESTAMPTZ, id BIGINT, campaign_id BIGINT);",
        )
        .unwrap();
        let all: Vec<String> = ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect();
        let scope_all = sync_scope(&all, None);
        let scope_one = sync_scope(&all[..1], Some(7));
        for (org, run, at, mode, scope, to) in [
            ("a", "r1", "2026-01-01", "full", scope_all.as_str(), "2025-12-31"),
            ("a", "r2", "2026-01-05", "quick", scope_all.as_str(), "2026-01-04"),
            ("b", "r1", "2026-01-01", "full", scope_one.as_str(), "2025-12-20"),
            ("c", "r1", "2026-01-03", "full", scope_all.as_str(), "2026-01-02"),
            ("c", "r2", "2026-01-02", "full", scope_one.as_str(), "2026-01-01"),
        ] {
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?::TIMESTAMPTZ, ?, ?, ?)",
                duckdb::params![org, run, at, mode, scope, format!("{{\"content\":{{\"to\":\"{to}\"}}}}")],
            )
            .unwrap();
        }
        for (i, org) in ["a", "a", "a", "b", "c"].iter().enumerate() {
            let status = &all[i % all.len()];
            conn.execute(
                "INSERT INTO applications VALUES (?, ?, ?::TIMESTAMPTZ, ?, ?)",
                duckdb::params![
                    org,
                    status,
                    format!("2025-06-{:02}T00:00:00Z", i + 1),
                    i as i64 + 1,
                    if i % 2 == 0 { 7i64 } else { 8 }
                ],
            )
            .unwrap();
        }
        // A damaged value marks its organization alone, for the one-organization readers.
        conn.execute_batch("INSERT INTO applications VALUES ('d', 'accepted', 'infinity'::TIMESTAMPTZ, 9, 7);")
            .unwrap();
        let rows = previous_rows(&conn, &["a".into(), "b".into(), "c".into(), "none".into(), "d".into()]).unwrap();
        assert!(rows["d"].damaged);
        assert!(["a", "b", "c", "none"].iter().all(|o| !rows[*o].damaged));
        for org in ["a", "b", "c", "none"] {
            conn.execute_batch(&format!(
                "CREATE OR REPLACE TEMP VIEW r AS SELECT * EXCLUDE (organization) FROM runs WHERE organization = '{org}';
                 CREATE OR REPLACE TEMP VIEW ap AS SELECT * EXCLUDE (organization) FROM applications WHERE organization = '{org}';"
            ))
            .unwrap();
            // The one-organization readers over that organization's rows, as tables of their own.
            let single = Connection::open_in_memory().unwrap();
            single.execute_batch("CREATE TABLE runs (run_id VARCHAR, finished_at TIMESTAMPTZ, sync_mode VARCHAR, sync_scope VARCHAR, report_json VARCHAR); CREATE TABLE applications (status VARCHAR, applied_at TIMESTAMPTZ, id BIGINT, campaign_id BIGINT);").unwrap();
            let mut stmt = conn
                .prepare("SELECT run_id, CAST(finished_at AS VARCHAR), sync_mode, sync_scope, report_json FROM r")
                .unwrap();
            for row in stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .unwrap()
            {
                let (a, b, c, d, e) = row.unwrap();
                single
                    .execute("INSERT INTO runs VALUES (?, ?::TIMESTAMPTZ, ?, ?, ?)", duckdb::params![a, b, c, d, e])
                    .unwrap();
            }
            let mut stmt = conn.prepare("SELECT status, CAST(applied_at AS VARCHAR), id, campaign_id FROM ap").unwrap();
            for row in stmt
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
                })
                .unwrap()
            {
                let (a, b, c, d) = row.unwrap();
                single
                    .execute("INSERT INTO applications VALUES (?, ?::TIMESTAMPTZ, ?, ?)", duckdb::params![a, b, c, d])
                    .unwrap();
            }
            let mine = &rows[org];
            for (statuses, campaign) in [(all.clone(), None), (all[..1].to_vec(), Some(7)), (all[..2].to_vec(), None)] {
                let want = snapshot(&single, &statuses, campaign).unwrap();
                let got = mine.snapshot(&statuses, campaign);
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{org} {statuses:?} {campaign:?}");
            }
            assert_eq!(mine.content_cursor(&conn).unwrap(), content_cursor(&single).unwrap(), "{org}");
        }
    }

    /// The batch reader's content cursor is the one-organization reader's for the reports it
    /// reads: none, one that is not JSON, one without `content.to`, and windows without
    /// statistics (the same value, or the same error but the warehouse's name).
    #[test]
    fn the_batch_readers_content_cursor_is_the_one_organization_readers_for_every_report() {
        let empty = |from: &str, to: &str, first: &str| {
            format!("{{\"content\":{{\"from\":\"{from}\",\"to\":\"{to}\",\"first_empty_day\":\"{first}\"}}}}")
        };
        let to = |day: &str| Some(format!("{{\"content\":{{\"to\":\"{day}\"}}}}"));
        // Each ledger's reports, and the cursor (or the start of the error) both readers give.
        let ledgers: Vec<(Vec<Option<String>>, &str)> = vec![
            (vec![None], "None"),
            (vec![None, to("2026-01-04")], "Some(2026-01-04)"),
            (vec![to("2026-01-04"), to("2025-12-01")], "Some(2026-01-04)"),
            (vec![to("2026-01-04"), Some("not json".into())], "runs.report_json: of run `r1` is not JSON"),
            (
                vec![Some(r#"{"content":{"from":"2026-01-01"}}"#.into())],
                "runs.report_json: of run `r0` has no readable",
            ),
            (vec![Some(empty("2026-01-01", "2026-01-09", "2026-01-05"))], "Some(2026-01-04)"),
            (vec![Some(empty("2026-01-01", "2026-01-09", "2026-01-01")), to("2025-12-01")], "Some(2025-12-01)"),
            (vec![Some(empty("2026-01-01", "2026-01-09", "2026-01-20"))], "Some(2026-01-09)"),
        ];
        for (i, (reports, want)) in ledgers.iter().enumerate() {
            let fleet = Connection::open_in_memory().unwrap();
            let single = Connection::open_in_memory().unwrap();
            fleet.execute_batch("CREATE TABLE runs (organization VARCHAR, run_id VARCHAR, finished_at TIMESTAMPTZ, sync_mode VARCHAR, sync_scope VARCHAR, report_json VARCHAR); CREATE TABLE applications (organization VARCHAR, status VARCHAR, applied_at TIMESTAMPTZ, id BIGINT, campaign_id BIGINT);").unwrap();
            single.execute_batch("CREATE TABLE runs (run_id VARCHAR, finished_at TIMESTAMPTZ, sync_mode VARCHAR, sync_scope VARCHAR, report_json VARCHAR);").unwrap();
            for (j, report) in reports.iter().enumerate() {
                let (run, at) = (format!("r{j}"), format!("2026-02-0{}", j + 1));
                fleet
                    .execute(
                        "INSERT INTO runs VALUES ('o', ?, ?::TIMESTAMPTZ, 'full', 'all', ?)",
                        duckdb::params![run, at, report],
                    )
                    .unwrap();
                single
                    .execute(
                        "INSERT INTO runs VALUES (?, ?::TIMESTAMPTZ, 'full', 'all', ?)",
                        duckdb::params![run, at, report],
                    )
                    .unwrap();
            }
            let rows = previous_rows(&fleet, &["o".into()]).unwrap();
            let strip = |r: Result<Option<NaiveDate>, LoadError>| match r {
                Ok(day) => format!("{day:?}"),
                Err(LoadError::Unreadable { table, column, problem, .. }) => format!("{table}.{column}: {problem}"),
                Err(e) => format!("other error: {e}"),
            };
            let batch = strip(rows["o"].content_cursor(&fleet));
            assert_eq!(batch, strip(content_cursor(&single)), "ledger {i}");
            assert!(batch.starts_with(want), "ledger {i}: {batch}");
        }
    }
}
