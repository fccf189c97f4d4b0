//! The action journal in the warehouse: exactly once per approved row, across reruns and crashes.
//!
//! Before a row is sent, its *intent* is committed (`outcome = 'pending'`); after the answer, its
//! outcome replaces it. So at any moment a row is one of:
//! - done (`applied` or `noop` in some run): never sent again, whatever file it comes back in;
//! - interrupted (`pending`: the process died between the two commits): the write may or may not
//!   have reached the service. It is sent again and the answer read knowing that (see
//!   [`super::settle`]); once a later run records an outcome, the old intent is closed
//!   (`superseded`);
//! - in doubt (`in_doubt`): held back until the operator applies with `--retry-failed`;
//! - failed for good (`failed` with a 4xx other than 401, 403, 408 and 429): held back until the
//!   row changes or the operator applies with `--retry-failed`;
//! - failed transiently, or never seen: sent.
//!
//! With `--lake`, the journal is also a lake table: a `run` commits the intents of the rows it is
//! about to send there before the first send ([`Journal::with_intents`]), and the outcomes with
//! the lake commit after the stage. A run on another `--out` restores it, so a row sent from a
//! lost `--out` is done, or interrupted, there too: never new.
//!
//! Rows are identified by their fingerprint (action, target and normalised fields) *within a
//! scope*: the service (base URL) and the key's fingerprint (never the key). The same file applied
//! to another service, or with another organization's key, is a different set of writes. Journal
//! rows written before scopes existed (schema version 2) have none and count for every scope.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, Utc};
use duckdb::{params, Connection, OptionalExt};

use super::reviewed::ReviewedRow;
use super::{ActionError, RowResult};
use crate::load::warehouse;
use crate::out::OutDir;

/// Where rows are sent: the service and the key, as the journal records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The base URL, without a trailing slash.
    pub service: String,
    /// The key's fingerprint (`key-xxxxxxxx`); `None` for a plan run without a key, which then
    /// matches every key of the service.
    pub key: Option<String>,
}

impl Scope {
    /// The scope of `base_url` (normalized as a URL when it is one, so that spellings of one
    /// service match) and a key's fingerprint.
    pub fn new(base_url: &str, key_fingerprint: Option<String>) -> Self {
        let service = reqwest::Url::parse(base_url).map_or_else(|_| base_url.to_owned(), |u| u.to_string());
        Scope { service: service.trim_end_matches('/').to_owned(), key: key_fingerprint }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => write!(f, "{} with {k}", self.service),
            None => write!(f, "{} with any key (no key given)", self.service),
        }
    }
}

/// `WHERE` condition of the rows of a scope (three parameters: service, key, key); rows from
/// before scopes (NULL service) belong to every scope.
const IN_SCOPE: &str = "(service IS NULL OR (service = ? AND (?::VARCHAR IS NULL OR key_fingerprint = ?)))";

/// What the journal knows of a fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Never sent, or only failed transiently: send it.
    New,
    /// Applied (or a no-op) by this run.
    Done { run_id: String },
    /// Sent by this run, which died before recording the answer: send again, reading the answer
    /// as one to a re-send.
    Interrupted { run_id: String },
    /// Ended in doubt in this run: held until `--retry-failed`.
    InDoubt { run_id: String, message: String },
    /// Refused for good in this run: held until the row changes or `--retry-failed`.
    FailedBefore { run_id: String, status: i32, message: String },
}

/// An intent recorded without an outcome.
#[derive(Clone, Debug)]
pub struct Intent {
    pub run_id: String,
    pub file: String,
    pub line: i64,
    pub target: String,
    pub fingerprint: String,
}

/// Every outcome the journal stores: a row's intent (`pending`), each way a send ends, and an
/// intent a later run replaced (`superseded`).
const JOURNAL_OUTCOMES: [&str; 11] = [
    "pending",
    "applied",
    "noop",
    "failed",
    "failed_transient",
    "in_doubt",
    "not_sent",
    "superseded",
    "skipped_not_approved",
    "skipped_already_applied",
    "skipped_not_selected",
];

pub struct Journal {
    conn: Connection,
    /// The warehouse file it is in, which a message may tell the user to correct.
    file: std::path::PathBuf,
    /// The table has the scope columns (schema version 3); a plan may read an older warehouse.
    scoped: bool,
}

fn db(context: &'static str) -> impl FnOnce(duckdb::Error) -> ActionError {
    move |e| ActionError::Journal { context, message: e.to_string() }
}

impl Journal {
    /// Opens the warehouse's journal for writing, migrating the warehouse if needed.
    pub fn open(out: &OutDir) -> Result<Self, ActionError> {
        // The writer's warehouse is migrated when it opens: it always has the scope columns.
        Ok(Journal { conn: warehouse::open_writer(out)?, file: out.writer_warehouse(), scoped: true })
    }

    /// Opens it read-only, for a plan; `None` when there is no warehouse (nothing applied yet).
    /// The note says when a running command holds the writer's file, so the plan reads the
    /// snapshot published after the last command instead.
    pub fn open_read_only(out: &OutDir) -> Result<Option<(Self, Option<String>)>, ActionError> {
        let Some((conn, note)) = warehouse::open_latest_read_only(out)? else {
            return Ok(None);
        };
        if crate::load::warehouse::is_fleet(&conn)? {
            return Err(crate::load::LoadError::Kind(crate::load::warehouse::NOT_ONE_ORGANIZATION.into()).into());
        }
        if !warehouse::has_table(&conn, "action_journal")? {
            return Ok(None);
        }
        let scoped = Self::has_scope_columns(&conn)?;
        let file = if note.is_some() { out.warehouse() } else { out.writer_warehouse() };
        Ok(Some((Journal { conn, file, scoped }, note)))
    }

    fn has_scope_columns(conn: &Connection) -> Result<bool, ActionError> {
        conn.query_row(
            "SELECT count(*) > 0 FROM information_schema.columns \
                 WHERE table_name = 'action_journal' AND column_name = 'service'",
            [],
            |r| r.get(0),
        )
        .map_err(db("read the journal"))
    }

    /// Fails on an outcome this version does not know (a damaged or hand-edited journal, a row
    /// restored from a newer version's lake): read as "never sent", such a row could be sent
    /// twice, so the journal's column is named and nothing is sent.
    /// Only the rows of `scope` count: another service's or key's rows never block this one.
    fn check_outcomes(&self, scope: &Scope) -> Result<(), ActionError> {
        let known = JOURNAL_OUTCOMES.iter().map(|o| format!("'{o}'")).collect::<Vec<_>>().join(", ");
        let in_scope = if self.scoped { IN_SCOPE } else { "true" };
        let args: Vec<Option<String>> =
            if self.scoped { vec![Some(scope.service.clone()), scope.key.clone(), scope.key.clone()] } else { vec![] };
        let bad: Option<Option<String>> = self
            .conn
            .query_row(
                &format!(
                    "SELECT outcome FROM action_journal WHERE (outcome IS NULL OR outcome NOT IN ({known})) AND {in_scope} LIMIT 1"
                ),
                duckdb::params_from_iter(args),
                |r| r.get(0),
            )
            .optional()
            .map_err(db("read the journal"))?;
        match bad {
            None => Ok(()),
            Some(value) => Err(ActionError::Journal {
                context: "read the journal",
                message: format!(
                    "`action_journal.outcome` holds {}, which is not one of {}; nothing was sent. Correct or delete that row in the writer's warehouse (`{}`), then rerun",
                    value.map_or("NULL".to_owned(), |v| format!("`{v}`")),
                    JOURNAL_OUTCOMES.join(", "),
                    self.file.display()
                ),
            }),
        }
    }

    /// What is known of a row.
    pub fn known(&self, fingerprint: &str, scope: &Scope) -> Result<Known, ActionError> {
        Ok(self.known_rows(Some(fingerprint), scope)?.remove(fingerprint).unwrap_or(Known::New))
    }

    /// What is known of every row the journal has seen, in one query: a plan of many rows
    /// would otherwise pay a query per row before the first request.
    pub fn known_all(&self, scope: &Scope) -> Result<HashMap<String, Known>, ActionError> {
        self.known_rows(None, scope)
    }

    /// Per fingerprint in the scope: the first run that applied it (or found it a no-op); else
    /// the latest outcome of any run (a pending intent, in doubt, failed, failed transiently).
    fn known_rows(&self, fingerprint: Option<&str>, scope: &Scope) -> Result<HashMap<String, Known>, ActionError> {
        // A plan may read a version-2 warehouse (before the first apply of this version), which
        // has no scope columns: all its rows count for every scope.
        let scoped = self.scoped;
        self.check_outcomes(scope)?;
        let in_scope = if scoped { IN_SCOPE } else { "true" };
        let filter = if fingerprint.is_some() { "AND fingerprint = ?" } else { "" };
        let sql = format!(
            "SELECT fingerprint, \
             arg_min(run_id, outcome_at) FILTER (WHERE outcome IN ('applied', 'noop')), \
             arg_max(run_id, intent_at) FILTER (WHERE outcome <> 'superseded'), \
             arg_max(outcome, intent_at) FILTER (WHERE outcome <> 'superseded'), \
             arg_max(http_status, intent_at) FILTER (WHERE outcome <> 'superseded'), \
             arg_max(message, intent_at) FILTER (WHERE outcome <> 'superseded') \
             FROM action_journal WHERE {in_scope} {filter} GROUP BY fingerprint"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(db("read the journal"))?;
        let mut args: Vec<Option<String>> = vec![];
        if scoped {
            args.extend([Some(scope.service.clone()), scope.key.clone(), scope.key.clone()]);
        }
        if let Some(f) = fingerprint {
            args.push(Some(f.to_owned()));
        }
        let rows = stmt
            .query_map(duckdb::params_from_iter(args), |r| {
                let done: Option<String> = r.get(1)?;
                let latest: Option<String> = r.get(2)?;
                let outcome: Option<String> = r.get(3)?;
                let status: Option<i32> = r.get(4)?;
                let message: String = r.get::<_, Option<String>>(5)?.unwrap_or_default();
                let known = match (done, latest, outcome.as_deref()) {
                    (Some(run_id), _, _) => Known::Done { run_id },
                    (None, Some(run_id), Some("pending")) => Known::Interrupted { run_id },
                    (None, Some(run_id), Some("in_doubt")) => Known::InDoubt { run_id, message },
                    (None, Some(run_id), Some("failed")) if status.is_some_and(failed_for_good) => {
                        Known::FailedBefore { run_id, status: status.unwrap_or_default(), message }
                    }
                    _ => Known::New,
                };
                Ok((r.get::<_, String>(0)?, known))
            })
            .map_err(db("read the journal"))?
            .collect::<Result<HashMap<_, _>, _>>()
            .map_err(db("read the journal"))?;
        Ok(rows)
    }

    /// Intents of the scope that never got an outcome, in any run, and that no later run
    /// resolved.
    pub fn interrupted(&self, scope: &Scope) -> Result<Vec<Intent>, ActionError> {
        let sql = format!(
            "SELECT run_id, file, line, target, fingerprint FROM action_journal AS p \
             WHERE outcome = 'pending' AND {IN_SCOPE} AND NOT EXISTS (\
               SELECT 1 FROM action_journal AS q WHERE q.fingerprint = p.fingerprint \
               AND q.outcome NOT IN ('pending', 'superseded') AND q.intent_at >= p.intent_at) \
             ORDER BY intent_at"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(db("read the journal"))?;
        let rows = stmt
            .query_map(params![scope.service, scope.key, scope.key], |r| {
                Ok(Intent {
                    run_id: r.get(0)?,
                    file: r.get(1)?,
                    line: r.get(2)?,
                    target: r.get(3)?,
                    fingerprint: r.get(4)?,
                })
            })
            .map_err(db("read the journal"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db("read the journal"))?;
        Ok(rows)
    }

    /// Commits the intent to send a row, before it is sent. A rerun of the same run id (an
    /// interrupted intent resent) replaces the earlier entry.
    pub fn record_intent(&self, run_id: &str, file: &str, row: &ReviewedRow, scope: &Scope) -> Result<(), ActionError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO action_journal \
                 (fingerprint, run_id, file, line, row_id, action, target, body_json, outcome, intent_at, \
                  service, key_fingerprint) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', now(), ?, ?)",
                params![
                    row.fingerprint(),
                    run_id,
                    file,
                    row.line as i64,
                    row.row_id,
                    row.action.as_str(),
                    row.target.to_string(),
                    row.body_json(),
                    scope.service,
                    scope.key,
                ],
            )
            .map_err(db("record the intent in the journal"))?;
        Ok(())
    }

    /// Runs `f` on the journal with the intents of `rows` recorded in an open transaction, then
    /// rolls them back: `f` sees (and can copy elsewhere) the journal as it will be once each of
    /// these rows has its intent, and this journal is left as it was.
    pub fn with_intents<T>(
        &self,
        run_id: &str,
        file: &str,
        rows: &[&ReviewedRow],
        scope: &Scope,
        f: impl FnOnce(&Connection) -> Result<T, ActionError>,
    ) -> Result<T, ActionError> {
        let tx = self.conn.unchecked_transaction().map_err(db("record the intents in the journal"))?;
        let result =
            rows.iter().try_for_each(|row| self.record_intent(run_id, file, row, scope)).and_then(|()| f(&self.conn));
        // Undone on purpose, whatever `f` did: this journal records each intent as its row is sent.
        let undone = tx.rollback().map_err(db("undo the intents in the journal"));
        let value = result?;
        undone?;
        Ok(value)
    }

    /// Removes an intent whose row was never sent (the run stopped while it waited to go out).
    pub fn forget_intent(&self, run_id: &str, row: &ReviewedRow) -> Result<(), ActionError> {
        self.conn
            .execute(
                "DELETE FROM action_journal WHERE fingerprint = ? AND run_id = ? AND outcome = 'pending'",
                params![row.fingerprint(), run_id],
            )
            .map_err(db("record the outcome in the journal"))?;
        Ok(())
    }

    /// Commits a sent row's outcome, and closes the intents of earlier runs that died sending the
    /// same row: this answer resolves them.
    pub fn record_outcome(
        &self,
        run_id: &str,
        row: &ReviewedRow,
        result: &RowResult,
        scope: &Scope,
    ) -> Result<(), ActionError> {
        let update = || -> Result<(), duckdb::Error> {
            let tx = self.conn.unchecked_transaction()?;
            tx.execute(
                "UPDATE action_journal SET outcome = ?, http_status = ?, message = ?, response_excerpt = ?, \
                 outcome_at = now() WHERE fingerprint = ? AND run_id = ?",
                params![
                    result.outcome.as_str(),
                    result.http_status.map(i32::from),
                    result.message,
                    result.response_excerpt,
                    row.fingerprint(),
                    run_id,
                ],
            )?;
            tx.execute(
                &format!(
                    "UPDATE action_journal SET outcome = 'superseded', message = 'resolved by run ' || ?::VARCHAR, \
                     outcome_at = now() WHERE fingerprint = ? AND run_id <> ? AND outcome IN ('pending', 'in_doubt') \
                     AND {IN_SCOPE}"
                ),
                params![run_id, row.fingerprint(), run_id, scope.service, scope.key, scope.key],
            )?;
            tx.commit()
        };
        update().map_err(db("record the outcome in the journal"))
    }

    /// Closes the journal and publishes the warehouse to readers ([`warehouse::publish`]).
    pub fn publish(self, out: &OutDir) -> Result<(), ActionError> {
        Ok(warehouse::publish(self.conn, out)?)
    }

    /// Stores every row's result of a run in `action_results`, in one transaction.
    pub fn record_results(
        &self,
        run_id: &str,
        file: &str,
        finished_at: DateTime<Utc>,
        results: &[RowResult],
    ) -> Result<(), ActionError> {
        let insert = || -> Result<(), duckdb::Error> {
            let tx = self.conn.unchecked_transaction()?;
            let mut stmt = tx.prepare(
                "INSERT OR REPLACE INTO action_results (run_id, file, line, row_id, action, target, approved, outcome, \
                 http_status, message, fingerprint, reviewer, finished_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::TIMESTAMPTZ)",
            )?;
            for r in results {
                stmt.execute(params![
                    run_id,
                    file,
                    r.line as i64,
                    r.row_id,
                    r.action,
                    r.target,
                    r.approved,
                    r.outcome.as_str(),
                    r.http_status.map(i32::from),
                    r.message,
                    r.fingerprint,
                    r.reviewer,
                    finished_at.to_rfc3339(),
                ])?;
            }
            drop(stmt);
            tx.commit()
        };
        insert().map_err(db("store the results"))
    }
}

/// A refusal that the same row will meet again: a 4xx other than 401, 403 (the key), 408 and
/// 429 (the moment).
fn failed_for_good(status: i32) -> bool {
    (400..500).contains(&status) && ![401, 403, 408, 429].contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outcome this version does not know is an error naming the column, never "new": a row
    /// read as never sent could be sent twice.
    #[test]
    fn an_unknown_outcome_is_refused_not_read_as_new() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let journal = Journal::open(&out).unwrap();
        let file = super::super::reviewed::parse(
            b"action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,reviewer,note,row_id\n\
              update_sale,yes,7001,,5000,,,,ann,,r1\n",
        )
        .unwrap();
        let scope = Scope::new("http://127.0.0.1:1/api", Some("key-00000001".into()));
        journal.record_intent("run-1", "f.csv", &file.rows[0], &scope).unwrap();
        assert_eq!(journal.known_all(&scope).unwrap().len(), 1);
        journal.conn.execute("UPDATE action_journal SET outcome = 'applied_twice'", []).unwrap();
        let e = journal.known_all(&scope).unwrap_err().to_string();
        assert!(e.contains("`action_journal.outcome` holds `applied_twice`"), "{e}");
        assert!(journal.known(&file.rows[0].fingerprint(), &scope).is_err());
    }

    #[test]
    fn intents_shown_to_a_copy_are_rolled_back_whatever_the_copy_does() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let journal = Journal::open(&out).unwrap();
        let file = super::super::reviewed::parse(
            b"action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,reviewer,note,row_id\n\
              update_sale,yes,7001,,5000,,,,ann,,r1\nupdate_sale,yes,7002,,10,,,,ann,,r2\n",
        )
        .unwrap();
        let scope = Scope::new("http://127.0.0.1:1/api", Some("key-00000001".into()));
        let rows: Vec<&ReviewedRow> = file.rows.iter().collect();
        let pending = journal
            .with_intents("run-1", "f.csv", &rows, &scope, |conn| {
                conn.query_row(
                    "SELECT count(*) FROM action_journal WHERE outcome = 'pending' AND run_id = 'run-1'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(db("count"))
            })
            .unwrap();
        assert_eq!(pending, 2, "the copy sees every intent");
        assert!(journal.known_all(&scope).unwrap().is_empty(), "the journal is as it was");
        let failed = journal.with_intents("run-2", "f.csv", &rows, &scope, |_| -> Result<(), ActionError> {
            Err(ActionError::Journal { context: "copy", message: "the lake is down".into() })
        });
        assert!(failed.is_err());
        assert!(journal.interrupted(&scope).unwrap().is_empty(), "a failed copy leaves no intent either");
    }
}
