//! Queries over the shared lake, with no DuckDB extension: delta-rs resolves each table's current
//! snapshot (its Delta log) to the exact Parquet files it holds, and DuckDB reads those files
//! with its built-in Parquet reader, as views named like the warehouse's tables.
//!
//! - A `file://` lake is read in place.
//! - An `s3://` lake's files are fetched once, through the same AWS configuration the writer
//!   uses, into a local cache (`OUT/lake-cache/`, by table and partition). Delta data files are
//!   never rewritten under the same name, so a cached file stays valid; files no snapshot names
//!   any more (of any organization) are pruned after an hour.
//! - The Delta log is input like any other: a data file's path must be relative and plain
//!   ([`inside_table`]), or the table is refused.
//! - With `--org NAME` only that organization's files are read. A SQL file's views have exactly
//!   the warehouse's columns; without `--org` they add the `organization` column (and `year`
//!   where the table is partitioned by it). The named queries read views with the warehouse's
//!   columns and `organization` ([`Rows::Keyed`]), and answer as they do on that organization's
//!   own warehouse; `query` prints one organization's answer, so they refuse a lake that holds
//!   several without `--org`.
//!
//! Each table is read at its own current version (reported by [`Snapshot::versions`]), `runs`
//! first: the writer commits `runs` last, so an organization listed there has a completed sync
//! in every other table. A table may already hold a newer sync's rows than `runs` lists (one
//! committed while the tables were resolved), and the tables of an organization being synced
//! may come from two syncs. `--at-versions` reads every table at the versions one load
//! committed: exactly that sync.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::DeltaTable;
use futures_util::{StreamExt, TryStreamExt};

use super::QueryError;
use crate::load::catalog;
use crate::load::lake::partition_columns;

/// Cached files that no snapshot names are kept this long, for a query that resolved an
/// older snapshot just before.
const CACHE_GRACE: Duration = Duration::from_secs(3600);

/// Files fetched from object storage at once.
const FETCH_CONCURRENCY: usize = 8;

/// Which lake to read, and how.
#[derive(Clone, Debug)]
pub struct LakeSource {
    /// `file:///…` or `s3://…`, checked, without a trailing slash.
    pub url: String,
    /// Only this organization's rows, with the warehouse's columns.
    pub org: Option<String>,
    /// Where an object-storage lake's files are cached.
    pub cache: PathBuf,
    /// Read every table at these versions (`--at-versions`: a load's `lake.versions`) instead
    /// of its current one.
    pub at_versions: Option<BTreeMap<String, u64>>,
}

/// The table versions a load or run report committed: its `lake.versions` (a `load` report) or
/// `load.lake.versions` (a `run` report), for `query --at-versions FILE`.
pub fn versions_of_report(path: &Path) -> Result<BTreeMap<String, u64>, QueryError> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|source| QueryError::Read { path: shown.to_string(), source })?;
    let report: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| QueryError::Versions(format!("`{shown}` is not JSON ({e})")))?;
    let versions = [&report["lake"]["versions"], &report["load"]["lake"]["versions"]]
        .into_iter()
        .find(|v| v.is_object())
        .ok_or_else(|| {
            QueryError::Versions(format!(
                "`{shown}` has no `lake.versions`: give the JSON report that `load --lake` or `run --lake` printed"
            ))
        })?;
    serde_json::from_value(versions.clone()).map_err(|e| {
        QueryError::Versions(format!("`{shown}`: `lake.versions` is not a map of tables to versions ({e})"))
    })
}

/// One table of the snapshot, as DuckDB will read it.
#[derive(Clone, Debug)]
pub struct TableFiles {
    pub table: &'static str,
    pub version: u64,
    /// Local Parquet files, laid out `…/column=value/…` (Hive style) as delta-rs writes them.
    pub files: Vec<PathBuf>,
    /// Partition columns and their DuckDB types.
    pub partitions: Vec<(String, &'static str)>,
    /// With no file to read: an empty Parquet file that has the table's schema.
    pub empty: Option<PathBuf>,
    /// With files to read: an empty Parquet file with the table's current columns (partition
    /// columns aside), laid out as a partition, read with them. Files written before a column
    /// was added (an older creator-etl) then read it as NULL, even when every file of the
    /// organization predates it.
    pub schema_file: Option<PathBuf>,
}

use crate::load::warehouse::Rows;

/// The lake's current snapshot, resolved to local files.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Every organization with rows in any table.
    pub organizations: BTreeSet<String>,
    pub tables: Vec<TableFiles>,
}

impl Snapshot {
    /// The version each table was read at.
    pub fn versions(&self) -> BTreeMap<&'static str, u64> {
        self.tables.iter().map(|t| (t.table, t.version)).collect()
    }

    /// The SQL that makes one view per table, with the warehouse's views, of the `rows` (see
    /// [`Rows`]): of one organization, with the warehouse's columns; of every organization, with
    /// the partition columns too; or the named queries' views, with `organization`.
    pub fn views_sql(&self, rows: Rows<'_>) -> String {
        let mut sql = String::new();
        for t in &self.tables {
            let source = match &t.empty {
                Some(empty) => format!("read_parquet({})", quote(&empty.display().to_string())),
                None => {
                    let files: Vec<String> =
                        t.files.iter().chain(&t.schema_file).map(|f| quote(&f.display().to_string())).collect();
                    let types: Vec<String> = t.partitions.iter().map(|(c, ty)| format!("'{c}': {ty}")).collect();
                    format!(
                        "read_parquet([{}], hive_partitioning = true, hive_types = {{{}}}, union_by_name = true)",
                        files.join(", "),
                        types.join(", ")
                    )
                }
            };
            let hidden: Vec<&str> = t.partitions.iter().map(|(c, _)| c.as_str()).collect();
            let select = crate::load::warehouse::organization_select(&source, rows, &hidden);
            sql.push_str(&format!("CREATE VIEW {} AS {select};\n", t.table));
        }
        // The warehouse's own views over those tables: of one organization, or keyed.
        if !matches!(rows, Rows::Every) {
            sql.push_str(&crate::load::catalog::views_sql(matches!(rows, Rows::Keyed)));
        }
        sql
    }
}

/// A SQL string literal.
fn quote(s: &str) -> String {
    crate::load::warehouse::sql_literal(s)
}

fn lake_err(table: &str, e: impl std::fmt::Display) -> QueryError {
    QueryError::Lake(format!("`{table}`: {e}"))
}

/// A cache write that failed, with its cause.
fn cache_err(table: &str, e: crate::out::OutError) -> QueryError {
    match std::error::Error::source(&e) {
        Some(cause) => lake_err(table, format!("{e}: {cause}")),
        None => lake_err(table, e),
    }
}

/// DuckDB's name for a partition column's Arrow type (Hive values are text in paths).
fn duckdb_type(t: &deltalake::arrow::datatypes::DataType) -> &'static str {
    use deltalake::arrow::datatypes::DataType as T;
    match t {
        T::Int64 => "BIGINT",
        T::Int32 => "INTEGER",
        T::Int16 => "SMALLINT",
        T::Date32 => "DATE",
        _ => "VARCHAR",
    }
}

/// Resolves every table's current snapshot to local files: in place for `file://`, fetched into
/// the cache for object storage.
pub async fn resolve(source: &LakeSource) -> Result<Snapshot, QueryError> {
    resolve_tables(source, &catalog::lake_tables(), false).await
}

/// Resolves the named tables like [`resolve`]. With `missing_ok`, a table the lake does not hold
/// yet is left out of the snapshot instead of refused.
pub async fn resolve_tables(
    source: &LakeSource,
    wanted_tables: &[&'static str],
    missing_ok: bool,
) -> Result<Snapshot, QueryError> {
    deltalake::aws::register_handlers(None);
    let cache = source.cache.join(format!("{:08x}", crate::api::fnv1a(source.url.as_bytes())));
    let mut organizations = BTreeSet::new();
    let mut out = vec![];
    // `runs` first: the writer commits it last, so every organization this snapshot of `runs`
    // lists has a completed sync in the data tables resolved after it (at that sync or a newer
    // one).
    let order = wanted_tables.iter().filter(|t| **t == "runs").chain(wanted_tables.iter().filter(|t| **t != "runs"));
    // A local lake without a table is named by the first table missing, in the caller's order.
    if !missing_ok {
        for &table in wanted_tables {
            let dir = reqwest::Url::parse(&format!("{}/{table}", source.url)).ok().and_then(|u| u.to_file_path().ok());
            if dir.is_some_and(|d| !d.join("_delta_log").is_dir()) {
                return Err(QueryError::NoLake { url: source.url.clone(), table: table.to_owned() });
            }
        }
    }
    for &table in order {
        let url = format!("{}/{table}", source.url);
        let parsed = reqwest::Url::parse(&url).map_err(|e| lake_err(table, e))?;
        let local_dir = parsed.to_file_path().ok();
        if local_dir.as_ref().is_some_and(|d| !d.join("_delta_log").is_dir()) {
            if missing_ok {
                continue;
            }
            return Err(QueryError::NoLake { url: source.url.clone(), table: table.to_owned() });
        }
        let mut t = match DeltaTable::try_from_url(parsed).await {
            Ok(t) if t.version().is_some() => t,
            Ok(_) if missing_ok => continue,
            Ok(_) => return Err(QueryError::NoLake { url: source.url.clone(), table: table.to_owned() }),
            Err(e) => return Err(lake_err(table, format!("cannot open `{url}`: {e}"))),
        };
        if let Some(versions) = &source.at_versions {
            let version = *versions
                .get(table)
                .ok_or_else(|| QueryError::Versions(format!("`--at-versions` names no version of `{table}`")))?;
            t.load_version(version)
                .await
                .map_err(|e| lake_err(table, format!("cannot read version {version} (`--at-versions`): {e}")))?;
        }
        let state = t.snapshot().map_err(|e| lake_err(table, e))?;
        let mode = state.metadata().configuration().get("delta.columnMapping.mode").cloned();
        if mode.is_some_and(|m| m != "none") {
            return Err(lake_err(table, "the table uses column mapping, which `query --lake` does not read; read it with Spark, Trino or delta-rs"));
        }
        let schema = state.snapshot().arrow_schema();
        let mut partitions = vec![];
        for column in partition_columns(table) {
            let field = schema.field_with_name(column).map_err(|e| lake_err(table, e))?;
            partitions.push((column.to_string(), duckdb_type(field.data_type())));
        }
        // The snapshot's files: relative path, size, organization; and every file it names, for
        // the cache's pruning.
        let mut wanted = vec![];
        let mut named = vec![];
        for file in state.log_data().iter() {
            if file.deletion_vector_descriptor().is_some() {
                return Err(lake_err(table, "a file has deletion vectors, which `query --lake` does not read; read it with Spark, Trino or delta-rs"));
            }
            let path = file.path().into_owned();
            let relative = inside_table(table, &path)?;
            let values = file.partition_values_map();
            let org = values.get("organization").cloned().flatten().unwrap_or_default();
            // DuckDB takes the partition values from the path: it must say what the log says.
            for (column, value) in &values {
                let segment = format!("{column}={}", value.as_deref().unwrap_or("__HIVE_DEFAULT_PARTITION__"));
                if !path.split('/').any(|s| s == segment) {
                    return Err(lake_err(table, format!("file `{path}` is not laid out by partition (`{segment}`)")));
                }
            }
            organizations.insert(org.clone());
            if source.org.as_ref().is_none_or(|o| *o == org) {
                wanted.push((path, relative.clone(), file.size() as u64));
            }
            named.push(relative);
        }
        let files = match &local_dir {
            Some(dir) => wanted.iter().map(|(_, rel, _)| dir.join(rel)).collect(),
            None => fetch(&t, table, &cache.join(table), &wanted, &named).await?,
        };
        let (empty, schema_file) = if files.is_empty() {
            (Some(empty_file(&cache, table, schema.as_ref())?), None)
        } else {
            (None, Some(schema_file(&cache, table, schema.as_ref())?))
        };
        out.push(TableFiles { table, version: t.version().unwrap_or_default(), files, partitions, empty, schema_file });
    }
    organizations.remove("");
    Ok(Snapshot { organizations, tables: out })
}

/// A data file's path as the Delta log gives it, checked to stay inside its table: relative,
/// made of plain names only. Anyone who can write to the lake's storage can write its log, so an
/// absolute path, a URI, or a `..` would otherwise read from, or write into the cache at, any
/// place on this machine.
fn inside_table(table: &str, path: &str) -> Result<PathBuf, QueryError> {
    use std::path::Component;
    let relative = Path::new(path);
    let plain = !path.is_empty()
        && !path.contains("://")
        && !path.contains('\\')
        && relative.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(lake_err(
            table,
            format!("its Delta log names the data file `{path}`, which is not a plain path inside the table; refusing to read it (creator-etl writes only relative paths: check who writes to this lake)"),
        ));
    }
    Ok(relative.to_path_buf())
}

/// Fetches the files a snapshot names into the cache (those not there yet), and prunes cached
/// files that no snapshot has named for [`CACHE_GRACE`]. `wanted` are (log path, checked
/// relative path, size); `named` is every file of the snapshot, also other organizations' that
/// this query does not read, so that their cached copies stay.
async fn fetch(
    t: &DeltaTable,
    table: &str,
    dir: &Path,
    wanted: &[(String, PathBuf, u64)],
    named: &[PathBuf],
) -> Result<Vec<PathBuf>, QueryError> {
    let store = t.object_store();
    let local: Vec<PathBuf> = wanted.iter().map(|(_, rel, _)| dir.join(rel)).collect();
    let missing: Vec<(String, PathBuf)> = wanted
        .iter()
        .zip(&local)
        .filter(|((_, _, size), path)| std::fs::metadata(path).map_or(true, |m| m.len() != *size))
        .map(|((p, _, _), path)| (p.clone(), path.clone()))
        .collect();
    futures_util::stream::iter(missing)
        .map(|(rel, path)| {
            let store = store.clone();
            async move {
                let failed = |e: deltalake::ObjectStoreError| lake_err(table, format!("cannot fetch `{rel}`: {e}"));
                let got = store.get(&deltalake::Path::from(rel.as_str())).await.map_err(failed)?;
                let bytes = got.bytes().await.map_err(failed)?;
                // A cached file is whole or absent.
                crate::out::write_atomic(&path, &bytes).map_err(|e| cache_err(table, e))
            }
        })
        .buffer_unordered(FETCH_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let keep: Vec<PathBuf> = named.iter().map(|rel| dir.join(rel)).collect();
    prune(dir, &keep);
    Ok(local)
}

/// Removes cached files of a table that the current snapshot does not name and that are older
/// than [`CACHE_GRACE`]. Best effort: a file that cannot be removed stays.
fn prune(dir: &Path, keep: &[PathBuf]) {
    let keep: BTreeSet<&PathBuf> = keep.iter().collect();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if !keep.contains(&path) {
                let old = meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok());
                if old.is_some_and(|age| age > CACHE_GRACE) {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
}

/// An empty Parquet file with a table's current columns except the partition columns, at a
/// path laid out as a partition (`organization=…/year=…`), so DuckDB reads it with the table's
/// files (see [`TableFiles::schema_file`]). It holds no row, so the partition values are moot.
fn schema_file(cache: &Path, table: &str, schema: &deltalake::arrow::datatypes::Schema) -> Result<PathBuf, QueryError> {
    use deltalake::parquet::arrow::ArrowWriter;
    let partitions = partition_columns(table);
    let fields: Vec<_> = schema.fields().iter().filter(|f| !partitions.contains(&f.name().as_str())).cloned().collect();
    let data = std::sync::Arc::new(deltalake::arrow::datatypes::Schema::new(fields));
    let mut writer = ArrowWriter::try_new(vec![], data, None).map_err(|e| lake_err(table, e))?;
    writer.finish().map_err(|e| lake_err(table, e))?;
    let mut path = cache.join("schema").join(table);
    for column in partitions {
        path.push(if column == "year" { "year=0".to_owned() } else { format!("{column}=__schema__") });
    }
    let path = path.join("schema.parquet");
    crate::out::write_atomic(&path, writer.inner()).map_err(|e| cache_err(table, e))?;
    Ok(path)
}

/// An empty Parquet file with a table's schema, for a view over no files.
fn empty_file(cache: &Path, table: &str, schema: &deltalake::arrow::datatypes::Schema) -> Result<PathBuf, QueryError> {
    use deltalake::parquet::arrow::ArrowWriter;
    let mut writer =
        ArrowWriter::try_new(vec![], std::sync::Arc::new(schema.clone()), None).map_err(|e| lake_err(table, e))?;
    writer.finish().map_err(|e| lake_err(table, e))?;
    let path = cache.join("empty").join(format!("{table}.parquet"));
    crate::out::write_atomic(&path, writer.inner()).map_err(|e| cache_err(table, e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_keep_the_warehouse_columns_for_one_organization() {
        let snapshot = Snapshot {
            organizations: ["acme".to_owned()].into(),
            tables: vec![TableFiles {
                table: "content_daily",
                version: 3,
                files: vec!["/l/content_daily/organization=acme/year=2026/a'b.parquet".into()],
                partitions: vec![("organization".into(), "VARCHAR"), ("year".into(), "BIGINT")],
                empty: None,
                schema_file: None,
            }],
        };
        let sql = snapshot.views_sql(Rows::Of("acme"));
        assert!(sql.contains("CREATE OR REPLACE VIEW cohort_acceptance"), "the warehouse's views too");
        let (tables, _) = sql.split_once("-- The warehouse's views").unwrap();
        assert_eq!(
            tables,
            "CREATE VIEW content_daily AS SELECT * EXCLUDE (organization, year) FROM \
             read_parquet(['/l/content_daily/organization=acme/year=2026/a''b.parquet'], hive_partitioning = true, \
             hive_types = {'organization': VARCHAR, 'year': BIGINT}, union_by_name = true) WHERE organization = 'acme';\n"
        );
        assert_eq!(snapshot.versions()["content_daily"], 3);
    }
}
