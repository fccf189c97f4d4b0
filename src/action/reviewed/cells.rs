//! The cells a reviewed row's values are written in: amounts in integer cents, dates, and email
//! addresses, each checked with a message that says how to write it.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use crate::api::models::DateInput;

/// The largest amount a row may set: 100,000,000 cents (1,000,000.00 in the sale's currency).
/// Larger is far more likely a slip (an extra digit, cents typed twice) than a real sale.
pub const MAX_CENTS: i64 = 100_000_000;

/// Dates a row may set: from 2000-01-01 to 2099-12-31 (UTC). Anything outside is a slip, such as
/// a millisecond timestamp read as seconds.
pub const MIN_DATE: NaiveDate = NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid date");
pub const MAX_DATE: NaiveDate = NaiveDate::from_ymd_opt(2099, 12, 31).expect("valid date");

/// An amount in integer cents, from 0 to [`MAX_CENTS`]. Decimals are refused with the integer to
/// write instead; nothing is ever rounded.
pub fn parse_cents(raw: &str) -> Result<i64, String> {
    if let Ok(v) = raw.parse::<i64>() {
        return if v < 0 {
            Err(format!("`{raw}` is negative; amounts are zero or more cents"))
        } else if v > MAX_CENTS {
            Err(format!("`{raw}` cents is above the maximum of {MAX_CENTS} (1,000,000.00); check for an extra digit"))
        } else {
            Ok(v)
        };
    }
    if raw.bytes().all(|b| b.is_ascii_digit()) && !raw.is_empty() {
        return Err(format!(
            "`{raw}` cents is above the maximum of {MAX_CENTS} (1,000,000.00); check for an extra digit"
        ));
    }
    if let Some((whole, frac)) = raw.split_once('.') {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(whole) && digits(frac) && frac.len() <= 2 {
            let cents = format!("{whole}{frac:0<2}").trim_start_matches('0').to_owned();
            let cents = if cents.is_empty() { "0".to_owned() } else { cents };
            return Err(format!("`{raw}` is not in cents; amounts are integer cents: write {cents} for {raw}"));
        }
    }
    Err(format!("`{raw}` is not an amount; amounts are integer cents, like 1250 for 12.50"))
}

/// A date as the update accepts it: a Unix timestamp in seconds, an RFC 3339 date-time with its
/// zone (normalised to UTC), or a `YYYY-MM-DD` day, between [`MIN_DATE`] and [`MAX_DATE`].
pub fn parse_date(raw: &str) -> Result<DateInput, String> {
    let range = || format!("dates must fall between {MIN_DATE} and {MAX_DATE}");
    let in_range = |d: NaiveDate| (MIN_DATE..=MAX_DATE).contains(&d);
    if let Ok(ts) = raw.parse::<i64>() {
        let day = |secs: i64| DateTime::<Utc>::from_timestamp(secs, 0).map(|t| t.date_naive());
        if day(ts).is_some_and(in_range) {
            return Ok(DateInput::Unix(ts));
        }
        if let Some(d) = day(ts / 1000).filter(|d| in_range(*d)) {
            return Err(format!(
                "`{raw}` looks like a timestamp in milliseconds ({d}); the service takes seconds: write {}",
                ts / 1000
            ));
        }
        return Err(format!("`{raw}` is not a date: {}; write YYYY-MM-DD or a Unix timestamp in seconds", range()));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        let t = t.with_timezone(&Utc);
        if !in_range(t.date_naive()) {
            return Err(format!("`{raw}` is out of range: {}", range()));
        }
        return Ok(DateInput::Iso(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)));
    }
    if let Ok(d) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        if !in_range(d) {
            return Err(format!("`{raw}` is out of range: {}", range()));
        }
        return Ok(DateInput::Iso(d.format("%Y-%m-%d").to_string()));
    }
    if chrono::NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S").is_ok() {
        return Err(format!("`{raw}` has no time zone; add one, like `{raw}Z` for UTC"));
    }
    Err(format!("`{raw}` is not a date: write YYYY-MM-DD, an ISO 8601 date-time with a zone, or a Unix timestamp"))
}

pub(super) fn check_email(v: &str) -> Result<(), String> {
    let ok =
        v.split_once('@').is_some_and(|(a, b)| !a.is_empty() && b.contains('.')) && !v.contains(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(format!("`{v}` is not an email address (write `NULL` to clear it)"))
    }
}
