//! The gate every API request passes before its handler, and the request record it keeps.
//!
//! Order of checks, which decides which error a request sees first:
//! 401 (unknown key) → 429 (rate policy; refused requests do not count) → 403 (read-only key on a
//! write) → latency → fault → handler. Faults that replace the answer end the request here; the
//! others delay it, shorten the content series, or mangle the handler's answer on its way out.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{error, Shared};
use crate::emulator::state::{Fault, LostKind, RateRefusal, RequestRecord};
use crate::emulator::BASE_PATH;

/// The route a path belongs to, with ids folded: `PATCH /affiliate_sales/{id}`.
fn route_name(method: &Method, path: &str) -> String {
    let rel = path.strip_prefix(BASE_PATH).unwrap_or(path);
    let rel = if rel.starts_with("/affiliate_sales/") { "/affiliate_sales/{id}" } else { rel };
    format!("{method} {rel}")
}

/// Marks a content request whose answer should lose days.
#[derive(Clone, Copy)]
pub(super) struct ShortSeries;

/// Admits, records and possibly faults one API request, in the order of checks above.
pub(super) async fn gate(State(st): State<Shared>, mut req: Request, next: Next) -> Response {
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

/// The rate policy's 429, with the service's body for spacing or for the hourly cap.
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
