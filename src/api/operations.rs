//! The API's operations as the client offers them: their names, their queries, what their
//! answers come back as, and the checks an answer must pass beyond decoding.

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};

use super::error::ApiError;
use super::models::{ApplicationStatus, ApplicationsPage, MarkPayoutResponse};
use super::pacing::RequestClass;

/// Largest page the applications list serves.
pub const MAX_APPLICATIONS_PER_PAGE: u32 = 100;
/// Largest page the payouts list serves.
pub(crate) const MAX_PAYOUTS_PER_PAGE: u32 = 40;
/// `limit` that asks the statistics endpoint for every day of the range.
pub const CONTENT_LIMIT_ALL: u32 = 10_000;

/// Largest `row_count` the client believes (10 million applications): a larger one would have
/// the crawl plan more pages than any organization has.
pub(crate) const MAX_ROW_COUNT: u64 = 10_000_000;

/// The operations of the API, as named in counters and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    ListApplications,
    Content24h,
    UpdateSale,
    MarkCreditPayout,
    ListCreatorPayouts,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::ListApplications => "list_applications",
            Endpoint::Content24h => "content_24h",
            Endpoint::UpdateSale => "update_sale",
            Endpoint::MarkCreditPayout => "mark_credit_payout",
            Endpoint::ListCreatorPayouts => "list_creator_payouts",
        }
    }

    pub(crate) fn class(self) -> RequestClass {
        match self {
            Endpoint::MarkCreditPayout => RequestClass::MarkPayout,
            _ => RequestClass::General,
        }
    }
}

/// A decoded response together with what was received, for raw landing and diagnosis.
#[derive(Clone, Debug)]
pub struct Fetched<T> {
    pub value: T,
    /// The body exactly as received.
    pub raw: Bytes,
    pub status: u16,
    pub endpoint: Endpoint,
    /// Path relative to the base URL, e.g. `campaign_applications`.
    pub path: String,
    /// Query parameters as sent (the key is never among them).
    pub query: Vec<(String, String)>,
    pub received_at: DateTime<Utc>,
    pub attempts: u32,
}

impl<T> Fetched<T> {
    /// The parsed value, and the answer without it: a caller that keeps the value need not
    /// clone it to keep the rest.
    pub fn take_value(self) -> (T, Fetched<()>) {
        let Fetched { value, raw, status, endpoint, path, query, received_at, attempts } = self;
        (value, Fetched { value: (), raw, status, endpoint, path, query, received_at, attempts })
    }
}

/// Query of `GET /campaign_applications`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationsQuery {
    pub status: ApplicationStatus,
    pub campaign_id: Option<i64>,
    pub page: u64,
    pub per_page: u32,
}

impl ApplicationsQuery {
    /// Page `page` of a status, 100 rows a page.
    pub fn page(status: ApplicationStatus, page: u64) -> Self {
        ApplicationsQuery { status, campaign_id: None, page, per_page: MAX_APPLICATIONS_PER_PAGE }
    }
}

/// Query of `GET /stats/creator_payouts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutsQuery {
    pub start_date: NaiveDate,
    pub end_date: NaiveDate,
    pub credits_only: bool,
    /// Snake-case status, e.g. `due`.
    pub status: Option<String>,
    pub campaign_id: Option<i64>,
    pub creator_id: Option<i64>,
    pub page: u64,
    /// At most 40; larger values are lowered to 40.
    pub per_page: u32,
}

/// What a payout mark achieved.
#[derive(Clone, Debug)]
pub enum MarkOutcome {
    /// The service answered 2xx: the payout is now paid externally.
    Marked(Box<Written<MarkPayoutResponse>>),
    /// It already was: the service refused with "current status is paid_externally", which the
    /// contract says to treat as a successful no-op. `resent` says an earlier attempt of this
    /// request got no answer: then the earlier attempt is what marked it.
    AlreadyPaid { status: u16, message: String, resent: bool },
}

/// The answer to a write (`PATCH`, `POST`) that the service accepted: any 2xx ends its retries,
/// whatever its body, because the write took effect.
#[derive(Clone, Debug)]
pub struct Written<T> {
    pub status: u16,
    /// The decoded body; `None` when it was not the expected JSON or was cut short.
    pub value: Option<T>,
    /// Why the body could not be read or decoded, when it could not.
    pub unreadable: Option<String>,
    /// The body as received (possibly cut short).
    pub raw: Bytes,
    pub attempts: u32,
    /// An earlier attempt got no answer (a lost connection or a 5xx): this answer is to a re-send.
    pub resent: bool,
}

/// A write that the service did not accept, and whether it may have taken effect anyway.
#[derive(Debug)]
pub struct WriteError {
    pub error: ApiError,
    /// Some attempt's answer was lost (the connection failed or a 5xx came back): the service may
    /// have applied the write before the failure.
    pub in_doubt: bool,
}

/// Checks a page's `meta` against itself and the request: the page count must follow from the
/// row count and the page size, and the page must not hold more rows than its size.
pub(crate) fn check_page(page: &ApplicationsPage, asked_per_page: u32) -> Result<(), String> {
    let m = &page.meta;
    let per_page = m.per_page.unwrap_or(u64::from(asked_per_page));
    if per_page == 0 || per_page > u64::from(MAX_APPLICATIONS_PER_PAGE) {
        return Err(format!("`per_page` {per_page} is outside 1..={MAX_APPLICATIONS_PER_PAGE}"));
    }
    if m.row_count > MAX_ROW_COUNT {
        return Err(format!("`row_count` {} is above the {MAX_ROW_COUNT} this client believes", m.row_count));
    }
    let expected = m.row_count.div_ceil(per_page);
    // An empty list may be reported as one empty page.
    if m.page_count != expected && !(m.row_count == 0 && m.page_count == 1) {
        return Err(format!(
            "`page_count` {} disagrees with `row_count` {} at `per_page` {per_page} (expected {expected})",
            m.page_count, m.row_count
        ));
    }
    if page.data.len() as u64 > per_page {
        return Err(format!("the page holds {} rows, more than `per_page` {per_page}", page.data.len()));
    }
    Ok(())
}

/// A refusal of a payout mark that says it is already paid externally: on any 4xx but the key's
/// and the rate limit's, whatever the status.
pub(crate) fn is_already_paid(e: &ApiError) -> bool {
    let four_xx = e.status().is_some_and(|s| (400..500).contains(&s) && s != 401 && s != 403 && s != 429);
    four_xx && e.server_message().is_some_and(|m| m.to_ascii_lowercase().contains("current status is paid_externally"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn already_paid_is_recognised_on_any_4xx() {
        let e = ApiError::Unprocessable {
            url: "u".into(),
            message: "Cannot mark payout as paid: current status is paid_externally".into(),
        };
        assert!(is_already_paid(&e));
        let e = ApiError::Rejected { url: "u".into(), status: 400, message: "current status is due".into() };
        assert!(!is_already_paid(&e));
    }
}
