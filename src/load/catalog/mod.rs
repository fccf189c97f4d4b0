//! The table catalog: every table and view of the warehouse, declared once. Everything else is
//! made from it: the DDL of one organization's warehouse and of the fleet warehouse, the
//! migrations' steps, each table's order and partitioning in the Parquet tree and the lake, the
//! lists of exported, lake and fleet tables, the lake's table schemas, and the data dictionary
//! of the manual (`creator-etl`'s table pages).
//!
//! **Keys.** One organization's warehouse declares every key (`PRIMARY KEY`). The fleet warehouse
//! keys every table by `organization` first; it declares the keys of the small tables (`runs`,
//! `action_results`) and checks those of the data tables (before each batch's transaction) and of
//! the history (inside it, before the commit) instead ([`FleetKey::Checked`]): DuckDB's key index made a batch's commit take
//! 2.3 s against 0.45 s without it (BENCHMARKS.md).
//!
//! **A schema change** is one entry here (a column, a table) plus one migration step
//! ([`ONE_MIGRATIONS`], [`FLEET_MIGRATIONS`]): a step names what changed, and takes its
//! definition from the catalog, so the schema is written once.

mod migrations;
mod tables;
#[cfg(test)]
mod tests;

pub use migrations::{fill_of, former_names, migration_sql, Step, FLEET_MIGRATIONS, ONE_MIGRATIONS};
use tables::{ACTION_JOURNAL, SCHEMA_VERSION};
pub use tables::{TABLES, VIEWS};

/// A column's DuckDB type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    BigInt,
    Integer,
    Double,
    Boolean,
    Varchar,
    Date,
    TimestampTz,
}

impl Type {
    /// The type as DDL writes it.
    pub fn sql(self) -> &'static str {
        match self {
            Type::BigInt => "BIGINT",
            Type::Integer => "INTEGER",
            Type::Double => "DOUBLE",
            Type::Boolean => "BOOLEAN",
            Type::Varchar => "VARCHAR",
            Type::Date => "DATE",
            Type::TimestampTz => "TIMESTAMPTZ",
        }
    }

    /// The type as DuckDB's catalog (`duckdb_columns()`) names it.
    pub fn catalog_name(self) -> &'static str {
        match self {
            Type::TimestampTz => "TIMESTAMP WITH TIME ZONE",
            other => other.sql(),
        }
    }
}

/// A column: its name, type, whether it may be NULL, its default, and what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ty: Type,
    pub nullable: bool,
    pub default: Option<&'static str>,
    /// One line for the data dictionary.
    pub about: &'static str,
}

/// A column that may be NULL.
pub(super) const fn null(name: &'static str, ty: Type, about: &'static str) -> Column {
    Column { name, ty, nullable: true, default: None, about }
}

/// A column that is never NULL.
pub(super) const fn req(name: &'static str, ty: Type, about: &'static str) -> Column {
    Column { name, ty, nullable: false, default: None, about }
}

/// How a load (or an actions run) writes a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Rebuilt at every load from the transform's frame of the same name.
    Frame,
    /// The status history (SCD type 2), carried forward by every load from `applications`.
    History,
    /// One row per loaded run: the ledger.
    Ledger,
    /// The actions' exactly-once record, written by the actions.
    Journal,
    /// Every row of every applied reviewed file.
    Results,
    /// The schema versions applied to the warehouse.
    Version,
    /// The fleet warehouse's record of each organization's frames as last loaded
    /// (`frame_fingerprints`): only there, and not an organization's data (readers, adoptions
    /// and reports leave it out).
    Fingerprints,
}

/// How the fleet warehouse keeps a table's key (`organization` first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetKey {
    /// A `PRIMARY KEY` constraint.
    Declared,
    /// No constraint: every batch's rows are checked before its transaction.
    Checked,
}

/// One organization's warehouse, or the fleet warehouse (every table keyed by `organization`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    One,
    Fleet,
}

impl Shape {
    /// The table that records the schema versions applied, and marks the warehouse's shape.
    pub fn version_table(self) -> &'static str {
        match self {
            Shape::One => "schema_version",
            Shape::Fleet => "fleet_schema_version",
        }
    }

    /// The schema version this release writes.
    pub fn version(self) -> i32 {
        self.migrations().last().map_or(0, |(v, _)| *v)
    }

    /// The migrations, by version.
    pub fn migrations(self) -> &'static [(i32, &'static [Step])] {
        match self {
            Shape::One => ONE_MIGRATIONS,
            Shape::Fleet => FLEET_MIGRATIONS,
        }
    }
}

/// A table.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    /// What one row is, for the data dictionary.
    pub about: &'static str,
    pub columns: &'static [Column],
    /// The key, and the Parquet export's order.
    pub key: &'static [&'static str],
    pub role: Role,
    /// In the fleet warehouse, with `organization` first, and how its key is kept; `None`: not
    /// there (the journal stays in each organization's own state).
    pub fleet: Option<FleetKey>,
    /// Exported to the Parquet tree (`OUT/parquet/<table>`).
    pub exported: bool,
    /// Committed to the lake (`<lake>/<table>`, partitioned by `organization`).
    pub lake: bool,
    /// Also partitioned by `year(date)` in the Parquet tree and the lake.
    pub by_year: bool,
}

/// The action journal's name: the one table an actions stage writes that a load does not.
pub const JOURNAL: &str = ACTION_JOURNAL.name;

/// The `year` partition column, made from `date`.
pub const YEAR: &str = "year";
/// The column of a table of many organizations (the fleet warehouse, the lake).
pub const ORGANIZATION: &str = "organization";

/// A view over the tables: its columns, for the dictionary and the schema check; its SQL is
/// [`views_sql`].
#[derive(Debug)]
pub struct View {
    pub name: &'static str,
    pub about: &'static str,
    pub columns: &'static [Column],
}

/// The views' SQL (`CREATE OR REPLACE VIEW`), with `{key}` where a view is keyed by
/// organization ([`views_sql`]).
const VIEWS_TEMPLATE: &str = include_str!("views.sql");

/// The views' SQL: the warehouse makes them, and the readers of the lake and of the fleet
/// warehouse make them over their views of the tables; `keyed` over tables with `organization`
/// (the named queries' views), each view then keyed by it.
pub fn views_sql(keyed: bool) -> String {
    VIEWS_TEMPLATE.replace("{key}", if keyed { "organization, " } else { "" })
}

/// The table named `name`.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.into_iter().find(|t| t.name == name)
}

/// The tables rebuilt from the transform's frames at every load, in catalog order.
pub fn frames() -> impl Iterator<Item = &'static Table> {
    TABLES.into_iter().filter(|t| t.role == Role::Frame)
}

/// The tables of the Parquet tree, in catalog order.
pub fn exported() -> Vec<&'static str> {
    TABLES.into_iter().filter(|t| t.exported).map(|t| t.name).collect()
}

/// The tables of a warehouse of `shape`, in catalog order (the version table aside).
pub fn tables_of(shape: Shape) -> Vec<&'static Table> {
    TABLES
        .into_iter()
        .filter(|t| t.role != Role::Version)
        .filter(|t| match shape {
            Shape::One => t.role != Role::Fingerprints,
            Shape::Fleet => t.fleet.is_some(),
        })
        .collect()
}

/// The names of the fleet warehouse's tables of organizations' data (every one keyed by
/// `organization`): those a reader, an adoption or a report reads. Its `frame_fingerprints`
/// aside.
pub fn fleet_tables() -> Vec<&'static str> {
    tables_of(Shape::Fleet).into_iter().filter(|t| t.role != Role::Fingerprints).map(|t| t.name).collect()
}

/// The fleet warehouse's record of each organization's frames as last loaded.
pub const FINGERPRINTS: &str = tables::FRAME_FINGERPRINTS.name;

/// The lake's tables that `query --lake` reads, in commit order: `runs` last, the marker that a
/// sync is complete.
pub fn lake_tables() -> Vec<&'static str> {
    TABLES.into_iter().filter(|t| t.lake && t.role != Role::Journal).map(|t| t.name).collect()
}

/// Every table a load commits to the lake, in commit order: the journal first (what an actions
/// stage sent reaches the lake before anything else), then [`lake_tables`], `runs` last.
pub fn committed_tables() -> Vec<&'static str> {
    let mut t: Vec<&'static str> = TABLES.into_iter().filter(|t| t.role == Role::Journal).map(|t| t.name).collect();
    t.extend(lake_tables());
    t
}

impl Table {
    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&'static Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The key, `organization` first in a fleet warehouse.
    pub fn key_of(&self, shape: Shape) -> Vec<&'static str> {
        let org = (shape == Shape::Fleet && !self.key.is_empty()).then_some(ORGANIZATION);
        org.into_iter().chain(self.key.iter().copied()).collect()
    }

    /// Whether a warehouse of `shape` declares the key as a constraint.
    pub fn declares_key(&self, shape: Shape) -> bool {
        !self.key.is_empty() && (shape == Shape::One || self.fleet == Some(FleetKey::Declared))
    }

    /// The Parquet export's order: the key.
    pub fn order_by(&self) -> String {
        self.key.join(", ")
    }

    /// The partition columns of a table of many organizations (the lake, the fleet's Parquet
    /// tree): `organization`, and `year` for the daily tables.
    pub fn partitions(&self) -> Vec<&'static str> {
        std::iter::once(ORGANIZATION).chain(self.by_year.then_some(YEAR)).collect()
    }

    /// The table's columns and key as a warehouse of `shape` declares them (the body of its
    /// `CREATE TABLE`).
    pub fn columns_sql(&self, shape: Shape) -> String {
        let mut parts: Vec<String> = vec![];
        if shape == Shape::Fleet {
            parts.push(format!("{ORGANIZATION} VARCHAR NOT NULL"));
        }
        for c in self.columns {
            parts.push(column_sql(c));
        }
        if self.declares_key(shape) {
            parts.push(format!("PRIMARY KEY ({})", self.key_of(shape).join(", ")));
        }
        parts.join(", ")
    }

    /// The statement that creates the table in a warehouse of `shape`, as `name` (the table's own
    /// name, or a new one to swap in).
    pub fn create_sql(&self, shape: Shape, name: &str) -> String {
        create_table(name, &self.columns_sql(shape))
    }
}

/// A column as DDL declares it.
fn column_sql(c: &Column) -> String {
    let mut s = format!("{} {}", c.name, c.ty.sql());
    if !c.nullable {
        s.push_str(" NOT NULL");
    }
    if let Some(d) = c.default {
        s.push_str(&format!(" DEFAULT {d}"));
    }
    s
}

/// The one `CREATE TABLE` of the crate: every table is made from the catalog through it.
fn create_table(name: &str, body: &str) -> String {
    format!("CREATE TABLE {name} ({body});\n")
}

/// The statements that create a warehouse of `shape` as the catalog has it now, in one go: every
/// table, the version table with every version recorded, and the views.
pub fn create_all_sql(shape: Shape) -> String {
    let mut sql = create_version_table_sql(shape);
    for t in tables_of(shape) {
        sql.push_str(&t.create_sql(shape, t.name));
    }
    for (version, _) in shape.migrations() {
        sql.push_str(&format!("INSERT INTO {} VALUES ({version}, now());\n", shape.version_table()));
    }
    if shape == Shape::One {
        sql.push_str(&views_sql(false));
    }
    sql
}

/// The version table of a warehouse of `shape` (made when missing).
pub fn create_version_table_sql(shape: Shape) -> String {
    let body = SCHEMA_VERSION.columns.iter().map(column_sql).collect::<Vec<_>>().join(", ");
    create_table(&format!("IF NOT EXISTS {}", shape.version_table()), &body)
}

/// The data dictionary, as the manual's table pages show it (Markdown): every table and view,
/// its key, where it goes, and every column with its type and meaning.
pub fn dictionary() -> String {
    let mut md = String::new();
    let table_rows = |md: &mut String, columns: &[Column]| {
        md.push_str("| column | type | null | meaning |\n|---|---|---|---|\n");
        for c in columns {
            md.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                c.name,
                c.ty.sql(),
                if c.nullable { "yes" } else { "no" },
                c.about.replace('|', "\\|")
            ));
        }
    };
    for t in TABLES {
        md.push_str(&format!("## `{}`\n\n{}\n\n", t.name, t.about));
        let mut facts = vec![];
        if !t.key.is_empty() {
            let key: Vec<String> = t.key.iter().map(|k| format!("`{k}`")).collect();
            facts.push(format!("Key: ({}).", key.join(", ")));
        }
        let mut goes = vec![];
        if t.exported {
            goes.push(format!(
                "the Parquet tree (`parquet/{}/`{})",
                t.name,
                if t.by_year { ", partitioned by `year`" } else { "" }
            ));
        }
        if t.lake {
            goes.push(format!("the lake (`<lake>/{}`, partitioned by {})", t.name, {
                let p: Vec<String> = t.partitions().iter().map(|c| format!("`{c}`")).collect();
                p.join(" and ")
            }));
        }
        match t.fleet {
            Some(FleetKey::Declared) => goes.push("the fleet warehouse (with `organization`, in its key)".into()),
            Some(FleetKey::Checked) => {
                goes.push("the fleet warehouse (with `organization`; its key checked per batch, not declared)".into())
            }
            None => {}
        }
        if !goes.is_empty() {
            let only = !tables_of(Shape::One).iter().any(|one| one.name == t.name);
            facts.push(format!("{} {}.", if only { "Only in" } else { "Also in" }, goes.join("; ")));
        }
        if !facts.is_empty() {
            md.push_str(&facts.join(" "));
            md.push_str("\n\n");
        }
        table_rows(&mut md, t.columns);
        md.push('\n');
    }
    for v in VIEWS {
        md.push_str(&format!("## `{}` (view)\n\n{}\n\n", v.name, v.about));
        table_rows(&mut md, v.columns);
        md.push('\n');
    }
    md
}
