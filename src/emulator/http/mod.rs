//! The emulator's routes: a gate that every API request passes ([`gate`]: authentication, the
//! rate policy, the read-only rule, latency and injected faults, and the request record), then
//! one handler per operation, in one file per resource, and the `/__admin` introspection.

mod admin;
mod applications;
mod content;
mod gate;
mod payouts;
mod sales;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use chrono::NaiveDate;

use super::state::EmulatorState;
use super::BASE_PATH;
use crate::api::models::ErrorBody;

type Shared = Arc<EmulatorState>;

/// A query string, parameter by parameter.
type Params = Query<HashMap<String, String>>;

/// An error answer with the service's JSON error body.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody::new(message))).into_response()
}

/// Builds the router: the API under [`BASE_PATH`], and `/__admin` when enabled.
pub fn app(state: Shared) -> Router {
    let api = Router::new()
        .route("/campaign_applications", get(applications::list_applications))
        .route("/stats/content_24h_data", get(content::content_24h))
        .route("/affiliate_sales/{id}", patch(sales::update_sale))
        .route("/stats/mark_credit_payout", post(payouts::mark_credit_payout))
        .route("/stats/creator_payouts", get(payouts::list_creator_payouts))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Not found") })
        .layer(middleware::from_fn_with_state(state.clone(), gate::gate));
    let mut router = Router::new().nest(BASE_PATH, api);
    if state.admin {
        router = router.nest("/__admin", admin::routes());
    }
    router.fallback(|| async { error(StatusCode::NOT_FOUND, "Not found") }).with_state(state)
}

/// An optional integer parameter; `Err` carries the 422 message.
fn int_param(q: &HashMap<String, String>, name: &str) -> Result<Option<i64>, String> {
    match q.get(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| format!("{name} must be an integer")),
    }
}

/// A date parameter in the format `fmt`, or `None` when absent or malformed.
fn parse_date(v: Option<&String>, fmt: &str) -> Option<NaiveDate> {
    let v = v?.trim();
    // Strict width: `MM/DD/YYYY` and `YYYY-MM-DD` are both ten characters.
    (v.len() == 10).then(|| NaiveDate::parse_from_str(v, fmt).ok()).flatten()
}
