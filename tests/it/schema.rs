//! The warehouses match the table catalog (`creator_etl::load::catalog`): a freshly made one, one
//! upgraded from schema version 1 (a fixture under `tests/it/fixtures/`), and the fleet
//! warehouse, fresh and upgraded: every table's and view's columns, their types and whether they
//! may be NULL, and the keys each declares.

use std::collections::BTreeMap;
use std::path::Path;

use creator_etl::load::catalog::{self, Shape};
use creator_etl::out::OutDir;

/// Per table or view: its columns as (name, type, nullable), in order.
type Columns = BTreeMap<String, Vec<(String, String, bool)>>;

/// What a warehouse's DuckDB catalog says: its columns, and each table's declared primary key.
fn schema_of(conn: &duckdb::Connection) -> (Columns, BTreeMap<String, Vec<String>>) {
    let mut columns = Columns::new();
    let mut stmt = conn
        .prepare(
            "SELECT table_name, column_name, data_type, is_nullable FROM duckdb_columns() \
             WHERE database_name = current_database() AND NOT internal ORDER BY table_name, column_index",
        )
        .unwrap();
    for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap() {
        let (table, column, ty, nullable): (String, String, String, bool) = row.unwrap();
        columns.entry(table).or_default().push((column, ty, nullable));
    }
    let mut keys = BTreeMap::new();
    let mut stmt = conn
        .prepare(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() \
             WHERE database_name = current_database() AND constraint_type = 'PRIMARY KEY'",
        )
        .unwrap();
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, duckdb::types::Value>(1)?))).unwrap() {
        let (table, names) = row.unwrap();
        let names = match names {
            duckdb::types::Value::List(items) => items
                .into_iter()
                .map(|v| match v {
                    duckdb::types::Value::Text(t) => t,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        };
        keys.insert(table, names);
    }
    (columns, keys)
}

/// What the catalog says a warehouse of `shape` holds.
fn catalog_of(shape: Shape) -> (Columns, BTreeMap<String, Vec<String>>) {
    let mut columns = Columns::new();
    let mut keys = BTreeMap::new();
    for t in catalog::tables_of(shape) {
        let mut cols = vec![];
        if shape == Shape::Fleet {
            cols.push(("organization".to_owned(), "VARCHAR".to_owned(), false));
        }
        cols.extend(t.columns.iter().map(|c| (c.name.to_owned(), c.ty.catalog_name().to_owned(), c.nullable)));
        columns.insert(t.name.to_owned(), cols);
        if t.declares_key(shape) {
            keys.insert(t.name.to_owned(), t.key_of(shape).into_iter().map(str::to_owned).collect());
        }
    }
    let version = catalog::TABLES.iter().find(|t| t.name == "schema_version").unwrap();
    columns.insert(
        shape.version_table().to_owned(),
        version.columns.iter().map(|c| (c.name.to_owned(), c.ty.catalog_name().to_owned(), c.nullable)).collect(),
    );
    if shape == Shape::One {
        for v in catalog::VIEWS {
            // A view's columns may all be NULL as DuckDB sees them.
            columns.insert(
                v.name.to_owned(),
                v.columns.iter().map(|c| (c.name.to_owned(), c.ty.catalog_name().to_owned(), true)).collect(),
            );
        }
    }
    (columns, keys)
}

#[track_caller]
fn assert_matches_catalog(conn: &duckdb::Connection, shape: Shape, what: &str) {
    let (columns, keys) = schema_of(conn);
    let (want_columns, want_keys) = catalog_of(shape);
    for (table, want) in &want_columns {
        assert_eq!(columns.get(table), Some(want), "{what}: `{table}`'s columns");
    }
    let extra: Vec<&String> = columns.keys().filter(|t| !want_columns.contains_key(*t)).collect();
    assert!(extra.is_empty(), "{what}: tables the catalog does not have: {extra:?}");
    assert_eq!(keys, want_keys, "{what}: declared keys");
    let version: i32 =
        conn.query_row(&format!("SELECT max(version) FROM {}", shape.version_table()), [], |r| r.get(0)).unwrap();
    assert_eq!(version, shape.version(), "{what}: the schema version");
}

/// A warehouse file made from a fixture's SQL, in `OUT/state/` as the writer's.
fn from_fixture(out: &Path, fixture: &str) {
    let writer = OutDir::new(out).writer_warehouse();
    std::fs::create_dir_all(writer.parent().unwrap()).unwrap();
    let sql =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures").join(fixture)).unwrap();
    duckdb::Connection::open(&writer).unwrap().execute_batch(&sql).unwrap();
}

#[test]
fn fresh_and_upgraded_warehouses_match_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = OutDir::new(dir.path().join("fresh"));
    assert_matches_catalog(
        &creator_etl::load::warehouse::open_writer(&fresh).unwrap(),
        Shape::One,
        "a fresh warehouse",
    );

    let old = dir.path().join("old");
    from_fixture(&old, "warehouse_v1.sql");
    let conn = creator_etl::load::warehouse::open_writer(&OutDir::new(&old)).unwrap();
    assert_matches_catalog(&conn, Shape::One, "a warehouse upgraded from version 1");
    let kept: (i64, i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM applications), (SELECT count(*) FROM application_status_history), \
             (SELECT count(*) FROM runs WHERE warnings = 0 AND sync_mode = 'full')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(kept, (1, 1, 1), "its rows kept, the new columns filled as the migrations say");
    let versions: i64 = conn.query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0)).unwrap();
    assert_eq!(versions, i64::from(Shape::One.version()), "one row per version");
}

#[test]
fn fresh_and_upgraded_fleet_warehouses_match_the_catalog() {
    use creator_etl::load::fleet_warehouse::FleetWarehouse;
    let dir = tempfile::tempdir().unwrap();
    let grace = std::time::Duration::from_secs(3600);
    let fresh = OutDir::new(dir.path().join("fresh"));
    drop(FleetWarehouse::open(&fresh, grace).unwrap());
    let conn = duckdb::Connection::open(fresh.writer_warehouse()).unwrap();
    assert_matches_catalog(&conn, Shape::Fleet, "a fresh fleet warehouse");
    drop(conn);

    let old = dir.path().join("old");
    from_fixture(&old, "fleet_v1.sql");
    drop(FleetWarehouse::open(&OutDir::new(&old), grace).unwrap());
    let conn = duckdb::Connection::open(OutDir::new(&old).writer_warehouse()).unwrap();
    assert_matches_catalog(&conn, Shape::Fleet, "a fleet warehouse upgraded from version 1");
    let kept: i64 = conn.query_row("SELECT count(*) FROM application_status_history", [], |r| r.get(0)).unwrap();
    assert_eq!(kept, 1, "its rows kept");
}

#[test]
fn the_data_dictionary_names_every_table_view_and_column() {
    let dictionary = catalog::dictionary();
    for t in catalog::TABLES {
        assert!(dictionary.contains(&format!("## `{}`", t.name)), "{}", t.name);
        for c in t.columns {
            assert!(dictionary.contains(&format!("| `{}` | {} |", c.name, c.ty.sql())), "{}.{}", t.name, c.name);
        }
    }
    for v in catalog::VIEWS {
        assert!(dictionary.contains(&format!("## `{}` (view)", v.name)), "{}", v.name);
    }
}
