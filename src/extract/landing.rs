//! What a run's raw landing says: which pages and windows are done, and the data they hold.
//!
//! [`Landing::ingest`] is the one place that interprets a landed record. A resumed run replays
//! its landing through it, and a live crawl feeds each new record through it, so resume and the
//! first attempt decide the same way.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use serde::Serialize;

use super::raw::RawRecord;
use crate::api::models::{Application, ApplicationsPage, Content24hResponse, ContentPoint};

/// What one pass of a status saw, against the service's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassCheck {
    /// Applications seen in the pass whose latest observation is in the status.
    pub seen: u64,
    /// The service's count on the pass's last landed page.
    pub row_count: u64,
    /// Pages of the pass landed by one invocation reported different counts: the list changed
    /// while it was paged. Pages fetched at once are answered in any order, so a row pushed down
    /// past a page boundary can be missed as well as one pulled up; such a pass proves nothing.
    pub count_moved: bool,
}

/// `views` or `likes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Views,
    Likes,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Views => "views",
            Metric::Likes => "likes",
        }
    }
}

/// One day of one metric, as the service reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContentRow {
    pub metric: Metric,
    pub date: NaiveDate,
    pub last_date: NaiveDate,
    pub current: i64,
    pub last: i64,
    pub total: i64,
    pub last_total: i64,
}

/// A page of applications as landed.
#[derive(Clone, Debug)]
pub struct PageInfo {
    pub seq: u64,
    /// The invocation of the run that landed it (a budgeted run resumes over several).
    pub invocation: u32,
    pub row_count: u64,
    pub page_count: u64,
    pub ids: Vec<i64>,
    /// `applied_at` of each row, in µs, in the page's order.
    pub applied_at: Vec<i64>,
}

/// The latest observation of an application.
#[derive(Clone, Debug)]
pub struct Observation {
    pub seq: u64,
    pub observed_at: DateTime<Utc>,
    pub app: Application,
    /// The crawl pass in which the application was first seen.
    pub first_pass: u32,
}

impl Observation {
    /// About how many bytes it holds in memory: itself, its application's text and its
    /// accounts (not the allocator's overhead). What bounds the landings and the previous rows
    /// a fleet holds.
    pub fn approximate_bytes(&self) -> usize {
        use std::mem::size_of;
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let a = &self.app;
        let accounts: usize = a
            .connected_accounts
            .iter()
            .map(|c| size_of::<crate::api::models::ConnectedAccount>() + text(&c.username))
            .sum();
        size_of::<Observation>() + a.campaign_name.len() + a.creator_name.len() + text(&a.email) + accounts
    }
}

/// A landed record's body as the crawl has read it ([`Landing::ingest_read`]).
pub enum Read {
    /// A page of applications.
    Page(ApplicationsPage),
    /// A content window's answer, validated against the record's window.
    Content(Vec<ContentRow>),
}

/// Everything derived from a run's records.
#[derive(Debug, Default)]
pub struct Landing {
    pub observations: HashMap<i64, Observation>,
    /// `(status, pass)` → page number → page.
    pub pages: HashMap<(String, u32), BTreeMap<u64, PageInfo>>,
    /// Window → its validated rows.
    pub windows: BTreeMap<(NaiveDate, NaiveDate), Vec<ContentRow>>,
    /// Responses that failed validation, per window.
    pub invalid_windows: BTreeMap<(NaiveDate, NaiveDate), u32>,
    pub next_seq: u64,
    pub max_invocation: u32,
}

fn midnight_to_date(ts: i64) -> Option<NaiveDate> {
    let t = Utc.timestamp_opt(ts, 0).single()?;
    (t.timestamp() % 86_400 == 0).then(|| t.date_naive())
}

/// Checks a content response against its window: both series present, ascending, every date
/// inside the window and exactly one per day, `last_date` a week before `date`. Fewer days than
/// the window has is a truncated answer.
///
/// Both series empty is no truncation: the service has no statistics for the window (an
/// organization without content yet answers so for every window). That is valid, with no rows.
pub fn validate_content(
    resp: &Content24hResponse,
    start: NaiveDate,
    end: NaiveDate,
) -> Result<Vec<ContentRow>, String> {
    let expected = (end - start).num_days() + 1;
    let data = &resp.data.content_24h_data;
    if let (Some(views), Some(likes)) = (&data.views_24h, &data.likes_24h) {
        if views.is_empty() && likes.is_empty() {
            return Ok(vec![]);
        }
    }
    let mut rows = vec![];
    for (metric, name, series) in [(Metric::Views, "Views", &data.views_24h), (Metric::Likes, "Likes", &data.likes_24h)]
    {
        let key = format!("{}_24h", metric.as_str());
        let Some(points) = series else {
            return Err(format!("series `{key}` is missing"));
        };
        let mut prev: Option<NaiveDate> = None;
        for p in points {
            let ContentPoint { date, last_date, current, last, total, last_total, name: pname } = p;
            let Some(day) = midnight_to_date(*date) else {
                return Err(format!("`{key}` has a date {date} that is not a UTC midnight"));
            };
            if day < start || day > end {
                return Err(format!("`{key}` has {day}, outside the window {start}..{end}"));
            }
            if let Some(prev) = prev {
                if day == prev {
                    return Err(format!("`{key}` has {day} twice"));
                }
                if day < prev {
                    return Err(format!("`{key}` is not in ascending date order at {day}"));
                }
            }
            prev = Some(day);
            let Some(lday) = midnight_to_date(*last_date).filter(|l| *l == day - Duration::days(7)) else {
                return Err(format!("`{key}` on {day}: last_date is not seven days earlier"));
            };
            if pname != name {
                return Err(format!("`{key}` on {day}: name is `{pname}`, expected `{name}`"));
            }
            rows.push(ContentRow {
                metric,
                date: day,
                last_date: lday,
                current: *current,
                last: *last,
                total: *total,
                last_total: *last_total,
            });
        }
        if (points.len() as i64) < expected {
            return Err(format!("truncated: `{key}` has {} of the {expected} days of {start}..{end}", points.len()));
        }
    }
    Ok(rows)
}

/// Splits `[from, to]` into consecutive windows of at most `days` days.
pub fn windows(from: NaiveDate, to: NaiveDate, days: u32) -> Vec<(NaiveDate, NaiveDate)> {
    let mut out = vec![];
    let mut start = from;
    while start <= to {
        let end = (start + Duration::days(i64::from(days.max(1)) - 1)).min(to);
        out.push((start, end));
        start = end + Duration::days(1);
    }
    out
}

impl Landing {
    pub fn from_records(records: &[RawRecord]) -> Self {
        let mut l = Landing::default();
        for r in records {
            l.ingest(r);
        }
        l
    }

    /// Takes one landed record into account.
    pub fn ingest(&mut self, r: &RawRecord) {
        self.ingest_read(r, None);
    }

    /// [`Landing::ingest`] of a record whose body the crawl has read already: `read`, parsed
    /// from the same bytes as the same type (and a content window's rows validated against the
    /// record's window), so that the body is not parsed again. The outcome is the same.
    pub fn ingest_read(&mut self, r: &RawRecord, read: Option<Read>) {
        self.next_seq = self.next_seq.max(r.seq + 1);
        self.max_invocation = self.max_invocation.max(r.invocation);
        match r.endpoint.as_str() {
            "list_applications" => {
                let body = match read {
                    Some(Read::Page(page)) => Some(page),
                    _ => serde_json::from_str::<ApplicationsPage>(&r.body).ok(),
                };
                if let Some(body) = body {
                    self.ingest_page(r, body);
                }
            }
            "content_24h" => {
                let Some(window) = r.window else { return };
                if !r.valid {
                    *self.invalid_windows.entry(window).or_default() += 1;
                    return;
                }
                let rows = match read {
                    Some(Read::Content(rows)) => Ok(rows),
                    _ => serde_json::from_str::<Content24hResponse>(&r.body)
                        .map_err(|e| e.to_string())
                        .and_then(|resp| validate_content(&resp, window.0, window.1)),
                };
                if let Ok(rows) = rows {
                    self.windows.insert(window, rows);
                }
            }
            _ => {}
        }
    }

    /// A page of a pass, or (no pass) a closing check's probe: its rows are observations, and it
    /// is part of no pass.
    fn ingest_page(&mut self, r: &RawRecord, body: ApplicationsPage) {
        let (Some(status), Some(page)) =
            (r.query.get("status"), r.query.get("page").and_then(|p| p.parse::<u64>().ok()))
        else {
            return;
        };
        let ids = body.data.iter().map(|a| a.id).collect();
        let applied_at = body.data.iter().map(|a| a.applied_at.timestamp_micros()).collect();
        for app in body.data {
            // A row first seen on a probe (pass 0) is an arrival, not a row a re-crawl recovered;
            // a probe never changes the pass a row was first seen in.
            let earlier = self.observations.get(&app.id).map(|o| o.first_pass);
            let first_pass = match (earlier, r.pass) {
                (Some(first), Some(pass)) => first.min(pass),
                (None, Some(pass)) => pass,
                (Some(first), None) => first,
                (None, None) => 0,
            };
            let newer = self.observations.get(&app.id).is_none_or(|o| o.seq < r.seq);
            if newer {
                self.observations
                    .insert(app.id, Observation { seq: r.seq, observed_at: r.received_at, app, first_pass });
            }
        }
        let info = PageInfo {
            seq: r.seq,
            invocation: r.invocation,
            row_count: body.meta.row_count,
            page_count: body.meta.page_count,
            ids,
            applied_at,
        };
        if let Some(pass) = r.pass {
            self.pages.entry((status.clone(), pass)).or_default().insert(page, info);
        }
    }

    /// The highest pass of a status with any page landed.
    pub fn last_pass(&self, status: &str) -> Option<u32> {
        self.pages.keys().filter(|(s, _)| s == status).map(|(_, p)| *p).max()
    }

    pub fn page(&self, status: &str, pass: u32, page: u64) -> Option<&PageInfo> {
        self.pages.get(&(status.to_owned(), pass)).and_then(|m| m.get(&page))
    }

    /// The page count a pass works to: what its first page said.
    pub fn page_count(&self, status: &str, pass: u32) -> u64 {
        self.page(status, pass, 1).map_or(0, |p| p.page_count)
    }

    /// `(rows seen in this pass still in the status, the service's row count at the pass's
    /// last page)`: equal when the pass saw the whole status.
    pub fn pass_check(&self, status: &str, pass: u32) -> PassCheck {
        let Some(pages) = self.pages.get(&(status.to_owned(), pass)) else {
            return PassCheck { seen: 0, row_count: 0, count_moved: false };
        };
        let end_count = pages.values().max_by_key(|p| p.seq).map_or(0, |p| p.row_count);
        let seen: HashSet<i64> = pages.values().flat_map(|p| p.ids.iter().copied()).collect();
        let current =
            seen.iter().filter(|id| self.observations.get(id).is_some_and(|o| o.app.status.as_str() == status)).count();
        // Within one invocation: pages landed by an earlier invocation of a resumed run were read
        // hours apart, and the seen-against-count check covers what changed between them.
        let mut counts: HashMap<u32, u64> = HashMap::new();
        let count_moved = pages.values().any(|p| *counts.entry(p.invocation).or_insert(p.row_count) != p.row_count);
        PassCheck { seen: current as u64, row_count: end_count, count_moved }
    }

    /// The pages of one pass of a status, as the quick sync's locator reads them.
    pub fn page_views(&self, status: &str, pass: u32) -> BTreeMap<u64, super::quick::PageView> {
        let Some(pages) = self.pages.get(&(status.to_owned(), pass)) else { return BTreeMap::new() };
        pages
            .iter()
            .map(|(n, p)| {
                let items = p.applied_at.iter().copied().zip(p.ids.iter().copied()).collect();
                (*n, super::quick::PageView { row_count: p.row_count, items })
            })
            .collect()
    }

    /// Whether two pages of a status, in any pass or invocation of the run, reported different
    /// counts: its list changed while the run read it.
    pub fn any_count_moved(&self) -> bool {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        self.pages
            .iter()
            .flat_map(|((s, _), pages)| pages.values().map(move |p| (s.as_str(), p.row_count)))
            .any(|(s, n)| *counts.entry(s).or_insert(n) != n)
    }

    /// Every application seen, with the status it was last seen in.
    pub fn latest_statuses(&self) -> HashMap<i64, String> {
        self.observations.iter().map(|(id, o)| (*id, o.app.status.as_str().to_owned())).collect()
    }

    /// Pages landed in any pass of a status.
    pub fn pages_fetched(&self, status: &str) -> u64 {
        self.pages.iter().filter(|((s, _), _)| s == status).map(|(_, m)| m.len() as u64).sum()
    }

    /// The latest observation of each application, ordered by id: taken, so that they are not
    /// held twice.
    pub fn into_applications(self) -> Vec<Observation> {
        let mut v: Vec<Observation> = self.observations.into_values().collect();
        v.sort_by_key(|o| o.app.id);
        v
    }

    /// Windows the service has no statistics for: validated, with both series empty.
    pub fn empty_windows(&self) -> Vec<(NaiveDate, NaiveDate)> {
        self.windows.iter().filter(|(_, rows)| rows.is_empty()).map(|(w, _)| *w).collect()
    }

    /// Every validated day, one per (metric, date).
    pub fn content(&self) -> Vec<ContentRow> {
        let mut by_key: BTreeMap<(Metric, NaiveDate), ContentRow> = BTreeMap::new();
        for rows in self.windows.values() {
            for r in rows {
                by_key.insert((r.metric, r.date), r.clone());
            }
        }
        by_key.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn windows_cover_the_range_exactly() {
        let w = windows(d("2023-12-30"), d("2024-03-01"), 30);
        assert_eq!(w.first().unwrap().0, d("2023-12-30"));
        assert_eq!(w.last().unwrap().1, d("2024-03-01"));
        for pair in w.windows(2) {
            assert_eq!(pair[0].1 + Duration::days(1), pair[1].0);
        }
        assert!(w.iter().all(|(a, b)| (*b - *a).num_days() < 30));
        assert_eq!(windows(d("2024-01-01"), d("2024-01-01"), 90), vec![(d("2024-01-01"), d("2024-01-01"))]);
    }

    fn point(name: &str, day: NaiveDate) -> ContentPoint {
        let ts = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
        ContentPoint {
            date: ts(day),
            last_date: ts(day - Duration::days(7)),
            current: 5,
            last: 4,
            total: 0,
            last_total: 0,
            name: name.to_owned(),
        }
    }

    fn answer(views: Vec<ContentPoint>, likes: Vec<ContentPoint>) -> Content24hResponse {
        serde_json::from_value(serde_json::json!({
            "success": true,
            "data": {"content_24h_data": {"views_24h": views, "likes_24h": likes}}
        }))
        .unwrap()
    }

    #[test]
    fn both_series_empty_is_a_window_without_statistics_and_fewer_days_a_truncation() {
        let (start, end) = (d("2024-01-01"), d("2024-01-03"));
        assert_eq!(validate_content(&answer(vec![], vec![]), start, end), Ok(vec![]));
        let views: Vec<ContentPoint> = start.iter_days().take(3).map(|x| point("Views", x)).collect();
        let e = validate_content(&answer(views.clone(), vec![]), start, end).unwrap_err();
        assert_eq!(e, "truncated: `likes_24h` has 0 of the 3 days of 2024-01-01..2024-01-03");
        let likes: Vec<ContentPoint> = start.iter_days().take(2).map(|x| point("Likes", x)).collect();
        let e = validate_content(&answer(views.clone(), likes), start, end).unwrap_err();
        assert_eq!(e, "truncated: `likes_24h` has 2 of the 3 days of 2024-01-01..2024-01-03");
        let likes: Vec<ContentPoint> = start.iter_days().take(3).map(|x| point("Likes", x)).collect();
        assert_eq!(validate_content(&answer(views, likes), start, end).unwrap().len(), 6);
    }

    proptest::proptest! {
        #[test]
        fn windows_partition_any_range(start in 0i64..20_000, len in 0i64..3_000, size in 1u32..400) {
            let from = d("1990-01-01") + Duration::days(start);
            let to = from + Duration::days(len);
            let w = windows(from, to, size);
            let total: i64 = w.iter().map(|(a, b)| (*b - *a).num_days() + 1).sum();
            proptest::prop_assert_eq!(total, len + 1);
            proptest::prop_assert!(w.iter().all(|(a, b)| a <= b && (*b - *a).num_days() < i64::from(size)));
            proptest::prop_assert_eq!(w.len() as i64, (len + 1 + i64::from(size) - 1) / i64::from(size));
        }
    }
}
