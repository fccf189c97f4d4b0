//! The table catalog's unit tests.

use super::migrations::{current_name, former_names_in, migration_sql_in};
use super::tables::{APPLICATIONS, RUNS};
use super::*;

#[test]
fn every_key_column_is_a_column_and_never_null() {
    for t in TABLES {
        for k in t.key {
            let c = t.column(k).unwrap_or_else(|| panic!("{}: key column {k}", t.name));
            assert!(!c.nullable, "{}.{k}", t.name);
        }
        assert!(!t.by_year || t.column("date").is_some(), "{}: year is made from date", t.name);
    }
}

#[test]
fn the_lists_keep_their_order() {
    assert_eq!(lake_tables().last(), Some(&"runs"), "the completion marker goes last");
    assert_eq!(committed_tables()[0], "action_journal", "what was sent is committed first");
    assert_eq!(committed_tables().len(), 10);
    assert_eq!(exported().len(), 7);
    assert!(!fleet_tables().contains(&"action_journal"), "the journal stays in each organization's state");
    assert_eq!(ONE_MIGRATIONS.last().unwrap().0, Shape::One.version());
}

#[test]
fn every_migration_step_names_the_catalog() {
    for shape in [Shape::One, Shape::Fleet] {
        for (version, steps) in shape.migrations() {
            // Panics on a name the catalog does not have.
            migration_sql(shape, *version, steps, &|_, _| false);
        }
        // A name that a rename gave up belongs to one column only, and to none of today's: a
        // restore reads a column under its former names, and would read another's values.
        for t in TABLES {
            let mut seen: Vec<&str> = t.columns.iter().map(|c| c.name).collect();
            for c in t.columns {
                for former in former_names(shape, t.name, c.name) {
                    assert!(!seen.contains(&former), "{}.{former} names two columns across the migrations", t.name);
                    seen.push(former);
                }
            }
        }
    }
}

/// A NOT NULL column added with a fill, inside the migration's transaction, on a keyed table
/// that has rows: the rows get the fill, the column is NOT NULL with the catalog's default.
#[test]
fn a_not_null_column_with_a_fill_is_added_in_a_transaction() {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(&create_version_table_sql(Shape::One)).unwrap();
    conn.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
    conn.execute_batch("ALTER TABLE runs DROP COLUMN status; INSERT INTO runs (run_id) VALUES ('r1');").unwrap();
    let steps = [Step::AddColumn { table: "runs", column: "status", fill: Some("'completed'") }];
    let tx = conn.unchecked_transaction().unwrap();
    tx.execute_batch(&migration_sql(Shape::One, 99, &steps, &|t, c| has(&tx, t, c))).unwrap();
    tx.commit().unwrap();
    let status: String = conn.query_row("SELECT status FROM runs WHERE run_id = 'r1'", [], |r| r.get(0)).unwrap();
    assert_eq!(status, "completed");
    let fresh = duckdb::Connection::open_in_memory().unwrap();
    fresh.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
    assert_eq!(run_columns(&conn), run_columns(&fresh));
    assert!(conn.execute("INSERT INTO runs (run_id) VALUES ('r2')", []).is_err(), "NOT NULL, no default");
}

/// A rename and an added NOT NULL column with its fill, applied to a warehouse of the version
/// before: the table ends as the catalog declares it, its rows kept.
#[test]
fn a_rename_and_an_added_column_end_at_the_catalog() {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(&create_version_table_sql(Shape::One)).unwrap();
    conn.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
    conn.execute_batch(
        "ALTER TABLE runs DROP COLUMN sync_mode; ALTER TABLE runs RENAME COLUMN warnings TO warning_count;\
         INSERT INTO runs (run_id, status, warning_count) VALUES ('r1', 'succeeded', 3);",
    )
    .unwrap();
    let steps = [
        Step::RenameColumn { table: "runs", from: "warning_count", to: "warnings" },
        Step::AddColumn { table: "runs", column: "sync_mode", fill: Some("'full'") },
    ];
    conn.execute_batch(&migration_sql(Shape::One, 99, &steps, &|t, c| has(&conn, t, c))).unwrap();
    let columns = |conn: &duckdb::Connection| -> Vec<(String, String, bool)> {
        let mut stmt = conn
            .prepare("SELECT column_name, data_type, is_nullable = 'YES' FROM information_schema.columns WHERE table_name = 'runs' ORDER BY column_name")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    let fresh = duckdb::Connection::open_in_memory().unwrap();
    fresh.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
    assert_eq!(columns(&conn), columns(&fresh));
    let (warnings, mode): (i64, String) = conn
        .query_row("SELECT warnings, sync_mode FROM runs WHERE run_id = 'r1'", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!((warnings, mode.as_str()), (3, "full"));
}

fn has(conn: &duckdb::Connection, table: &str, column: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ?",
        [table, column],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

fn run_columns(conn: &duckdb::Connection) -> Vec<(String, String, bool)> {
    let mut stmt = conn
        .prepare("SELECT column_name, data_type, is_nullable = 'YES' FROM information_schema.columns WHERE table_name = 'runs' ORDER BY column_name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
}

/// A column added at one version and renamed at later ones (twice), written as the steps name
/// it: a warehouse from before the addition gets it under its first name, then renamed each
/// time; one whose table was made with the catalog's current names skips every step. Both end
/// as the catalog says, and a restore finds the column under each former name.
#[test]
fn a_column_added_then_renamed_migrates_from_any_version() {
    let migrations: &[(i32, &[Step])] = &[
        (2, &[Step::AddColumn { table: "runs", column: "warning_count", fill: Some("0") }]),
        (3, &[Step::RenameColumn { table: "runs", from: "warning_count", to: "warning_total" }]),
        (4, &[Step::RenameColumn { table: "runs", from: "warning_total", to: "warnings" }]),
    ];
    assert_eq!(current_name(migrations, 2, "runs", "warning_count"), "warnings");
    assert_eq!(current_name(migrations, 3, "runs", "warning_total"), "warnings");
    assert_eq!(former_names_in(migrations, "runs", "warnings"), ["warning_total", "warning_count"]);
    assert!(former_names_in(migrations, "runs", "run_id").is_empty());
    let fresh = duckdb::Connection::open_in_memory().unwrap();
    fresh.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
    for made_before_the_column in [true, false] {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        conn.execute_batch(&create_version_table_sql(Shape::One)).unwrap();
        conn.execute_batch(&RUNS.create_sql(Shape::One, "runs")).unwrap();
        if made_before_the_column {
            conn.execute_batch("ALTER TABLE runs DROP COLUMN warnings").unwrap();
        }
        conn.execute_batch("INSERT INTO runs (run_id, status) VALUES ('r1', 'completed')").unwrap();
        for (version, steps) in migrations {
            let sql = migration_sql_in(migrations, Shape::One, *version, steps, &|t, c| has(&conn, t, c));
            conn.execute_batch(&sql).unwrap();
        }
        assert_eq!(run_columns(&conn), run_columns(&fresh), "made before the column: {made_before_the_column}");
        // A row from before version 2 gets the fill, under whichever name the column has.
        let warnings: Option<i64> = conn.query_row("SELECT warnings FROM runs", [], |r| r.get(0)).unwrap();
        assert_eq!(warnings, Some(0), "the fill reaches the rows of the version before");
    }
}

#[test]
#[should_panic(expected = "needs a default or a fill")]
fn a_not_null_column_without_a_fill_is_refused() {
    let column = RUNS.columns.iter().find(|c| !c.nullable && c.default.is_none()).expect("runs has one");
    migration_sql(Shape::One, 99, &[Step::AddColumn { table: "runs", column: column.name, fill: None }], &|_, _| false);
}

#[test]
fn fleet_ddl_keys_by_organization_and_declares_only_declared_keys() {
    let apps = APPLICATIONS.columns_sql(Shape::Fleet);
    assert!(apps.starts_with("organization VARCHAR NOT NULL, id BIGINT NOT NULL"), "{apps}");
    assert!(!apps.contains("PRIMARY KEY"), "{apps}");
    assert!(RUNS.columns_sql(Shape::Fleet).ends_with("PRIMARY KEY (organization, run_id)"));
    assert!(APPLICATIONS.columns_sql(Shape::One).ends_with("PRIMARY KEY (id)"));
    assert_eq!(APPLICATIONS.key_of(Shape::Fleet), ["organization", "id"]);
}
