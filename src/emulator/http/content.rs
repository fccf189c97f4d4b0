//! `GET /stats/content_24h_data`: the daily views and likes of a date range, each day with the
//! same day a week before, and the window's totals (off by one for a skewed organization).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{Duration as ChronoDuration, NaiveDate, TimeZone, Utc};

use super::gate::ShortSeries;
use super::{error, int_param, parse_date, Params, Shared};
use crate::api::models::{Content24hData, Content24hEnvelope, Content24hResponse, ContentPoint};
use crate::emulator::state::Caller;

/// The Unix timestamp of a day's midnight, UTC, as the service dates its points.
fn midnight_ts(d: NaiveDate) -> i64 {
    Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight exists")).timestamp()
}

pub(super) async fn content_24h(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    short: Option<Extension<ShortSeries>>,
    Query(q): Params,
) -> Response {
    let bad_dates = || error(StatusCode::BAD_REQUEST, "Dates should be in MM/DD/YYYY format");
    let (Some(start), Some(end)) =
        (parse_date(q.get("start_date"), "%m/%d/%Y"), parse_date(q.get("end_date"), "%m/%d/%Y"))
    else {
        return bad_dates();
    };
    if end < start {
        return error(StatusCode::BAD_REQUEST, "start_date must be on or before end_date");
    }
    let limit = match int_param(&q, "limit") {
        Ok(None) => 4,
        // 10,000 is the documented "all data"; more is served as 10,000 days at most.
        Ok(Some(n)) if n >= 1 => n.min(10_000) as usize,
        _ => return error(StatusCode::BAD_REQUEST, "limit must be a positive integer"),
    };
    let model = st.store().content.clone();
    let skew = i64::from(st.skewed_totals(caller.org));
    let last_day = end.min(model.today);
    // `limit` keeps the most recent days; only those are walked, however long the range.
    let first_day = last_day.checked_sub_days(chrono::Days::new(limit as u64 - 1)).map_or(start, |d| d.max(start));
    let mut days: Vec<NaiveDate> = first_day.iter_days().take_while(|d| *d <= last_day).collect();
    if st.no_content(caller.org) {
        days.clear();
    }
    if short.is_some() && days.len() > 1 {
        let keep = days.len() / 2;
        days.truncate(keep.max(1));
    }
    let series = |name: &str, pick: fn((i64, i64)) -> i64| {
        let mut points: Vec<ContentPoint> = days
            .iter()
            .map(|d| {
                let lastd = *d - ChronoDuration::days(7);
                ContentPoint {
                    date: midnight_ts(*d),
                    last_date: midnight_ts(lastd),
                    current: pick(model.day(caller.org, *d)),
                    last: pick(model.day(caller.org, lastd)),
                    name: name.to_owned(),
                    total: 0,
                    last_total: 0,
                }
            })
            .collect();
        let total: i64 = points.iter().map(|p| p.current).sum();
        let last_total: i64 = points.iter().map(|p| p.last).sum();
        for p in &mut points {
            p.total = total + skew;
            p.last_total = last_total;
        }
        points
    };
    Json(Content24hResponse {
        success: true,
        data: Content24hEnvelope {
            content_24h_data: Content24hData {
                views_24h: Some(series("Views", |(v, _)| v)),
                likes_24h: Some(series("Likes", |(_, l)| l)),
            },
        },
    })
    .into_response()
}
