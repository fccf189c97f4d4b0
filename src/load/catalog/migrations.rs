//! The migrations: each version's steps (a table or a column new in it, a column renamed, the
//! fleet's keys dropped, the views remade), and the SQL made from them, with each step's names
//! followed through later renames and its definitions taken from the catalog as it is now.

use super::{column_sql, create_table, table, tables_of, Column, FleetKey, Shape, ORGANIZATION};

/// A step of a migration: what changed in that version. Definitions come from the catalog.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A table new in this version, made as the catalog has it now.
    Create(&'static str),
    /// A column new in this version, made as the catalog has it now; rows already there get
    /// `fill` (an SQL expression) when it is given.
    AddColumn { table: &'static str, column: &'static str, fill: Option<&'static str> },
    /// A column renamed in this version.
    RenameColumn { table: &'static str, from: &'static str, to: &'static str },
    /// The fleet warehouse's tables whose key is [`FleetKey::Checked`] lose their constraint
    /// (each rebuilt as the catalog has it, keeping its rows).
    DropCheckedKeys,
    /// The views, remade as [`super::views_sql`] has them.
    Views,
}

/// One organization's warehouse's migrations.
pub const ONE_MIGRATIONS: &[(i32, &[Step])] = &[
    (
        1,
        &[
            Step::Create("applications"),
            Step::Create("connected_accounts"),
            Step::Create("content_daily"),
            Step::Create("wow_deltas"),
            Step::Create("weekly_totals"),
            Step::Create("post_count_cohorts"),
            Step::Create("application_status_history"),
            Step::Create("runs"),
            Step::Views,
        ],
    ),
    // The actions journal and results, and a warning count in `runs` (queries need not parse
    // `warnings_json`); `cohort_acceptance` with sizes and pending counts.
    (
        2,
        &[
            Step::AddColumn { table: "runs", column: "warnings", fill: Some("0") },
            Step::Create("action_journal"),
            Step::Create("action_results"),
            Step::Views,
        ],
    ),
    // The journal's scope: the service and the key's fingerprint a row was sent to. Rows written
    // before have none, and count for every scope.
    (
        3,
        &[
            Step::AddColumn { table: "action_journal", column: "service", fill: None },
            Step::AddColumn { table: "action_journal", column: "key_fingerprint", fill: None },
        ],
    ),
    // How each run read the applications (quick sync). Runs loaded before were full syncs.
    (
        4,
        &[
            Step::AddColumn { table: "runs", column: "sync_mode", fill: Some("'full'") },
            Step::AddColumn { table: "runs", column: "sync_scope", fill: None },
            Step::AddColumn { table: "runs", column: "pages_verified", fill: None },
            Step::AddColumn { table: "runs", column: "last_reconcile_at", fill: None },
            Step::AddColumn { table: "runs", column: "counts_agree", fill: None },
        ],
    ),
];

/// The fleet warehouse's migrations.
pub const FLEET_MIGRATIONS: &[(i32, &[Step])] = &[
    (
        1,
        &[
            Step::Create("applications"),
            Step::Create("connected_accounts"),
            Step::Create("content_daily"),
            Step::Create("wow_deltas"),
            Step::Create("weekly_totals"),
            Step::Create("post_count_cohorts"),
            Step::Create("application_status_history"),
            Step::Create("action_results"),
            Step::Create("runs"),
        ],
    ),
    // The data tables and the history declare no key: DuckDB maintained the key's index at every
    // batch's commit, which took 10 times the batch's own writes once the tables were large.
    (2, &[Step::DropCheckedKeys]),
    // What each organization's frames were when last loaded: a batch writes, and a publish
    // exports, only the tables that changed.
    (3, &[Step::Create("frame_fingerprints")]),
];

/// The name that `column` of `table`, as a step of `version` names it, has in the catalog now:
/// followed through the renames of later versions of `migrations`.
pub(super) fn current_name(
    migrations: &[(i32, &[Step])],
    version: i32,
    table: &str,
    column: &'static str,
) -> &'static str {
    let mut name = column;
    for (_, steps) in migrations.iter().filter(|(v, _)| *v > version) {
        for step in *steps {
            if let Step::RenameColumn { table: t, from, to } = step {
                if *t == table && *from == name {
                    name = to;
                }
            }
        }
    }
    name
}

/// The statements of one migration's steps, then its version's record. `has(table, column)`
/// says whether the warehouse being migrated has that column now (read inside the migration's
/// transaction): a step names columns as they were at its version, and definitions come from the
/// catalog as it is now, so a column added at version 3 and renamed at version 5 is added under
/// its old name (with its current type) and renamed at 5, while a table that a `Create` made
/// with the catalog's current columns (in the same run of migrations) skips both.
pub fn migration_sql(shape: Shape, version: i32, steps: &[Step], has: &dyn Fn(&str, &str) -> bool) -> String {
    migration_sql_in(shape.migrations(), shape, version, steps, has)
}

pub(super) fn migration_sql_in(
    migrations: &[(i32, &[Step])],
    shape: Shape,
    version: i32,
    steps: &[Step],
    has: &dyn Fn(&str, &str) -> bool,
) -> String {
    let mut sql = String::new();
    for step in steps {
        match *step {
            Step::Create(name) => {
                let t = table(name).expect("a migration creates a catalog table");
                sql.push_str(&t.create_sql(shape, &format!("IF NOT EXISTS {name}")));
            }
            Step::AddColumn { table: name, column, fill } => {
                let now = current_name(migrations, version, name, column);
                let c = table(name).and_then(|t| t.column(now)).expect("a migration adds a catalog column");
                assert!(
                    c.nullable || c.default.is_some() || fill.is_some(),
                    "{name}.{column}: a NOT NULL column added to a table with rows needs a default or a fill"
                );
                // Already there under its later name: made by a later version's `Create`.
                let column = if now != column && has(name, now) { now } else { column };
                if c.nullable {
                    let declared = match c.default {
                        Some(d) => format!("{column} {} DEFAULT {d}", c.ty.sql()),
                        None => format!("{column} {}", c.ty.sql()),
                    };
                    sql.push_str(&format!("ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {declared};\n"));
                    if let Some(fill) = fill {
                        sql.push_str(&format!("UPDATE {name} SET {column} = {fill} WHERE {column} IS NULL;\n"));
                    }
                } else {
                    // DuckDB refuses `SET NOT NULL` after an `UPDATE` in one transaction ("outstanding
                    // updates"): the rows there get the fill as the column's default when it is
                    // added, and the default becomes the catalog's afterwards.
                    let first = fill.or(c.default).expect("asserted above");
                    sql.push_str(&format!(
                        "ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {column} {} DEFAULT {first};\n\
                         ALTER TABLE {name} ALTER COLUMN {column} SET NOT NULL;\n",
                        c.ty.sql()
                    ));
                    sql.push_str(&match c.default {
                        Some(d) if Some(d) != fill => {
                            format!("ALTER TABLE {name} ALTER COLUMN {column} SET DEFAULT {d};\n")
                        }
                        Some(_) => String::new(),
                        None => format!("ALTER TABLE {name} ALTER COLUMN {column} DROP DEFAULT;\n"),
                    });
                }
            }
            Step::RenameColumn { table: name, from, to } => {
                let t = table(name).expect("a migration renames a catalog table's column");
                let now = current_name(migrations, version, name, to);
                assert!(
                    t.column(now).is_some() && t.column(from).is_none(),
                    "{name}: a rename ends at the catalog's name"
                );
                // A table made after the column's addition has its current name already (and
                // so skips every rename of it, however many).
                if !has(name, now) {
                    sql.push_str(&format!("ALTER TABLE {name} RENAME COLUMN {from} TO {to};\n"));
                }
            }
            Step::DropCheckedKeys => {
                for t in tables_of(Shape::Fleet).into_iter().filter(|t| t.fleet == Some(FleetKey::Checked)) {
                    let name = t.name;
                    // The table as it is now, without its key: each catalog column under the
                    // name the table has it by (a later version may rename it), and none that a
                    // later version adds (its step adds it, with its fill).
                    let mut parts = vec![format!("{ORGANIZATION} VARCHAR NOT NULL")];
                    for c in t.columns {
                        let names = std::iter::once(c.name).chain(former_names_in(migrations, name, c.name));
                        if let Some(there) = names.into_iter().find(|n| has(name, n)) {
                            parts.push(column_sql(&Column { name: there, ..*c }));
                        }
                    }
                    sql.push_str(&create_table(&format!("{name}__rebuilt"), &parts.join(", ")));
                    sql.push_str(&format!(
                        "INSERT INTO {name}__rebuilt BY NAME SELECT * FROM {name};\nDROP TABLE {name};\n\
                         ALTER TABLE {name}__rebuilt RENAME TO {name};\n"
                    ));
                }
            }
            Step::Views => sql.push_str(&super::views_sql(false)),
        }
    }
    sql.push_str(&format!("INSERT INTO {} VALUES ({version}, now());\n", shape.version_table()));
    sql
}

/// The names `column` (its current name) of `table` had before later renames, newest first.
pub fn former_names(shape: Shape, table: &str, column: &str) -> Vec<&'static str> {
    former_names_in(shape.migrations(), table, column)
}

pub(super) fn former_names_in(migrations: &[(i32, &[Step])], table: &str, column: &str) -> Vec<&'static str> {
    let mut names = vec![];
    for (version, steps) in migrations.iter().rev() {
        for step in steps.iter().rev() {
            if let Step::RenameColumn { table: t, from, to } = step {
                if *t == table && current_name(migrations, *version, t, to) == column {
                    names.push(*from);
                }
            }
        }
    }
    names
}

/// What the migrations give rows written before `column` (its current name) of `table` existed,
/// if anything: an SQL expression.
pub fn fill_of(shape: Shape, table: &str, column: &str) -> Option<&'static str> {
    shape.migrations().iter().find_map(|(version, steps)| {
        steps.iter().find_map(|step| match step {
            Step::AddColumn { table: t, column: c, fill } if *t == table => {
                (current_name(shape.migrations(), *version, t, c) == column).then_some(*fill).flatten()
            }
            _ => None,
        })
    })
}
