//! `creator-etl check`: the key and connectivity, with one request.

use serde::Serialize;

use super::{print_json, GlobalArgs};
use crate::api::models::ApplicationStatus;
use crate::api::{ApplicationsQuery, Client, MetricsSnapshot};
use crate::{exit, Error};

/// What `check` prints on stdout.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub base_url: String,
    pub key: &'static str,
    /// Pending applications, from the list's `meta.row_count`.
    pub pending_applications: u64,
    pub requests: MetricsSnapshot,
}

pub async fn exec(global: &GlobalArgs) -> Result<u8, Error> {
    let config = global.client_config()?;
    let client = Client::new(config)?;
    let page = client
        .list_applications(&ApplicationsQuery { per_page: 1, ..ApplicationsQuery::page(ApplicationStatus::Pending, 1) })
        .await?;
    let report = CheckReport {
        base_url: client.base_url().to_string(),
        key: "accepted",
        pending_applications: page.value.meta.row_count,
        requests: client.metrics(),
    };
    print_json(&report)?;
    Ok(exit::OK)
}
