//! What a report of several organizations keeps between runs, in `OUT/report/pages.json`: per
//! organization, the key its page was made for, when it was made, and the overview's figures
//! from it. A report that refreshes only what changed ([`super::Refresh::Changed`], `fleet run`'s)
//! makes again the pages whose key changed, and keeps the others; the overview is written anew
//! every time, with each organization's health as of now.
//!
//! The key is the organization's data fingerprint and its health ([`key`]). The fingerprint is
//! one query per table over every organization: its rows' count and the sum of their hashes,
//! without what every sync changes whether or not the data did ([`EVERY_SYNC`]).

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Health, HealthState};
use crate::load::catalog;
use crate::query::{QueryError, Reader};

/// The file, in the report's directory.
pub(super) const INDEX_FILE: &str = "pages.json";

/// What every sync writes whether or not the data changed, left out of the fingerprint: the run
/// ledger (a row per sync), and the time an application was last observed, of which the
/// fingerprint keeps the latest day (`pending_queue` counts ages to it).
pub(super) const EVERY_SYNC: [(&str, Option<&str>); 2] = [("runs", None), ("applications", Some("last_seen_at"))];

/// The kept pages.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct PageIndex {
    /// The creator-etl version that made them: another version's pages are all made again.
    pub version: String,
    /// What they were made from, as the pages name it.
    pub source: String,
    pub pages: BTreeMap<String, Kept>,
}

/// One organization's kept page.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Kept {
    /// The page's file under `org/`.
    pub file: String,
    pub key: String,
    pub made_at: DateTime<Utc>,
    pub figures: BTreeMap<String, Value>,
}

impl PageIndex {
    /// The kept pages of `dir`, made by this version from `source`; none when there is no index,
    /// or it cannot be read (every page is then made again).
    pub fn read(dir: &Path, source: &str) -> PageIndex {
        let path = dir.join(INDEX_FILE);
        let index = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<PageIndex>(&bytes) {
                Ok(index) => index,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "the report's page index cannot be read; every page is made again");
                    PageIndex::default()
                }
            },
            Err(_) => PageIndex::default(),
        };
        if index.version == env!("CARGO_PKG_VERSION") && index.source == source {
            index
        } else {
            PageIndex::default()
        }
    }

    /// The kept page of `org`, if it was made for `key` and its file is still there.
    pub fn current(&self, dir: &Path, org: &str, key: &str) -> Option<&Kept> {
        self.pages.get(org).filter(|k| k.key == key && dir.join("org").join(&k.file).is_file())
    }

    pub fn write(dir: &Path, source: &str, pages: BTreeMap<String, Kept>) -> Result<(), crate::out::OutError> {
        let index = PageIndex { version: env!("CARGO_PKG_VERSION").to_owned(), source: source.to_owned(), pages };
        crate::out::write_json_atomic(&dir.join(INDEX_FILE), &index)
    }
}

/// A page's key: the organization's data fingerprint and its health: its state and notes (the
/// last loaded run's warnings, 429s and disagreeing counts, other problems with their times),
/// and for a state other than fresh or stale its headline too (a failure that fails differently
/// is a change). The headline of a fresh or stale page tells the time since the last sync, which
/// the passing clock changes: the state stands for it, and the page's own script says how old
/// the page and its last sync are.
pub(super) fn key(fingerprint: Option<&str>, health: &Health) -> String {
    let headline = match health.state {
        HealthState::Fresh | HealthState::Stale => "",
        _ => health.headline.as_str(),
    };
    format!("{}|{}|{headline}|{}", health.state.as_str(), fingerprint.unwrap_or("no rows"), health.notes.join("|"))
}

/// Every organization's data fingerprint, one query per table over all of them; none for one
/// organization's own warehouse.
pub(super) fn fingerprints(reader: &Reader) -> Result<BTreeMap<String, String>, QueryError> {
    let tables = match reader {
        Reader::Fleet { .. } => catalog::fleet_tables(),
        Reader::Lake { .. } => catalog::lake_tables(),
        Reader::Own { .. } | Reader::Nothing { .. } => return Ok(BTreeMap::new()),
    };
    // Every view with `organization`.
    let conn = reader.connect(None)?;
    let db = |e: duckdb::Error| QueryError::Db(e.to_string());
    let mut parts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in tables.into_iter().filter(|t| !EVERY_SYNC.contains(&(*t, None))) {
        let Some(table) = catalog::table(name) else { continue };
        let columns: Vec<String> = table
            .columns
            .iter()
            .filter(|c| !EVERY_SYNC.contains(&(name, Some(c.name))))
            .map(|c| format!("\"{}\"", c.name))
            .collect();
        // The latest day of a column every sync writes.
        let days: Vec<String> = EVERY_SYNC
            .iter()
            .filter_map(|(t, c)| c.filter(|_| *t == name))
            .map(|c| format!(" || '|' || coalesce(CAST(CAST(max(CAST(\"{c}\" AS TIMESTAMP)) AS DATE) AS VARCHAR), '')"))
            .collect();
        let sql = format!(
            "SELECT organization, count(*), CAST(sum(hash({})) AS VARCHAR){} FROM {name} GROUP BY organization",
            columns.join(", "),
            days.concat()
        );
        let mut stmt = conn.prepare(&sql).map_err(db)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<String>>(2)?)))
            .map_err(db)?;
        for row in rows {
            let (org, n, sum) = row.map_err(db)?;
            parts.entry(org).or_default().push(format!("{name}:{n}:{}", sum.unwrap_or_default()));
        }
    }
    Ok(parts.into_iter().map(|(org, p)| (org, p.join(","))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_every_sync_writes_names_the_catalog() {
        for (table, column) in EVERY_SYNC {
            let t = catalog::table(table).unwrap_or_else(|| panic!("no table `{table}`"));
            if let Some(c) = column {
                assert!(t.column(c).is_some(), "no column `{table}.{c}`");
            }
        }
    }

    fn health(state: HealthState, headline: &str) -> Health {
        Health { state, headline: headline.into(), notes: vec![], last_synced_at: None }
    }

    #[test]
    fn a_key_changes_with_the_data_the_state_and_a_failure_but_not_the_clock() {
        let fresh = |h: &str| health(HealthState::Fresh, h);
        assert_eq!(key(Some("f"), &fresh("Fresh: 1 h ago")), key(Some("f"), &fresh("Fresh: 2 h ago")));
        assert_ne!(key(Some("f"), &health(HealthState::Stale, "")), key(Some("f"), &fresh("")));
        assert_ne!(key(Some("f"), &fresh("")), key(Some("g"), &fresh("")));
        assert_ne!(key(None, &health(HealthState::Never, "")), key(Some(""), &health(HealthState::Never, "")));
        let failed = |h: &str| health(HealthState::Failed, h);
        assert_ne!(key(Some("f"), &failed("Failed: 401")), key(Some("f"), &failed("Failed: 503")));
        let noted =
            Health { notes: vec!["The last loaded run was answered 429 (rate limited) 2 times.".into()], ..fresh("") };
        assert_ne!(key(Some("f"), &noted), key(Some("f"), &fresh("")));
    }
}
