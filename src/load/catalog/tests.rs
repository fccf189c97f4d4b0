//! The table catalog's unit tests.

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
            migration_sql(shape, *version, steps);
        }
    }
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
