//! Quick sync: which pages of each status must be read to bring the previous sync's lists up to
//! date, and what the pages read prove.
//!
//! Each status's list is newest first by `applied_at`. The previous sync's lists (the
//! [`Snapshot`], from the warehouse) say which applications were where. A fetched page gives
//! *anchors*: for a timestamp `t` on the page, the number of current applications newer than `t`
//! (or at least as new) is the page's offset plus the rows above `t` on it. That holds only where
//! the page shows the whole group of rows sharing `t`: a group cut by the page's first or last
//! row is not used (the service's order within equal timestamps is unknown, so positions are
//! never compared inside a group; sets are).
//!
//! Between two consecutive anchors lies a *region*. The service's count of rows in it and the
//! snapshot's count are both known:
//! - a region whose pages were all read is **verified**: its rows are compared as sets with the
//!   snapshot's, and every application that entered or left is located;
//! - a region with unread pages whose counts agree, whose read rows were all there before, and
//!   none of whose applications was seen in another status, is **kept**: its unread rows are
//!   taken from the snapshot;
//! - any other region has a change in it: its middle unread page is read next (bisection).
//!
//! So each change costs about log2(pages) requests. Changes that cancel inside one region (one
//! application leaves it while another enters) are found only when one of them is seen
//! elsewhere, else by the next full sync (a reconcile). Anything that does not add up (a page of
//! the wrong length, a count that moved while reading, rows out of order) gives up on the
//! status: it is read in full.
//!
//! The functions here are pure: [`round`] decides, the extract fetches, and the property tests
//! drive the same decisions against simulated lists.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `(applied_at in µs, id)` of one application in a list.
pub type Item = (i64, i64);

/// The previous sync's lists: what a quick sync compares the service with.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The run whose load the warehouse holds: a quick run is loaded on top of exactly that state.
    pub base_run: String,
    /// When the last full sync of the same scope finished.
    pub last_reconcile: Option<DateTime<Utc>>,
    /// Status → its applications, newest first (ties by id, descending).
    pub lists: BTreeMap<String, Vec<Item>>,
}

impl Snapshot {
    pub fn new(
        base_run: String,
        last_reconcile: Option<DateTime<Utc>>,
        rows: impl IntoIterator<Item = (String, Item)>,
    ) -> Self {
        let mut lists: BTreeMap<String, Vec<Item>> = BTreeMap::new();
        for (status, item) in rows {
            lists.entry(status).or_default().push(item);
        }
        for list in lists.values_mut() {
            list.sort_unstable_by_key(|x| Reverse(*x));
        }
        Snapshot { base_run, last_reconcile, lists }
    }

    pub fn list(&self, status: &str) -> &[Item] {
        self.lists.get(status).map_or(&[], Vec::as_slice)
    }
}

/// One fetched page of a status, in the service's order.
#[derive(Clone, Debug)]
pub struct PageView {
    pub row_count: u64,
    pub items: Vec<Item>,
}

/// What the pages read of one status prove.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Located {
    pub row_count: u64,
    pub pages_read: u64,
    /// Applications found in the status that the snapshot had elsewhere or not at all.
    pub entered: Vec<i64>,
    /// Applications of the snapshot seen to be gone from the status.
    pub left: Vec<i64>,
    /// Applications on unread pages, taken from the snapshot.
    pub kept: Vec<i64>,
}

/// The next move for one status.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Fetch(Vec<u64>),
    Done(Located),
    /// Give up locating: read the status in full, for this reason.
    Full(String),
}

/// A cut through a list between two timestamps: the rows newer than `at` (or, `inclusive`, at
/// least as new).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cut {
    at: i64,
    inclusive: bool,
}

impl Cut {
    const TOP: Cut = Cut { at: i64::MAX, inclusive: false };
    const BOTTOM: Cut = Cut { at: i64::MIN, inclusive: true };

    /// Order in a newest-first list.
    fn key(self) -> (Reverse<i64>, bool) {
        (Reverse(self.at), self.inclusive)
    }

    /// The snapshot's rows above the cut.
    fn in_snapshot(self, list: &[Item]) -> usize {
        if self.inclusive {
            list.partition_point(|x| x.0 >= self.at)
        } else {
            list.partition_point(|x| x.0 > self.at)
        }
    }

    /// Whether a row with this timestamp lies below the cut.
    fn below(self, at: i64) -> bool {
        if self.inclusive {
            at < self.at
        } else {
            at <= self.at
        }
    }
}

/// Decides the next move for one status from its snapshot list and the pages read so far.
/// `elsewhere(id)` says an application was seen in another status during this sync.
pub fn locate(snap: &[Item], pages: &BTreeMap<u64, PageView>, per_page: u64, elsewhere: &dyn Fn(i64) -> bool) -> Step {
    let Some(first) = pages.get(&1) else { return Step::Fetch(vec![1]) };
    let row_count = first.row_count;
    if let Some(p) = pages.values().find(|p| p.row_count != row_count) {
        return Step::Full(format!(
            "its row count moved from {row_count} to {} while its pages were read",
            p.row_count
        ));
    }
    let page_count = row_count.div_ceil(per_page);
    let mut at_pos: BTreeMap<u64, Item> = BTreeMap::new();
    let mut anchors = vec![(Cut::TOP, 0u64), (Cut::BOTTOM, row_count)];
    for (&p, page) in pages {
        let expected = match p.cmp(&page_count) {
            std::cmp::Ordering::Less => per_page,
            std::cmp::Ordering::Equal => row_count - (p - 1) * per_page,
            std::cmp::Ordering::Greater => 0,
        };
        if page.items.len() as u64 != expected {
            return Step::Full(format!("page {p} held {} rows where {expected} were expected", page.items.len()));
        }
        if page.items.windows(2).any(|w| w[0].0 < w[1].0) {
            return Step::Full(format!("page {p} is not newest first"));
        }
        let offset = (p - 1) * per_page;
        let n = page.items.len();
        let mut start = 0;
        while start < n {
            let at = page.items[start].0;
            let end = start + page.items[start..].iter().take_while(|x| x.0 == at).count();
            if start > 0 || p == 1 {
                anchors.push((Cut { at, inclusive: false }, offset + start as u64));
            }
            if end < n || p == page_count {
                anchors.push((Cut { at, inclusive: true }, offset + end as u64));
            }
            start = end;
        }
        for (j, item) in page.items.iter().enumerate() {
            at_pos.insert(offset + j as u64, *item);
        }
    }
    anchors.sort_by_key(|(c, p)| (c.key(), *p));
    anchors.dedup();
    for w in anchors.windows(2) {
        if w[0].0 == w[1].0 || w[0].1 > w[1].1 {
            return Step::Full("its pages overlap: the list changed while it was read".into());
        }
    }
    let mut located = Located { row_count, pages_read: pages.len() as u64, ..Located::default() };
    let mut fetch = BTreeSet::new();
    for w in anchors.windows(2) {
        let ((c1, p1), (c2, p2)) = (w[0], w[1]);
        let slice = &snap[c1.in_snapshot(snap)..c2.in_snapshot(snap)];
        let seen: Vec<Item> = at_pos.range(p1..p2).map(|(_, i)| *i).collect();
        if seen.iter().any(|x| !c1.below(x.0) || c2.below(x.0)) {
            return Step::Full("its rows are out of order across pages: the list changed while it was read".into());
        }
        let unread: Vec<u64> = if p2 > p1 {
            (p1 / per_page + 1..=(p2 - 1) / per_page + 1).filter(|p| !pages.contains_key(p)).collect()
        } else {
            vec![]
        };
        let before: HashSet<i64> = slice.iter().map(|x| x.1).collect();
        let now: HashSet<i64> = seen.iter().map(|x| x.1).collect();
        if unread.is_empty() {
            located.entered.extend(now.difference(&before));
            located.left.extend(before.difference(&now));
        } else if p2 - p1 == slice.len() as u64
            && now.is_subset(&before)
            && !slice.iter().any(|x| !now.contains(&x.1) && elsewhere(x.1))
        {
            located.kept.extend(slice.iter().map(|x| x.1).filter(|id| !now.contains(id)));
        } else {
            fetch.insert(unread[unread.len() / 2]);
        }
    }
    if !fetch.is_empty() {
        return Step::Fetch(fetch.into_iter().collect());
    }
    let accounted: HashSet<i64> = at_pos.values().map(|x| x.1).chain(located.kept.iter().copied()).collect();
    if accounted.len() as u64 != row_count {
        return Step::Full(format!(
            "{} applications are accounted for, but the service counts {row_count}",
            accounted.len()
        ));
    }
    located.entered.sort_unstable();
    located.left.sort_unstable();
    located.kept.sort_unstable();
    Step::Done(located)
}

/// The next move of a whole quick sync.
#[derive(Clone, Debug, PartialEq)]
pub enum Round {
    /// Pages to read: (status, page).
    Fetch(Vec<(String, u64)>),
    /// Statuses to read in full, with the reason.
    ReadInFull(Vec<(String, String)>),
    /// Every status is located (those not read in full).
    Done(BTreeMap<String, Located>),
}

/// Decides the next move of a quick sync.
/// - `pages(status)`: the pages of the status read so far, in the pass being located;
/// - `latest`: every application seen in this sync, with the status it was last seen in;
/// - `in_full`: statuses already read in full.
///
/// An application that left a located status and is on none of the pages read is on an unread
/// page of a status in scope, or in a list read before it moved there, or gone from the scope
/// (another status when `--statuses` names some, another campaign's list, or deleted). Only
/// reading can tell, so every status in scope that still has unread pages is read in full. The
/// extract's closing check then looks for what moved into a list after it was read (one that
/// left a status read in full, too: [`vanished`]); whatever is still unseen has left the scope.
/// This holds for every scope: with a subset of statuses, the counts of the statuses in scope
/// cannot show where it went (one leaving to a status out of scope can cancel it in a count).
pub fn round(
    snapshot: &Snapshot,
    statuses: &[String],
    pages: &dyn Fn(&str) -> BTreeMap<u64, PageView>,
    latest: &HashMap<i64, String>,
    in_full: &BTreeSet<String>,
    per_page: u64,
) -> Round {
    let mut fetch = vec![];
    let mut full = vec![];
    let mut done = BTreeMap::new();
    for status in statuses.iter().filter(|s| !in_full.contains(*s)) {
        let elsewhere = |id: i64| latest.get(&id).is_some_and(|s| s != status);
        match locate(snapshot.list(status), &pages(status), per_page, &elsewhere) {
            Step::Fetch(ps) => fetch.extend(ps.into_iter().map(|p| (status.clone(), p))),
            Step::Full(reason) => full.push((status.clone(), reason)),
            Step::Done(l) => {
                done.insert(status.clone(), l);
            }
        }
    }
    if !full.is_empty() {
        return Round::ReadInFull(full);
    }
    if !fetch.is_empty() {
        return Round::Fetch(fetch);
    }
    let kept: HashSet<i64> = done.values().flat_map(|l| l.kept.iter().copied()).collect();
    let lost = done
        .iter()
        .flat_map(|(s, l)| l.left.iter().map(move |id| (s, *id)))
        .find(|(_, id)| !latest.contains_key(id) && !kept.contains(id));
    if let Some((from, id)) = lost {
        let unread: Vec<(String, String)> = done
            .iter()
            .filter(|(_, l)| !l.kept.is_empty())
            .map(|(s, _)| (s.clone(), format!("application {id} left `{from}` but is on none of the pages read")))
            .collect();
        if !unread.is_empty() {
            return Round::ReadInFull(unread);
        }
    }
    Round::Done(done)
}

/// The applications of the snapshot's lists in scope (with the status the snapshot had) that this
/// sync saw in no status and did not keep: gone from the scope, or moved into a list after the
/// pages read of it; whether their status was located or read in full.
pub fn vanished(
    snapshot: &Snapshot,
    statuses: &[String],
    latest: &HashMap<i64, String>,
    kept: &HashSet<i64>,
) -> Vec<(String, i64)> {
    statuses
        .iter()
        .flat_map(|s| snapshot.list(s).iter().map(move |x| (s, x.1)))
        .filter(|(_, id)| !latest.contains_key(id) && !kept.contains(id))
        .map(|(s, id)| (s.clone(), id))
        .collect()
}

/// Requests a quick sync would spend locating `|delta|` changes in a status of `pages` pages,
/// roughly: each costs up to log2(pages) pages, never more than the pages after the first.
pub fn estimate(pages: u64, delta: u64) -> u64 {
    let depth = u64::from(64 - pages.max(1).leading_zeros());
    (delta * depth).min(pages.saturating_sub(1))
}

#[cfg(test)]
mod tests;
