//! Named queries over the warehouse (`queries/*.sql`), run on a read-only connection and printed
//! as a table (Arrow's pretty printer), CSV or JSON lines. With `--lake`, the same queries run
//! over the shared lake's current snapshot instead ([`lake`]).
//!
//! The SQL files are the single source: they are compiled into the binary, so `creator-etl query
//! NAME` works from anywhere, and the notebooks read the same files from `queries/`.
//! Each file opens with `--` comments: its purpose, `-- params: NAME (default …), …` and
//! `-- columns: …`. Parameters reach the SQL as DuckDB variables (`getvariable('NAME')`, text,
//! cast by the query): the query's own text is never edited.
//!
//! The named queries are written with `organization` as a key, over views that have it
//! ([`Reader::keyed`]), so that one query answers for many organizations (the report); `query`
//! prints one organization's answer without it.

use std::path::{Path, PathBuf};

use duckdb::arrow::array::Array;
use duckdb::arrow::datatypes::DataType;
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::arrow::util::display::{ArrayFormatter, FormatOptions};
use thiserror::Error;

use crate::load::warehouse::Rows;

pub mod lake;

/// The named queries, in `queries/`.
pub const QUERIES: [(&str, &str); 10] = [
    ("wow_latest", include_str!("../../queries/wow_latest.sql")),
    ("movers", include_str!("../../queries/movers.sql")),
    ("weekly_trend", include_str!("../../queries/weekly_trend.sql")),
    ("cohort_acceptance", include_str!("../../queries/cohort_acceptance.sql")),
    ("cohort_by_month", include_str!("../../queries/cohort_by_month.sql")),
    ("applications_by_status", include_str!("../../queries/applications_by_status.sql")),
    ("pending_queue", include_str!("../../queries/pending_queue.sql")),
    ("status_changes", include_str!("../../queries/status_changes.sql")),
    ("action_outcomes", include_str!("../../queries/action_outcomes.sql")),
    ("run_health", include_str!("../../queries/run_health.sql")),
];

#[derive(Debug, Error)]
pub enum QueryError {
    #[error("no query named `{0}`, and no such file; the named queries are {names}", names = names())]
    Unknown(String),
    #[error("cannot read `{path}`")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`--param {0}`: write NAME=VALUE, NAME made of letters, digits and `_`")]
    BadParam(String),
    #[error("`--param {name}`: the query takes {takes}")]
    UnknownParam { name: String, takes: String },
    #[error("no warehouse at `{0}`; run `creator-etl run` (or `creator-etl demo`) first")]
    NoWarehouse(String),
    #[error("no lake table `{table}` under `{url}`; load an organization into it first (`creator-etl load --lake … --org …`)")]
    NoLake { url: String, table: String },
    #[error("{within} holds {} organizations ({}); a named query prints one organization's answer: add `--org NAME`", .holds.len(), .holds.join(", "))]
    ManyOrganizations { within: &'static str, holds: Vec<String> },
    #[error("`--org {org}`: {within} holds no rows of it; it holds {}", if .holds.is_empty() { "none yet".to_owned() } else { .holds.join(", ") })]
    UnknownOrganization { within: &'static str, org: String, holds: Vec<String> },
    #[error("`--org`: `{0}` is one organization's warehouse; `--org` picks an organization of a fleet warehouse (`fleet run --warehouse fleet`) or of a lake")]
    OneOrganization(String),
    #[error("lake: {0}")]
    Lake(String),
    #[error("`--at-versions`: {0}")]
    Versions(String),
    #[error("query failed: {0}")]
    Db(String),
    /// Opening or preparing a warehouse failed; its cause chain is kept.
    #[error(transparent)]
    Warehouse(#[from] crate::load::LoadError),
}

/// The SQL of a named query.
pub fn named(name: &str) -> Option<&'static str> {
    QUERIES.iter().find(|(n, _)| *n == name).map(|(_, sql)| *sql)
}

fn names() -> String {
    QUERIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// What a query reads.
#[derive(Clone, Debug)]
pub enum Source {
    /// A DuckDB warehouse file, opened read-only. A fleet warehouse ([`crate::load::fleet_warehouse`])
    /// is read like the lake: with `org`, only that organization's rows, with one
    /// organization's columns.
    Warehouse { path: PathBuf, org: Option<String> },
    /// The shared lake's current snapshot, resolved with [`lake::resolve`].
    Lake(lake::LakeSource),
}

/// A validated query request.
#[derive(Clone, Debug)]
pub struct QueryConfig {
    pub source: Source,
    pub name: String,
    pub sql: String,
    pub params: Vec<(String, String)>,
    pub format: Format,
}

/// The parameters a query declares in its `-- params:` line.
pub fn declared_params(sql: &str) -> Vec<String> {
    sql.lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- params:"))
        .map(|rest| {
            rest.split(',')
                .filter_map(|p| p.split_whitespace().next())
                .filter(|p| p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !p.starts_with('('))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The columns a query declares in its `-- columns:` line.
pub fn declared_columns(sql: &str) -> Vec<String> {
    sql.lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- columns:"))
        .map(|rest| rest.split(',').map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect())
        .unwrap_or_default()
}

impl QueryConfig {
    /// Resolves a name or a file and validates the parameters against its `-- params:` line.
    pub fn new(source: Source, name_or_file: &str, params: &[String], format: Format) -> Result<Self, QueryError> {
        let (name, sql) = match named(name_or_file) {
            Some(sql) => (name_or_file.to_owned(), sql.to_owned()),
            None => {
                let path = Path::new(name_or_file);
                if !path.is_file() {
                    return Err(QueryError::Unknown(name_or_file.to_owned()));
                }
                let sql = std::fs::read_to_string(path)
                    .map_err(|source| QueryError::Read { path: name_or_file.to_owned(), source })?;
                (name_or_file.to_owned(), sql)
            }
        };
        let declared = declared_params(&sql);
        let mut parsed = vec![];
        for p in params {
            let (k, v) = p.split_once('=').ok_or_else(|| QueryError::BadParam(p.clone()))?;
            let k = k.trim();
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(QueryError::BadParam(p.clone()));
            }
            if !declared.iter().any(|d| d == k) {
                let takes = if declared.is_empty() {
                    "no parameters".to_owned()
                } else {
                    format!("only {}", declared.join(", "))
                };
                return Err(QueryError::UnknownParam { name: k.to_owned(), takes });
            }
            parsed.push((k.to_owned(), v.to_owned()));
        }
        Ok(QueryConfig { source, name, sql, params: parsed, format })
    }
}

fn db(e: duckdb::Error) -> QueryError {
    QueryError::Db(e.to_string())
}

/// Runs a query and returns its batches: on a read-only warehouse connection, or on views of
/// the lake's current snapshot ([`Reader::run`]).
pub async fn run(config: QueryConfig) -> Result<Vec<RecordBatch>, QueryError> {
    let named = named(&config.name).is_some();
    let reader = Reader::open(&config.source).await?;
    let org = match (&config.source, reader.holds()) {
        (Source::Warehouse { path, org: Some(_) }, None) => {
            return Err(QueryError::OneOrganization(path.display().to_string()))
        }
        (_, None) => None,
        (Source::Warehouse { org, .. }, Some(holds)) => {
            pick_organization("the fleet warehouse", org.as_deref(), holds.to_vec(), named)?
        }
        (Source::Lake(source), Some(holds)) => {
            pick_organization("the lake", source.org.as_deref(), holds.to_vec(), named)?
        }
    };
    tokio::task::spawn_blocking(move || reader.run(org.as_deref(), &config))
        .await
        .map_err(|e| QueryError::Db(format!("the query task failed: {e}")))?
}

/// What a query or the report reads, opened once: one organization's warehouse, a fleet
/// warehouse, or the lake's current snapshot (resolved with [`lake::resolve`]).
pub enum Reader {
    /// One organization's warehouse, open read-only.
    Own { conn: duckdb::Connection, path: PathBuf },
    /// A fleet warehouse and the organizations it holds rows of.
    Fleet { path: PathBuf, holds: Vec<String> },
    /// A lake snapshot; it lists its organizations.
    Lake { snapshot: Box<lake::Snapshot>, holds: Vec<String> },
    /// No data yet for these organizations (a fleet whose warehouse is not published yet): empty
    /// tables.
    Nothing { holds: Vec<String> },
}

/// The `organization` of one organization's own warehouse on the named queries' views: its
/// tables have no such column, and a warehouse does not know its organization's name.
pub const OWN: &str = "";

impl Reader {
    pub async fn open(source: &Source) -> Result<Reader, QueryError> {
        match source {
            Source::Warehouse { path, .. } => {
                let conn = open_warehouse(path)?;
                if !crate::load::warehouse::is_fleet(&conn)? {
                    return Ok(Reader::Own { conn, path: path.clone() });
                }
                let holds = fleet_organizations(&conn)?;
                Ok(Reader::Fleet { path: path.clone(), holds })
            }
            Source::Lake(source) => {
                let snapshot = lake::resolve(source).await?;
                tracing::debug!(versions = ?snapshot.versions(), "reading the lake snapshot");
                let holds = snapshot.organizations.iter().cloned().collect();
                Ok(Reader::Lake { snapshot: Box::new(snapshot), holds })
            }
        }
    }

    /// One organization's warehouse at `path`, known to be one (the demo's).
    pub fn own(path: &Path) -> Result<Reader, QueryError> {
        Ok(Reader::Own { conn: open_warehouse(path)?, path: path.to_path_buf() })
    }

    /// Stands for `holds`, which have no data yet: empty tables.
    pub fn nothing(holds: Vec<String>) -> Reader {
        Reader::Nothing { holds }
    }

    /// The organizations a fleet warehouse or a lake holds, sorted; `None` for one
    /// organization's warehouse.
    pub fn holds(&self) -> Option<&[String]> {
        match self {
            Reader::Own { .. } => None,
            Reader::Fleet { holds, .. } | Reader::Lake { holds, .. } | Reader::Nothing { holds } => Some(holds),
        }
    }

    /// Runs `config` for organization `org` (`None`: one organization's warehouse, or, for a SQL
    /// file, every organization): a named query on the named queries' views ([`Reader::keyed`]),
    /// its `organization` column left out; a SQL file on [`Reader::connect`].
    pub fn run(&self, org: Option<&str>, config: &QueryConfig) -> Result<Vec<RecordBatch>, QueryError> {
        if named(&config.name).is_none() {
            return execute(&self.connect(org)?, config);
        }
        let keyed = self.keyed()?;
        if let Some(org) = org {
            keyed.select(&[org.to_owned()])?;
        }
        execute(&keyed.conn, config)?.iter().map(without_organization).collect()
    }

    /// A connection with the tables and views of one organization (`org`, with its columns) or,
    /// without it, of every organization the source holds (one organization's warehouse: its
    /// own): what a SQL file reads.
    pub fn connect(&self, org: Option<&str>) -> Result<duckdb::Connection, QueryError> {
        match self {
            Reader::Own { conn, .. } => conn.try_clone().map_err(db),
            Reader::Nothing { .. } => {
                let conn = duckdb::Connection::open_in_memory().map_err(db)?;
                crate::load::warehouse::migrate(&conn, crate::load::catalog::Shape::One)?;
                Ok(conn)
            }
            Reader::Fleet { path, .. } => fleet_views(path, Rows::of(org)),
            Reader::Lake { snapshot, .. } => lake_views(snapshot, Rows::of(org)),
        }
    }

    /// What the named queries read: every table and view with `organization` (written with it as
    /// a key, one query answers for many organizations), of the organizations
    /// [`Keyed::select`] picks. One organization's warehouse has [`OWN`] as its organization.
    pub fn keyed(&self) -> Result<Keyed, QueryError> {
        use crate::load::catalog::{views_sql, Shape};
        let conn = match self {
            Reader::Own { path, .. } => {
                let conn = duckdb::Connection::open_in_memory().map_err(db)?;
                crate::load::warehouse::no_downloads(&conn).map_err(db)?;
                let path = crate::load::warehouse::sql_literal(&path.display().to_string());
                conn.execute_batch(&format!("ATTACH {path} AS own (READ_ONLY);")).map_err(db)?;
                // The catalog's tables that the file has (an older one may lack some), and no
                // other: a table of the user's, in another schema say, is none of the queries'.
                let present: Vec<String> = {
                    let mut stmt = conn
                        .prepare(
                            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'own' AND schema_name = 'main'",
                        )
                        .map_err(db)?;
                    let names = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(db)?;
                    names.collect::<Result<Vec<_>, _>>().map_err(db)?
                };
                let own = crate::load::warehouse::sql_literal(OWN);
                let mut sql = String::new();
                for t in crate::load::catalog::tables_of(Shape::One).into_iter().map(|t| t.name) {
                    if present.iter().any(|p| p == t) {
                        sql.push_str(&format!(
                            "CREATE VIEW {t} AS SELECT {own} AS organization, * FROM own.main.{t};\n"
                        ));
                    }
                }
                sql.push_str(&views_sql(true));
                conn.execute_batch(&sql).map_err(db)?;
                conn
            }
            Reader::Nothing { .. } => {
                let conn = duckdb::Connection::open_in_memory().map_err(db)?;
                crate::load::warehouse::migrate(&conn, Shape::Fleet)?;
                conn.execute_batch(&views_sql(true)).map_err(db)?;
                conn
            }
            Reader::Fleet { path, .. } => fleet_views(path, Rows::Keyed)?,
            Reader::Lake { snapshot, .. } => lake_views(snapshot, Rows::Keyed)?,
        };
        let filters = matches!(self, Reader::Fleet { .. } | Reader::Lake { .. });
        Ok(Keyed { conn, filters })
    }
}

fn lake_views(snapshot: &lake::Snapshot, rows: Rows<'_>) -> Result<duckdb::Connection, QueryError> {
    let conn = duckdb::Connection::open_in_memory().map_err(db)?;
    crate::load::warehouse::no_downloads(&conn).map_err(db)?;
    conn.execute_batch(&snapshot.views_sql(rows)).map_err(db)?;
    Ok(conn)
}

/// The named queries' views (see [`Reader::keyed`]).
pub struct Keyed {
    pub conn: duckdb::Connection,
    /// False where the source has one organization, or none with rows.
    filters: bool,
}

impl Keyed {
    /// Shows the organizations `orgs` (of a fleet warehouse or a lake; one organization's
    /// warehouse shows its own).
    pub fn select(&self, orgs: &[String]) -> Result<&duckdb::Connection, QueryError> {
        if self.filters {
            self.conn.execute_batch(&crate::load::warehouse::keyed_to(orgs)).map_err(db)?;
        }
        Ok(&self.conn)
    }
}

/// A named query's batch without its `organization` key: one organization's answer, as
/// `creator-etl query` prints it.
fn without_organization(batch: &RecordBatch) -> Result<RecordBatch, QueryError> {
    let schema = batch.schema();
    match schema.index_of(crate::load::catalog::ORGANIZATION) {
        Ok(i) => {
            let mut batch = batch.clone();
            batch.remove_column(i);
            Ok(batch)
        }
        Err(_) => Err(QueryError::Db(format!(
            "a named query answers without `{}`, its key",
            crate::load::catalog::ORGANIZATION
        ))),
    }
}

/// The organization a query reads of a lake or fleet warehouse that holds `holds`: the one
/// `--org` names; for a named query (`query` prints one organization's answer), the only one;
/// for a SQL file without `--org`, every one.
fn pick_organization(
    within: &'static str,
    org: Option<&str>,
    holds: Vec<String>,
    named: bool,
) -> Result<Option<String>, QueryError> {
    match org {
        Some(org) if !holds.iter().any(|h| h == org) => {
            Err(QueryError::UnknownOrganization { within, org: org.to_owned(), holds })
        }
        Some(org) => Ok(Some(org.to_owned())),
        None if named && holds.len() > 1 => Err(QueryError::ManyOrganizations { within, holds }),
        None if named => Ok(holds.first().cloned()),
        None => Ok(None),
    }
}

/// The organizations a fleet warehouse holds rows of.
fn fleet_organizations(conn: &duckdb::Connection) -> Result<Vec<String>, QueryError> {
    let union: Vec<String> =
        crate::load::catalog::fleet_tables().iter().map(|t| format!("SELECT DISTINCT organization FROM {t}")).collect();
    let mut stmt = conn.prepare(&format!("{} ORDER BY 1", union.join(" UNION "))).map_err(db)?;
    let orgs = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(db)?;
    orgs.collect::<Result<Vec<_>, _>>().map_err(db)
}

/// An in-memory connection with the fleet warehouse at `path` attached read-only, and a view
/// per table of the `rows` (see [`Rows`]), and the warehouse's views over them (none for
/// [`Rows::Every`]: a SQL file that reads every organization reads the tables).
fn fleet_views(path: &Path, rows: Rows<'_>) -> Result<duckdb::Connection, QueryError> {
    use crate::load::warehouse::sql_literal;
    let conn = duckdb::Connection::open_in_memory().map_err(db)?;
    crate::load::warehouse::no_downloads(&conn).map_err(db)?;
    let mut sql = format!("ATTACH {} AS fleet (READ_ONLY);\n", sql_literal(&path.display().to_string()));
    for t in crate::load::catalog::fleet_tables() {
        let select = crate::load::warehouse::organization_select(&format!("fleet.{t}"), rows, &["organization"]);
        sql.push_str(&format!("CREATE VIEW {t} AS {select};\n"));
    }
    if !matches!(rows, Rows::Every) {
        sql.push_str(&crate::load::catalog::views_sql(matches!(rows, Rows::Keyed)));
    }
    conn.execute_batch(&sql).map_err(db)?;
    Ok(conn)
}

/// A read-only connection to a warehouse file.
pub fn open_warehouse(path: &Path) -> Result<duckdb::Connection, QueryError> {
    if !path.is_file() {
        return Err(QueryError::NoWarehouse(path.display().to_string()));
    }
    let flags = duckdb::Config::default().access_mode(duckdb::AccessMode::ReadOnly).map_err(db)?;
    let conn = duckdb::Connection::open_with_flags(path, flags).map_err(db)?;
    crate::load::warehouse::no_downloads(&conn).map_err(db)?;
    Ok(conn)
}

/// Runs a query's SQL with its parameters on a connection.
pub fn execute(conn: &duckdb::Connection, config: &QueryConfig) -> Result<Vec<RecordBatch>, QueryError> {
    for (k, v) in &config.params {
        // The name is checked to be an identifier; the value is a string literal, quotes doubled.
        conn.execute_batch(&format!("SET VARIABLE {k} = '{}';", v.replace('\'', "''"))).map_err(db)?;
    }
    let mut stmt = conn.prepare(&config.sql).map_err(db)?;
    let arrow = stmt.query_arrow([]).map_err(db)?;
    let schema = arrow.get_schema();
    let mut batches: Vec<RecordBatch> = arrow.collect();
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    batches.iter().map(utc_as_offset).collect()
}

/// DuckDB labels TIMESTAMPTZ columns `UTC`. Arrow prints only offset zones
/// without its chrono-tz feature, so the label becomes `+00:00`: the same instant, same values.
fn utc_as_offset(batch: &RecordBatch) -> Result<RecordBatch, QueryError> {
    use duckdb::arrow::datatypes::{Field, Schema};
    let mut fields = vec![];
    let mut columns = vec![];
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Timestamp(unit, Some(tz)) if tz.eq_ignore_ascii_case("utc") => {
                let t = DataType::Timestamp(*unit, Some("+00:00".into()));
                let data = column.to_data().into_builder().data_type(t.clone()).build();
                let data = data.map_err(|e| QueryError::Db(e.to_string()))?;
                fields.push(Field::new(field.name(), t, field.is_nullable()));
                columns.push(duckdb::arrow::array::make_array(data));
            }
            _ => {
                fields.push(field.as_ref().clone());
                columns.push(column.clone());
            }
        }
    }
    RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), columns).map_err(|e| QueryError::Db(e.to_string()))
}

/// Renders batches in a format.
pub fn render(batches: &[RecordBatch], format: Format) -> Result<String, QueryError> {
    let fail = |e: duckdb::arrow::error::ArrowError| QueryError::Db(e.to_string());
    match format {
        Format::Table => {
            let mut s = duckdb::arrow::util::pretty::pretty_format_batches(batches).map_err(fail)?.to_string();
            s.push('\n');
            Ok(s)
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(vec![]);
            if let Some(b) = batches.first() {
                w.write_record(b.schema().fields().iter().map(|f| f.name().as_str())).expect("in-memory CSV");
            }
            let options = FormatOptions::default().with_null("");
            for b in batches {
                let fmts = formatters(b, &options)?;
                for row in 0..b.num_rows() {
                    w.write_record(fmts.iter().map(|f| f.value(row).to_string())).expect("in-memory CSV");
                }
            }
            Ok(String::from_utf8_lossy(&w.into_inner().expect("in-memory CSV")).into_owned())
        }
        Format::Json => {
            let mut out = String::new();
            for row in json_rows(batches)? {
                out.push_str(&serde_json::Value::Object(row).to_string());
                out.push('\n');
            }
            Ok(out)
        }
    }
}

/// The rows as JSON objects: what `--format json` prints, a line each.
pub fn json_rows(batches: &[RecordBatch]) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, QueryError> {
    let options = FormatOptions::default();
    let mut rows = vec![];
    for b in batches {
        let schema = b.schema();
        let fmts = formatters(b, &options)?;
        for row in 0..b.num_rows() {
            let mut obj = serde_json::Map::new();
            for (i, field) in schema.fields().iter().enumerate() {
                let value = if b.column(i).is_null(row) {
                    serde_json::Value::Null
                } else {
                    json_value(field.data_type(), &fmts[i].value(row).to_string())
                };
                obj.insert(field.name().clone(), value);
            }
            rows.push(obj);
        }
    }
    Ok(rows)
}

/// A text formatter for each column of a batch.
fn formatters<'a>(b: &'a RecordBatch, options: &'a FormatOptions<'a>) -> Result<Vec<ArrayFormatter<'a>>, QueryError> {
    b.columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| QueryError::Db(e.to_string()))
}

/// A cell as JSON: numbers and booleans as such, everything else as its text.
fn json_value(t: &DataType, text: &str) -> serde_json::Value {
    let numeric = t.is_integer() || t.is_floating() || matches!(t, DataType::Decimal128(..));
    if numeric {
        if let Ok(n) = text.parse::<serde_json::Number>() {
            return serde_json::Value::Number(n);
        }
    }
    if matches!(t, DataType::Boolean) {
        return serde_json::Value::Bool(text == "true");
    }
    serde_json::Value::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_query_documents_its_purpose_params_and_columns() {
        for (name, sql) in QUERIES {
            assert!(sql.starts_with(&format!("-- {name}: ")), "{name} opens with its purpose");
            assert!(sql.lines().any(|l| l.starts_with("-- params:")), "{name} lists its params");
            assert!(!declared_columns(sql).is_empty(), "{name} lists its columns");
            let on_disk =
                std::fs::read_to_string(format!("{}/queries/{name}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
            assert_eq!(on_disk, sql);
        }
        assert_eq!(declared_params(QUERIES[0].1), ["days"]);
        assert!(declared_params(named("cohort_acceptance").unwrap()).is_empty(), "`(none)` declares nothing");
    }

    /// Every named query is written with `organization` as its key: it answers with
    /// `organization` first, then the columns its header declares (what `query` prints).
    #[test]
    fn every_named_query_is_keyed_by_organization() {
        let reader = Reader::nothing(vec!["a".into(), "b".into()]);
        let keyed = reader.keyed().unwrap();
        keyed.select(&["a".into()]).unwrap();
        for (name, sql) in QUERIES {
            let source = Source::Warehouse { path: PathBuf::from("w.duckdb"), org: None };
            let config = QueryConfig::new(source, name, &[], Format::Json).unwrap();
            let batches = execute(&keyed.conn, &config).unwrap();
            let schema = batches[0].schema();
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(names[0], "organization", "{name}");
            assert_eq!(names[1..], declared_columns(sql), "{name}");
            let one = without_organization(&batches[0]).unwrap();
            assert_eq!(one.schema().fields().len(), names.len() - 1, "{name}");
        }
    }

    #[test]
    fn params_are_checked_against_the_declaration() {
        let w = Source::Warehouse { path: PathBuf::from("w.duckdb"), org: None };
        assert!(QueryConfig::new(w.clone(), "wow_latest", &["days=30".into()], Format::Table).is_ok());
        let e = QueryConfig::new(w.clone(), "wow_latest", &["dayz=30".into()], Format::Table).unwrap_err();
        assert_eq!(e.to_string(), "`--param dayz`: the query takes only days");
        let e = QueryConfig::new(w.clone(), "wow_latest", &["days".into()], Format::Table).unwrap_err();
        assert!(matches!(e, QueryError::BadParam(_)));
        let e = QueryConfig::new(w, "nope", &[], Format::Table).unwrap_err();
        assert!(e.to_string().contains("wow_latest, movers, weekly_trend"), "{e}");
    }
}
