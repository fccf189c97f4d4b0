//! The emulator's routes: a gate that every API request passes (authentication, the rate
//! policy, the read-only rule, latency and injected faults), then one handler per operation.
//!
//! Order of checks in the gate, which decides which error a request sees first:
//! 401 (unknown key) → 429 (rate policy; refused requests do not count) → 403 (read-only key on a
//! write) → latency → fault → handler.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Duration as ChronoDuration, NaiveDate, TimeZone, Utc};
use serde_json::Value;

use super::state::{Caller, EmulatorState, Fault, LostKind, RateRefusal, RequestRecord, WriteRecord};
use super::BASE_PATH;
use crate::api::models::*;

type Shared = Arc<EmulatorState>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody::new(message))).into_response()
}

/// Builds the router: the API under [`BASE_PATH`], and `/__admin` when enabled.
pub fn app(state: Shared) -> Router {
    let api = Router::new()
        .route("/campaign_applications", get(list_applications))
        .route("/stats/content_24h_data", get(content_24h))
        .route("/affiliate_sales/{id}", patch(update_sale))
        .route("/stats/mark_credit_payout", post(mark_credit_payout))
        .route("/stats/creator_payouts", get(list_creator_payouts))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Not found") })
        .layer(middleware::from_fn_with_state(state.clone(), gate));
    let mut router = Router::new().nest(BASE_PATH, api);
    if state.admin {
        router = router.nest(
            "/__admin",
            Router::new()
                .route("/requests", get(admin_requests))
                .route("/writes", get(|State(s): State<Shared>| async move { Json(s.writes()) }))
                .route("/violations", get(|State(s): State<Shared>| async move { Json(s.violations()) }))
                .route("/drift", get(|State(s): State<Shared>| async move { Json(s.drift_events()) })),
        );
    }
    router.fallback(|| async { error(StatusCode::NOT_FOUND, "Not found") }).with_state(state)
}

async fn admin_requests(State(s): State<Shared>) -> Response {
    Json(serde_json::json!({ "counts": s.request_counts(), "requests": s.requests() })).into_response()
}

/// The route a path belongs to, with ids folded: `PATCH /affiliate_sales/{id}`.
fn route_name(method: &Method, path: &str) -> String {
    let rel = path.strip_prefix(BASE_PATH).unwrap_or(path);
    let rel = if rel.starts_with("/affiliate_sales/") { "/affiliate_sales/{id}" } else { rel };
    format!("{method} {rel}")
}

/// Marks a content request whose answer should lose days.
#[derive(Clone, Copy)]
struct ShortSeries;

async fn gate(State(st): State<Shared>, mut req: Request, next: Next) -> Response {
    let route = route_name(req.method(), req.uri().path());
    let query = req.uri().query().unwrap_or_default().to_owned();
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let caller = st.caller(bearer);
    let index = st.begin_request(RequestRecord {
        at_ms: st.elapsed_ms(),
        route: route.clone(),
        query,
        key: caller.map(|c| c.role),
        status: 0,
        done_ms: None,
        fault: None,
    });
    let finish = |status: StatusCode, fault: Option<Fault>| st.finish_request(index, status.as_u16(), fault);
    let Some(caller) = caller else {
        finish(StatusCode::UNAUTHORIZED, None);
        return error(StatusCode::UNAUTHORIZED, "Not Authenticated");
    };
    let is_mark = route == "POST /stats/mark_credit_payout";
    if let Err(refusal) = st.admit(&caller, &route, is_mark) {
        finish(StatusCode::TOO_MANY_REQUESTS, None);
        return rate_limited(refusal);
    }
    if caller.read_only && req.method() != Method::GET {
        finish(StatusCode::FORBIDDEN, None);
        return error(StatusCode::FORBIDDEN, "This API key is read-only and cannot modify data.");
    }
    if !st.latency.is_zero() {
        tokio::time::sleep(st.latency).await;
    }
    let is_write = req.method() != Method::GET;
    let fault = st.roll_fault(&caller, route == "GET /stats/content_24h_data", is_write);
    let early = match fault {
        Some(Fault::ServerErrorHtml) => Some(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body><h1>We're sorry, but something went wrong.</h1></body></html>",
            )
                .into_response(),
        ),
        Some(Fault::Unavailable) => {
            let mut r = error(StatusCode::SERVICE_UNAVAILABLE, "Service temporarily unavailable");
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            Some(r)
        }
        Some(Fault::TooManyRequests) => {
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(serde_json::json!({"error": "Too many requests, please slow down.", "retry_after": 1})),
            )
                .into_response();
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            Some(r)
        }
        _ => None,
    };
    if let Some(resp) = early {
        finish(resp.status(), fault);
        return resp;
    }
    if fault == Some(Fault::Slow) {
        tokio::time::sleep(st.faults.slow).await;
    }
    if fault == Some(Fault::ShortSeries) {
        req.extensions_mut().insert(ShortSeries);
    }
    req.extensions_mut().insert(caller);
    let resp = next.run(req).await;
    finish(resp.status(), fault);
    match fault {
        Some(Fault::ClosedMidBody) => cut_body(resp, true).await,
        Some(Fault::TruncatedJson) => cut_body(resp, false).await,
        // The handler applied the write; now its answer is lost.
        Some(Fault::LostAnswer) => match st.roll_lost_kind() {
            LostKind::Dropped => drop_connection(),
            LostKind::BadGateway => (
                StatusCode::BAD_GATEWAY,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
                .into_response(),
            LostKind::CutBody => cut_body(resp, true).await,
        },
        _ => resp,
    }
}

/// A response that fails before anything is written: the server closes the connection without
/// a status line, as when it dies or a proxy drops the connection. (hyper buffers the status
/// line and polls the body before it flushes, so an error on the first poll sends nothing.)
fn drop_connection() -> Response {
    let stream = futures_util::stream::iter(vec![Err::<Bytes, std::io::Error>(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "emulated lost answer",
    ))]);
    Response::new(Body::from_stream(stream))
}

/// Answers with half the body: as a complete (but truncated) message, or by dropping the
/// connection after the half (`abort`), which the client sees as an interrupted body.
async fn cut_body(resp: Response, abort: bool) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let half = bytes.slice(..bytes.len() / 2);
    parts.headers.remove(header::CONTENT_LENGTH);
    if abort {
        parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        // The server writes the status line and the half on a pause before the drop (hyper sends
        // what it buffered when the body stalls); without the pause nothing would leave at all.
        let half = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(half) });
        let drop = futures_util::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "emulated connection drop"))
        });
        return Response::from_parts(parts, Body::from_stream(futures_util::StreamExt::chain(half, drop)));
    }
    parts.status = StatusCode::OK;
    Response::from_parts(parts, Body::from(half))
}

fn rate_limited(refusal: RateRefusal) -> Response {
    let body = match refusal {
        RateRefusal::Spacing { retry_after, seconds_text } => serde_json::json!({
            "error": format!("Rate limit exceeded. Please wait {seconds_text} seconds between requests."),
            "retry_after": retry_after,
        }),
        RateRefusal::Hourly { cap, retry_after, reset_time } => serde_json::json!({
            "error": format!("Hourly rate limit of {cap} requests exceeded."),
            "retry_after": retry_after,
            "reset_time": reset_time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }),
    };
    (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
}

type Params = Query<HashMap<String, String>>;

/// An optional integer parameter; `Err` carries the 422 message.
fn int_param(q: &HashMap<String, String>, name: &str) -> Result<Option<i64>, String> {
    match q.get(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| format!("{name} must be an integer")),
    }
}

async fn list_applications(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    Query(q): Params,
) -> Response {
    let status = match q.get("status").map(String::as_str) {
        None | Some("") => ApplicationStatus::Pending,
        Some(s) => match ApplicationStatus::parse(s) {
            k if k.is_known() => k,
            _ => {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("Invalid status. Allowed values: {}", ApplicationStatus::known_list()),
                )
            }
        },
    };
    let parsed = (|| {
        let page = int_param(&q, "page")?.unwrap_or(1);
        if page < 1 {
            return Err("page must be greater than or equal to 1".to_owned());
        }
        let per_page = int_param(&q, "per_page")?.unwrap_or(25);
        if !(1..=100).contains(&per_page) {
            return Err("per_page must be between 1 and 100".to_owned());
        }
        Ok((page as u64, per_page as u64, int_param(&q, "campaign_id")?))
    })();
    let (page, per_page, campaign_id) = match parsed {
        Ok(p) => p,
        Err(m) => return error(StatusCode::UNPROCESSABLE_ENTITY, m),
    };
    let mut store = st.store();
    if st.drift && caller.org == super::data::MAIN_ORG {
        st.drift_step(&mut store);
    }
    let (data, row_count) = store.page(caller.org, &status, campaign_id, page, per_page);
    drop(store);
    let meta =
        PageMeta { row_count, page_count: row_count.div_ceil(per_page), current_page: page, per_page: Some(per_page) };
    Json(ApplicationsPage { data, meta }).into_response()
}

fn parse_date(v: Option<&String>, fmt: &str) -> Option<NaiveDate> {
    let v = v?.trim();
    // Strict width: `MM/DD/YYYY` and `YYYY-MM-DD` are both ten characters.
    (v.len() == 10).then(|| NaiveDate::parse_from_str(v, fmt).ok()).flatten()
}

fn midnight_ts(d: NaiveDate) -> i64 {
    Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight exists")).timestamp()
}

async fn content_24h(
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

/// The largest amount the emulator accepts, in cents: far above any real sale, and small enough
/// that the commission arithmetic cannot overflow.
const MAX_CENTS: i64 = 1_000_000_000_000;

/// A validated update, applied only when every field is valid.
#[derive(Default)]
struct ValidUpdate {
    total: Option<i64>,
    subtotal: Option<i64>,
    commission: Option<i64>,
    currency: Option<Currency>,
    occurred_at: Option<DateTime<Utc>>,
    due_at: Option<Option<DateTime<Utc>>>,
    customer_email: Option<Option<String>>,
    customer_name: Option<Option<String>>,
    status: Option<SaleStatus>,
    sub_id: Option<Option<String>>,
}

fn parse_when(v: &Value) -> Option<DateTime<Utc>> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|s| Utc.timestamp_opt(s, 0).single()),
        Value::String(s) => DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).ok().or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| Utc.from_utc_datetime(&t))
        }),
        _ => None,
    }
}

fn validate_update(body: &serde_json::Map<String, Value>) -> Result<ValidUpdate, String> {
    let mut u = ValidUpdate::default();
    let cents = |name: &str| -> Result<Option<i64>, String> {
        match body.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .filter(|n| (0..=MAX_CENTS).contains(n))
                .map(Some)
                .ok_or_else(|| format!("{name} must be an integer amount in cents between 0 and {MAX_CENTS}")),
        }
    };
    let text = |name: &str| -> Result<Option<Option<String>>, String> {
        match body.get(name) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
            Some(_) => Err(format!("{name} must be a string or null")),
        }
    };
    u.total = cents("total")?;
    u.subtotal = cents("subtotal")?;
    u.commission = cents("commission")?;
    if let Some(v) = body.get("currency") {
        let c = v.as_str().map(Currency::parse).filter(Currency::is_known);
        u.currency = Some(c.ok_or_else(|| format!("currency must be one of {}", Currency::known_list()))?);
    }
    if let Some(v) = body.get("status") {
        let s = v.as_str().map(SaleStatus::parse).filter(SaleStatus::is_known);
        u.status = Some(s.ok_or_else(|| format!("status must be one of {}", SaleStatus::known_list()))?);
    }
    if let Some(v) = body.get("occurred_at") {
        u.occurred_at = Some(parse_when(v).ok_or("occurred_at must be an ISO 8601 date-time or a Unix timestamp")?);
    }
    if let Some(v) = body.get("due_at") {
        u.due_at = Some(match v {
            Value::Null => None,
            v => Some(parse_when(v).ok_or("due_at must be an ISO 8601 date-time or a Unix timestamp")?),
        });
    }
    u.customer_email = text("customer_email")?;
    u.customer_name = text("customer_name")?;
    u.sub_id = text("sub_id")?;
    Ok(u)
}

async fn update_sale(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let record = |status: StatusCode, outcome: String, sale: Option<Sale>| WriteRecord {
        at: Utc::now(),
        at_ms: st.elapsed_ms(),
        key: caller.role,
        operation: "update_sale",
        target: id.clone(),
        body: parsed.clone(),
        status: status.as_u16(),
        outcome,
        sale,
    };
    let fail = |status: StatusCode, msg: &str| {
        st.record_write(record(status, msg.to_owned(), None));
        error(status, msg)
    };
    let mut store = st.store();
    let sale = id.parse::<i64>().ok().and_then(|i| store.sales.get_mut(&i)).filter(|s| s.org == caller.org);
    let Some(sale) = sale else {
        drop(store);
        return fail(StatusCode::NOT_FOUND, "Sale not found");
    };
    if sale.status == SaleStatus::Cancelled {
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "Cancelled sales cannot be updated.");
    }
    if !sale.updatable() {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Only sales created via the public API (website platform) can be updated.",
        );
    }
    let Some(obj) = parsed.as_object() else {
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "Request body must be a JSON object");
    };
    let u = match validate_update(obj) {
        Ok(u) => u,
        Err(m) => {
            drop(store);
            return fail(StatusCode::UNPROCESSABLE_ENTITY, &m);
        }
    };
    if let Some(t) = u.total {
        sale.total = t;
        if u.commission.is_none() {
            // Rule 1: a new total without commission recalculates it from the campaign's rate.
            sale.commission = (t * sale.commission_pct + 50) / 100;
        }
    }
    if let Some(c) = u.commission {
        sale.commission = c;
    }
    if let Some(v) = u.subtotal {
        sale.subtotal = v;
    }
    if let Some(v) = u.currency {
        sale.currency = v;
    }
    if let Some(v) = u.occurred_at {
        sale.occurred_at = v;
    }
    if let Some(v) = u.due_at {
        sale.due_at = v;
    }
    if let Some(v) = u.customer_email {
        sale.customer_email = v;
    }
    if let Some(v) = u.customer_name {
        sale.customer_name = v;
    }
    if let Some(v) = u.sub_id {
        sale.sub_id = v;
    }
    if let Some(v) = u.status {
        sale.status = v;
    }
    let model = sale.to_model();
    drop(store);
    st.record_write(record(StatusCode::OK, "updated".into(), Some(model.clone())));
    Json(SaleEnvelope { data: model }).into_response()
}

async fn mark_credit_payout(State(st): State<Shared>, Extension(caller): Extension<Caller>, body: Bytes) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let uuid = parsed.get("creator_payout_uuid").and_then(Value::as_str).map(str::trim).unwrap_or_default().to_owned();
    let record = |status: StatusCode, outcome: String| WriteRecord {
        at: Utc::now(),
        at_ms: st.elapsed_ms(),
        key: caller.role,
        operation: "mark_credit_payout",
        target: uuid.clone(),
        body: parsed.clone(),
        status: status.as_u16(),
        outcome,
        sale: None,
    };
    let fail = |status: StatusCode, msg: String| {
        st.record_write(record(status, msg.clone()));
        error(status, msg)
    };
    if uuid.is_empty() {
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "creator_payout_uuid is required".into());
    }
    let mut store = st.store();
    let Some(p) = store.payouts.iter_mut().find(|p| p.org == caller.org && p.uuid.eq_ignore_ascii_case(&uuid)) else {
        drop(store);
        return fail(StatusCode::NOT_FOUND, "Creator payout not found".into());
    };
    if p.status != "due" && p.status != "pending_completing_requirements" {
        let msg = format!("Cannot mark payout as paid: current status is {}", p.status);
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, msg);
    }
    if p.total_credit_amount <= 0.0 {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Only credit payouts can be marked paid via this endpoint".into(),
        );
    }
    if p.total_cash_amount > 0.0 {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Cannot mark payout as paid: payouts with both cash and credits must be paid in the dashboard".into(),
        );
    }
    p.status = "paid_externally".into();
    let m = p.to_model();
    drop(store);
    st.record_write(record(StatusCode::OK, "marked".into()));
    let credit = m.total_credit_amount.unwrap_or_default();
    Json(MarkPayoutResponse {
        success: true,
        creator_payout: MarkedPayout {
            id: m.id,
            uuid: m.uuid,
            creator_name: m.creator_name,
            since_date: m.since_date,
            deal_date: m.deal_date,
            status: m.status,
            amount: m.amount,
            credits_enabled: m.credits_enabled,
            credit_name: m.credit_name.clone(),
            total_credit_amount: m.total_credit_amount,
            formatted_total_credit_amount: Some(format!("{credit:.0} {}", m.credit_name.unwrap_or_default())),
        },
    })
    .into_response()
}

async fn list_creator_payouts(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    Query(q): Params,
) -> Response {
    let (Some(start), Some(end)) =
        (parse_date(q.get("start_date"), "%Y-%m-%d"), parse_date(q.get("end_date"), "%Y-%m-%d"))
    else {
        return error(StatusCode::BAD_REQUEST, "Dates should be in YYYY-MM-DD format");
    };
    let ints = (|| {
        Ok::<_, String>((
            int_param(&q, "page")?.unwrap_or(1).max(1) as u64,
            // `limit` is an alias of `per_page`; at most 40.
            int_param(&q, "per_page")?.or(int_param(&q, "limit")?).unwrap_or(4).clamp(1, 40) as u64,
            int_param(&q, "campaign_id")?,
            int_param(&q, "creator_id")?,
        ))
    })();
    let (page, per_page, campaign_id, creator_id) = match ints {
        Ok(v) => v,
        Err(m) => return error(StatusCode::UNPROCESSABLE_ENTITY, m),
    };
    let credits_only = matches!(q.get("credits_only").map(String::as_str), Some("true" | "1"));
    let status = q.get("status").filter(|s| !s.is_empty());
    let store = st.store();
    let campaign_name = campaign_id.and_then(|c| store.campaigns.iter().find(|k| k.id == c).map(|k| k.name.clone()));
    let mut rows: Vec<_> = store
        .payouts
        .iter()
        .filter(|p| p.org == caller.org && p.deal_date >= start && p.deal_date <= end)
        .filter(|p| !credits_only || p.total_credit_amount > 0.0)
        .filter(|p| status.is_none_or(|s| *s == p.status))
        .filter(|p| campaign_id.is_none() || campaign_name.as_deref() == Some(p.campaign_name.as_str()))
        .filter(|p| creator_id.is_none_or(|c| c == p.creator_id))
        .collect();
    rows.sort_by(|a, b| b.deal_date.cmp(&a.deal_date).then(b.id.cmp(&a.id)));
    let row_count = rows.len() as u64;
    let skip = usize::try_from(page.saturating_sub(1).saturating_mul(per_page)).unwrap_or(usize::MAX);
    let data = rows.iter().skip(skip).take(per_page as usize).map(|p| p.to_model()).collect();
    Json(PayoutsPage {
        success: true,
        data,
        meta: PayoutsMeta { current_page: page, row_count, page_count: row_count.div_ceil(per_page) },
    })
    .into_response()
}
