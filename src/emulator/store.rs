//! The emulator's data store: applications with per-status indexes kept in the list's order
//! (newest first, as the service pages them), the campaigns, sales, payouts and content model,
//! and the drift that moves them while clients page.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::data::{self, Campaign, ContentModel, Dataset, StoredPayout, StoredSale, MAIN_ORG};
use crate::api::models::{Application, ApplicationStatus};

/// Applications with per-status indexes kept in the list's order (newest first).
#[derive(Debug)]
pub struct Store {
    pub campaigns: Vec<Campaign>,
    apps: Vec<(u32, Application)>,
    by_status: HashMap<(u32, ApplicationStatus), Vec<u32>>,
    pub sales: BTreeMap<i64, StoredSale>,
    pub payouts: Vec<StoredPayout>,
    pub content: ContentModel,
    next_app_id: i64,
    next_account_id: i64,
    user_pool: u64,
    drift_rng: fastrand::Rng,
}

fn order_key(a: &Application) -> (i64, i64) {
    (a.applied_at.timestamp_micros(), a.id)
}

impl Store {
    pub(super) fn new(d: Dataset, seed: u64) -> Self {
        let user_pool = (d.applications.len() as u64 / 2).max(10);
        let mut s = Store {
            campaigns: d.campaigns,
            apps: d.applications,
            by_status: HashMap::new(),
            sales: d.sales.into_iter().map(|s| (s.id, s)).collect(),
            payouts: d.payouts,
            content: d.content,
            next_app_id: d.next_application_id,
            next_account_id: d.next_account_id,
            user_pool,
            drift_rng: fastrand::Rng::with_seed(data::mix(seed ^ 0xD1F7)),
        };
        // The dataset is in ascending order, so walking it backwards gives newest first.
        for i in (0..s.apps.len()).rev() {
            let (org, app) = &s.apps[i];
            s.by_status.entry((*org, app.status.clone())).or_default().push(i as u32);
        }
        s
    }

    fn index_insert(&mut self, i: u32) {
        let (org, app) = &self.apps[i as usize];
        let key = order_key(app);
        let apps = &self.apps;
        let list = self.by_status.entry((*org, app.status.clone())).or_default();
        let pos = list.partition_point(|&j| order_key(&apps[j as usize].1) > key);
        list.insert(pos, i);
    }

    /// One page of an organization's applications in a status, newest first, and the total.
    pub fn page(
        &self,
        org: u32,
        status: &ApplicationStatus,
        campaign_id: Option<i64>,
        page: u64,
        per_page: u64,
    ) -> (Vec<Application>, u64) {
        let empty = vec![];
        let list = self.by_status.get(&(org, status.clone())).unwrap_or(&empty);
        // An absurd page number is past the end, never an overflow.
        let skip = usize::try_from(page.saturating_sub(1).saturating_mul(per_page)).unwrap_or(usize::MAX);
        match campaign_id {
            None => {
                let rows = list.iter().skip(skip).take(per_page as usize).map(|&i| self.apps[i as usize].1.clone());
                (rows.collect(), list.len() as u64)
            }
            Some(c) => {
                let matching: Vec<u32> =
                    list.iter().copied().filter(|&i| self.apps[i as usize].1.campaign_id == c).collect();
                let rows = matching.iter().skip(skip).take(per_page as usize).map(|&i| self.apps[i as usize].1.clone());
                (rows.collect(), matching.len() as u64)
            }
        }
    }

    /// Changes an application's status, keeping the lists in order. False when there is no such id.
    pub fn set_status(&mut self, id: i64, status: ApplicationStatus) -> bool {
        let Some(i) = self.apps.iter().position(|(_, a)| a.id == id) else { return false };
        let key = (self.apps[i].0, self.apps[i].1.status.clone());
        if let Some(list) = self.by_status.get_mut(&key) {
            list.retain(|&j| j as usize != i);
        }
        self.apps[i].1.status = status;
        self.index_insert(i as u32);
        true
    }

    /// A new application of an organization, in its status's list at `applied_at`; its id.
    pub fn add_application(&mut self, org: u32, status: ApplicationStatus, applied_at: DateTime<Utc>) -> i64 {
        let id = self.next_app_id;
        self.next_app_id += 1;
        let mut rng = self.drift_rng.fork();
        let app = data::make_application(
            &mut rng,
            id,
            org,
            &self.campaigns,
            applied_at,
            status,
            self.user_pool,
            &mut self.next_account_id,
        );
        self.apps.push((org, app));
        self.index_insert((self.apps.len() - 1) as u32);
        id
    }

    /// Sets the monthly post count of an application's first account (adding one if it has
    /// none), as the creator's posting changes it. False when there is no such id.
    pub fn set_post_count(&mut self, id: i64, monthly_post_count: i64) -> bool {
        let Some((_, app)) = self.apps.iter_mut().find(|(_, a)| a.id == id) else { return false };
        match app.connected_accounts.first_mut() {
            Some(account) => account.monthly_post_count = monthly_post_count,
            None => {
                let account_id = self.next_account_id;
                self.next_account_id += 1;
                app.connected_accounts.push(crate::api::models::ConnectedAccount {
                    id: account_id,
                    provider: crate::api::models::Provider::TikTok,
                    username: None,
                    monthly_post_count,
                });
            }
        }
        true
    }

    /// An organization's applications, newest first: the truth tests compare a crawl with.
    pub fn applications(&self, org: u32) -> Vec<Application> {
        let mut v: Vec<Application> = self.apps.iter().filter(|(o, _)| *o == org).map(|(_, a)| a.clone()).collect();
        v.sort_by_key(|a| std::cmp::Reverse(order_key(a)));
        v
    }

    /// One drift step for the main organization: up to two new pending applications and up to
    /// two pending ones moved to another status.
    pub(super) fn drift_step(&mut self, now: DateTime<Utc>) -> Vec<DriftEvent> {
        let mut events = vec![];
        for _ in 0..self.drift_rng.usize(0..3) {
            let newest = self.apps.last().map(|(_, a)| a.applied_at).unwrap_or(now);
            let applied_at = newest.max(now) + chrono::Duration::seconds(self.drift_rng.i64(1..60));
            let id = self.add_application(MAIN_ORG, ApplicationStatus::Pending, applied_at);
            events.push(DriftEvent::Inserted { id });
        }
        for _ in 0..self.drift_rng.usize(0..3) {
            let key = (MAIN_ORG, ApplicationStatus::Pending);
            let Some(list) = self.by_status.get_mut(&key).filter(|l| !l.is_empty()) else {
                break;
            };
            let i = list.remove(self.drift_rng.usize(0..list.len()));
            let to = [
                ApplicationStatus::Accepted,
                ApplicationStatus::Rejected,
                ApplicationStatus::Canceled,
                ApplicationStatus::PendingContract,
            ][self.drift_rng.usize(0..4)]
            .clone();
            let app = &mut self.apps[i as usize].1;
            app.status = to.clone();
            events.push(DriftEvent::Moved { id: app.id, from: ApplicationStatus::Pending, to });
            self.index_insert(i);
        }
        events
    }
}

/// A change `--drift` made while clients paged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DriftEvent {
    Inserted { id: i64 },
    Moved { id: i64, from: ApplicationStatus, to: ApplicationStatus },
}
