//! `/__admin`: what clients did, for tests and demos to inspect over HTTP (request counts and
//! records, writes, rate-limit violations, drift events). Served only when enabled, and outside
//! the gate: no key, no rate policy, not recorded.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::Shared;

/// The introspection routes, to nest under `/__admin`.
pub(super) fn routes() -> Router<Shared> {
    Router::new()
        .route("/requests", get(requests))
        .route("/writes", get(|State(s): State<Shared>| async move { Json(s.writes()) }))
        .route("/violations", get(|State(s): State<Shared>| async move { Json(s.violations()) }))
        .route("/drift", get(|State(s): State<Shared>| async move { Json(s.drift_events()) }))
}

async fn requests(State(s): State<Shared>) -> Response {
    Json(serde_json::json!({ "counts": s.request_counts(), "requests": s.requests() })).into_response()
}
