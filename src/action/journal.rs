//! The action journal in the warehouse: exactly once per approved row, across reruns and crashes.
//!
//! Before a row is sent, its *intent* is committed (`outcome = 'pending'`); after the answer, its
//! outcome replaces it. So at any moment a row is one of:
//! - done (`applied` or `noop` in some run): never sent again, whatever file it comes back in;
//! - interrupted (`pending`: the process died between the two commits): the write may or may not
//!   have reached the service. It is sent again, which is safe: a PATCH with the same body leaves
//!   the same sale, and a repeated payout mark is answered "already paid" (a no-op);
//! - failed, or never seen: sent.
//!
//! Rows are identified by their fingerprint (action, target and normalised fields), so a file
//! that is rerun, reordered or merged with new rows is matched row by row.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use duckdb::{params, Connection};

use super::reviewed::ReviewedRow;
use super::{ActionError, RowResult};
use crate::load::warehouse;
use crate::out::OutDir;

/// What the journal knows of a fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Never sent, or only failed: send it.
    New,
    /// Applied (or a no-op) by this run.
    Done { run_id: String },
    /// Sent by this run, which died before recording the answer: send again (idempotent).
    Interrupted { run_id: String },
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

pub struct Journal {
    conn: Connection,
}

fn db(context: &'static str) -> impl FnOnce(duckdb::Error) -> ActionError {
    move |e| ActionError::Journal { context, message: e.to_string() }
}

impl Journal {
    /// Opens the warehouse's journal for writing, migrating the warehouse if needed.
    pub fn open(out: &OutDir) -> Result<Self, ActionError> {
        let conn = warehouse::open(&out.root().join("warehouse.duckdb"))?;
        Ok(Journal { conn })
    }

    /// Opens it read-only, for a plan; `None` when there is no warehouse (nothing applied yet).
    pub fn open_read_only(out: &OutDir) -> Result<Option<Self>, ActionError> {
        let path = out.root().join("warehouse.duckdb");
        if !path.exists() {
            return Ok(None);
        }
        let config =
            duckdb::Config::default().access_mode(duckdb::AccessMode::ReadOnly).map_err(db("open the warehouse"))?;
        let conn = Connection::open_with_flags(&path, config).map_err(db("open the warehouse read-only"))?;
        let has_journal: bool = conn
            .query_row(
                "SELECT count(*) > 0 FROM information_schema.tables WHERE table_name = 'action_journal'",
                [],
                |r| r.get(0),
            )
            .map_err(db("look for the journal"))?;
        Ok(has_journal.then_some(Journal { conn }))
    }

    /// What is known of a row.
    pub fn known(&self, fingerprint: &str) -> Result<Known, ActionError> {
        Ok(self.known_rows(Some(fingerprint))?.remove(fingerprint).unwrap_or(Known::New))
    }

    /// What is known of every row the journal has seen, in one query: a plan of many rows
    /// would otherwise pay a query per row before the first request.
    pub fn known_all(&self) -> Result<HashMap<String, Known>, ActionError> {
        self.known_rows(None)
    }

    /// Per fingerprint, the first run that applied it (or found it a no-op), else the latest run
    /// that sent it and died before recording the answer.
    fn known_rows(&self, fingerprint: Option<&str>) -> Result<HashMap<String, Known>, ActionError> {
        let filter = if fingerprint.is_some() { "WHERE fingerprint = ?" } else { "" };
        let sql = format!(
            "SELECT fingerprint, \
             arg_min(run_id, outcome_at) FILTER (WHERE outcome IN ('applied', 'noop')), \
             arg_max(run_id, intent_at) FILTER (WHERE outcome = 'pending') \
             FROM action_journal {filter} GROUP BY fingerprint"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(db("read the journal"))?;
        let rows = stmt
            .query_map(duckdb::params_from_iter(fingerprint), |r| {
                let known = match (r.get::<_, Option<String>>(1)?, r.get::<_, Option<String>>(2)?) {
                    (Some(run_id), _) => Known::Done { run_id },
                    (None, Some(run_id)) => Known::Interrupted { run_id },
                    (None, None) => Known::New,
                };
                Ok((r.get::<_, String>(0)?, known))
            })
            .map_err(db("read the journal"))?
            .collect::<Result<HashMap<_, _>, _>>()
            .map_err(db("read the journal"))?;
        Ok(rows)
    }

    /// Intents that never got an outcome, from any run.
    pub fn interrupted(&self) -> Result<Vec<Intent>, ActionError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run_id, file, line, target, fingerprint FROM action_journal WHERE outcome = 'pending' \
                 ORDER BY intent_at",
            )
            .map_err(db("read the journal"))?;
        let rows = stmt
            .query_map([], |r| {
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
    pub fn record_intent(&self, run_id: &str, file: &str, row: &ReviewedRow) -> Result<(), ActionError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO action_journal \
                 (fingerprint, run_id, file, line, row_id, action, target, body_json, outcome, intent_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', now())",
                params![
                    row.fingerprint(),
                    run_id,
                    file,
                    row.line as i64,
                    row.row_id,
                    row.action.as_str(),
                    row.target.to_string(),
                    row.body_json(),
                ],
            )
            .map_err(db("record the intent in the journal"))?;
        Ok(())
    }

    /// Commits a sent row's outcome.
    pub fn record_outcome(&self, run_id: &str, row: &ReviewedRow, result: &RowResult) -> Result<(), ActionError> {
        self.conn
            .execute(
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
            )
            .map_err(db("record the outcome in the journal"))?;
        Ok(())
    }

    /// Stores every row's result of a run in `action_results`, in one transaction.
    pub fn record_results(
        &self,
        run_id: &str,
        file: &str,
        finished_at: DateTime<Utc>,
        results: &[RowResult],
    ) -> Result<(), ActionError> {
        self.conn.execute_batch("BEGIN TRANSACTION").map_err(db("store the results"))?;
        let insert = || -> Result<(), duckdb::Error> {
            let mut stmt = self.conn.prepare(
                "INSERT OR REPLACE INTO action_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::TIMESTAMPTZ)",
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
            Ok(())
        };
        match insert() {
            Ok(()) => self.conn.execute_batch("COMMIT").map_err(db("store the results")),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(db("store the results")(e))
            }
        }
    }
}
