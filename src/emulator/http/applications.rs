//! `GET /campaign_applications`: one page of an organization's applications in one status, with
//! drift applied first when enabled (the main organization only).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::{error, int_param, Params, Shared};
use crate::api::models::{ApplicationStatus, ApplicationsPage, PageMeta};
use crate::emulator::data::MAIN_ORG;
use crate::emulator::state::Caller;

pub(super) async fn list_applications(
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
    if caller.org == MAIN_ORG && st.scripted_failure(&status, page) {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error");
    }
    let mut store = st.store();
    if caller.org == MAIN_ORG {
        st.list_request_arrived(&mut store);
        if st.drift {
            st.drift_step(&mut store);
        }
    }
    let (data, row_count) = store.page(caller.org, &status, campaign_id, page, per_page);
    drop(store);
    let meta =
        PageMeta { row_count, page_count: row_count.div_ceil(per_page), current_page: page, per_page: Some(per_page) };
    Json(ApplicationsPage { data, meta }).into_response()
}
