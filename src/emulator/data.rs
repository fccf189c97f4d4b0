//! The emulator's seeded data: two organizations with campaigns, applications, daily content
//! statistics, affiliate sales and creator payouts.
//!
//! Everything is a pure function of [`GenConfig`], so a seed reproduces the same service. The
//! generator is public because benchmarks build large datasets with it directly, without HTTP.
//!
//! Fixed layout, so tests can name their targets:
//! - organization [`MAIN_ORG`] (campaigns 11–18 across a brand and two child brands) and
//!   [`OTHER_ORG`] (campaigns 91–93), whose data must never reach the main org's keys;
//! - application ids ascend with `applied_at` from 100001, both organizations interleaved;
//! - sales: updatable website/ios/android sales 7001…(7000 + `sales`), storefront (not updatable)
//!   6001–6004, cancelled 6011–6014, the other organization's 6901–6904;
//! - payouts: see [`PayoutKind`]; ids from 3001, UUIDs derived from the seed.
//! - `organizations` more, numbered 1…N ([`numbered_org`]), for fleets: each with
//!   `org_applications` applications over three years, two campaigns (ids 1,000,000 + 10·k + 1
//!   and + 2), its own content statistics (none with [`super::OrgPolicy::no_content`]), no sales
//!   or payouts, and the key [`org_key`].

use chrono::{DateTime, Datelike, Duration as ChronoDuration, NaiveDate, TimeZone, Utc};

use crate::api::models::*;

pub const MAIN_ORG: u32 = 1;
pub const OTHER_ORG: u32 = 2;

/// Internal id of numbered organization `k` (1-based).
pub const fn numbered_org(k: u32) -> u32 {
    1000 + k
}

/// The key of numbered organization `k`: `emu-org-<k>-key`.
pub fn org_key(k: u32) -> String {
    format!("emu-org-{k}-key")
}

/// Commission percentages by campaign, applied when a sale's total changes without commission.
const COMMISSION_PCT: [i64; 3] = [10, 12, 15];

const FIRST: &[&str] = &[
    "Ava", "Liam", "Mia", "Noah", "Zoe", "Ethan", "Luna", "Mateo", "Chloe", "Kai", "Aria", "Leo", "Nora", "Omar",
    "Ivy", "Hugo", "Maya", "Theo", "Sofia", "Ezra", "Léa", "Jonas", "Amara", "Ravi",
];
const LAST: &[&str] = &[
    "Garcia", "Nguyen", "Smith", "Okafor", "Rossi", "Kim", "Müller", "Silva", "Cohen", "Patel", "Dubois", "Larsen",
    "O'Brien", "Tanaka", "Haddad", "Novak",
];

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenConfig {
    pub seed: u64,
    /// Applications of the main organization (the other gets about 1 in 20 more).
    pub applications: usize,
    /// Updatable sales of the main organization.
    pub sales: usize,
    /// The emulator's "today": the last day with statistics.
    pub today: NaiveDate,
    /// Years of daily statistics before `today`; earlier days report zero.
    pub content_years: u32,
    /// Numbered organizations served besides the two fixed ones (fleets).
    pub organizations: u32,
    /// Applications of each numbered organization.
    pub org_applications: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Campaign {
    pub id: i64,
    pub org: u32,
    pub name: String,
    pub commission_pct: i64,
}

/// An affiliate sale with every field the service keeps.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StoredSale {
    pub org: u32,
    pub id: i64,
    pub external_id: String,
    /// `website`, `ios` and `android` sales are updatable; `shopify` ones are not.
    pub platform: String,
    pub status: SaleStatus,
    pub occurred_at: DateTime<Utc>,
    pub due_at: Option<DateTime<Utc>>,
    pub total: i64,
    pub subtotal: i64,
    pub commission: i64,
    pub currency: Currency,
    pub sub_id: Option<String>,
    pub customer_email: Option<String>,
    pub customer_name: Option<String>,
    pub commission_pct: i64,
}

impl StoredSale {
    pub fn updatable(&self) -> bool {
        matches!(self.platform.as_str(), "website" | "ios" | "android")
    }

    pub fn to_model(&self) -> Sale {
        Sale {
            id: self.id,
            external_id: Some(self.external_id.clone()),
            platform: Some(self.platform.clone()),
            status: self.status.clone(),
            occurred_at: Some(self.occurred_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            total: Some(self.total),
            commission: Some(self.commission),
            currency: Some(self.currency.clone()),
            sub_id: self.sub_id.clone(),
        }
    }
}

/// The payout categories the mark rules distinguish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutKind {
    /// `due`, credits only: markable (24 of them).
    DueCredit,
    /// `pending_completing_requirements`, credits only: markable (4).
    PendingRequirementsCredit,
    /// Already `paid_externally` (4): a mark is a no-op for clients.
    PaidExternally,
    /// `due` with no credit, cash only (2): refused.
    ZeroCredit,
    /// `due` with cash and credit (2): refused.
    Mixed,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StoredPayout {
    pub org: u32,
    pub id: i64,
    pub uuid: String,
    pub kind: PayoutKind,
    /// Snake case: `due`, `pending_completing_requirements`, `paid_externally`.
    pub status: String,
    pub creator_id: i64,
    pub creator_name: String,
    pub campaign_name: String,
    pub deal_date: NaiveDate,
    pub since_date: NaiveDate,
    pub total_credit_amount: f64,
    pub total_cash_amount: f64,
}

impl StoredPayout {
    pub fn human_status(&self) -> String {
        let mut s = self.status.replace('_', " ");
        if let Some(first) = s.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        s
    }

    pub fn to_model(&self) -> CreatorPayout {
        CreatorPayout {
            id: Some(self.id),
            uuid: self.uuid.clone(),
            creator_name: Some(self.creator_name.clone()),
            creator_id: Some(self.creator_id),
            amount: Some(format!("${:.2}", self.total_cash_amount)),
            deal_date: Some(self.deal_date.format("%Y-%m-%d").to_string()),
            since_date: Some(self.since_date.format("%m/%d/%Y").to_string()),
            campaign_name: Some(self.campaign_name.clone()),
            status: self.human_status(),
            credits_enabled: Some(self.total_credit_amount > 0.0),
            credit_name: Some("Glow Points".into()),
            total_credit_amount: Some(self.total_credit_amount),
            // Not in the documented response, so the emulator does not send it either.
            total_cash_amount: None,
        }
    }
}

/// Daily views and likes: a weekly pattern on a slow trend, with seeded noise and rare zero days.
#[derive(Clone, Debug)]
pub struct ContentModel {
    pub seed: u64,
    /// First day with statistics; earlier days report zero.
    pub start: NaiveDate,
    /// Last day with statistics; later days are not reported.
    pub today: NaiveDate,
}

impl ContentModel {
    /// `(views, likes)` of an organization on a day.
    pub fn day(&self, org: u32, date: NaiveDate) -> (i64, i64) {
        if date < self.start || date > self.today {
            return (0, 0);
        }
        let d = date.num_days_from_ce() as u64;
        let h = mix(self.seed ^ mix(u64::from(org) << 40 ^ d));
        if h.is_multiple_of(97) {
            return (0, 0); // an outage day: exercises `last = 0`
        }
        let base = if org == MAIN_ORG { 40_000.0 } else { 7_000.0 };
        const WEEKLY: [f64; 7] = [0.9, 0.95, 1.0, 1.0, 1.1, 1.3, 1.25];
        let weekly = WEEKLY[date.weekday().num_days_from_monday() as usize];
        let trend = 1.0 + (date - self.start).num_days() as f64 / 3650.0;
        let noise = 0.75 + 0.5 * unit(h);
        let views = (base * weekly * trend * noise) as i64;
        let likes = (views as f64 * (0.04 + 0.04 * unit(mix(h)))) as i64;
        (views, likes)
    }
}

/// Everything the emulator serves.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub campaigns: Vec<Campaign>,
    /// `(org, application)` in ascending id (and `applied_at`) order.
    pub applications: Vec<(u32, Application)>,
    pub sales: Vec<StoredSale>,
    pub payouts: Vec<StoredPayout>,
    pub content: ContentModel,
    pub next_application_id: i64,
    pub next_account_id: i64,
}

/// SplitMix64 finaliser: a stable, well-mixed hash of a 64-bit value.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn campaigns() -> Vec<Campaign> {
    let names = [
        (11, MAIN_ORG, "Glow Serum Launch"),
        (12, MAIN_ORG, "Summer SPF Challenge"),
        (13, MAIN_ORG, "Night Routine Reviews"),
        (14, MAIN_ORG, "Lumi Kids: Back to School"),
        (15, MAIN_ORG, "Lumi Kids: Bath Time"),
        (16, MAIN_ORG, "Nordic Men: Beard Care"),
        (17, MAIN_ORG, "Nordic Men: Gym Bag"),
        (18, MAIN_ORG, "Holiday Gift Sets"),
        (91, OTHER_ORG, "Rival Co: Sneaker Drop"),
        (92, OTHER_ORG, "Rival Co: Trail Running"),
        (93, OTHER_ORG, "Rival Co: Yoga Week"),
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, (id, org, name))| Campaign {
            id: *id,
            org: *org,
            name: (*name).to_owned(),
            commission_pct: COMMISSION_PCT[i % COMMISSION_PCT.len()],
        })
        .collect()
}

/// A status for an application of this age: recent ones are mostly pending.
pub(crate) fn status_for_age(rng: &mut fastrand::Rng, age_days: i64) -> ApplicationStatus {
    use ApplicationStatus::*;
    let table: [(ApplicationStatus, u32); 6] = if age_days < 14 {
        [(Pending, 70), (Accepted, 15), (Rejected, 8), (PendingContract, 4), (PendingPayment, 2), (Canceled, 1)]
    } else {
        [(Pending, 10), (Accepted, 42), (Rejected, 30), (Canceled, 8), (PendingContract, 5), (PendingPayment, 5)]
    };
    let mut roll = rng.u32(0..100);
    for (s, w) in table {
        if roll < w {
            return s;
        }
        roll -= w;
    }
    Accepted
}

/// Builds one application (and its accounts) for an organization. Shared by the generator and
/// drift, which add applications the same way.
#[allow(clippy::too_many_arguments)] // plain data in, one record out; a builder would add nothing
pub(crate) fn make_application(
    rng: &mut fastrand::Rng,
    id: i64,
    org: u32,
    campaigns: &[Campaign],
    applied_at: DateTime<Utc>,
    status: ApplicationStatus,
    user_pool: u64,
    next_account_id: &mut i64,
) -> Application {
    let own: Vec<&Campaign> = campaigns.iter().filter(|c| c.org == org).collect();
    let campaign = own[rng.usize(0..own.len())];
    let first = FIRST[rng.usize(0..FIRST.len())];
    let last = LAST[rng.usize(0..LAST.len())];
    let user_id = 200_000 + rng.u64(0..user_pool.max(1)) as i64 + if org == OTHER_ORG { 5_000_000 } else { 0 };
    let source = match rng.u32(0..100) {
        0..=39 => SignupSource::BrandApi,
        40..=64 => SignupSource::Whitelabel,
        _ => SignupSource::Marketplace,
    };
    let (creator_name, email) = if source == SignupSource::Marketplace {
        (first.to_owned(), None)
    } else {
        let handle = format!("{}.{}", first, last).to_lowercase().replace(['\'', ' '], "");
        (format!("{first} {last}"), Some(format!("{handle}{user_id}@example.com")))
    };
    let n_accounts = match rng.u32(0..100) {
        0..=14 => 0,
        15..=59 => 1,
        60..=87 => 2,
        _ => 3,
    };
    let connected_accounts = (0..n_accounts)
        .map(|k| {
            let id = *next_account_id;
            *next_account_id += 1;
            let monthly_post_count = match rng.u32(0..100) {
                0..=14 => 0,
                15..=39 => rng.i64(1..5),
                40..=64 => rng.i64(5..13),
                65..=84 => rng.i64(13..31),
                _ => rng.i64(31..121),
            };
            let username = (rng.u32(0..10) != 0).then(|| format!("{}_{}{}", first.to_lowercase(), user_id % 1000, k));
            ConnectedAccount { id, provider: Provider::TikTok, username, monthly_post_count }
        })
        .collect();
    Application {
        id,
        status,
        campaign_id: campaign.id,
        campaign_name: campaign.name.clone(),
        user_id,
        creator_name,
        email,
        signup_source: source,
        connected_accounts,
        applied_at,
    }
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// Builds the whole dataset.
pub fn generate(cfg: &GenConfig) -> Dataset {
    let campaigns = campaigns();
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let now = midnight(cfg.today) + ChronoDuration::hours(12);
    let span_start = now - ChronoDuration::days(3 * 365);
    let span_secs = (now - span_start).num_seconds().max(1);
    let expected_total = (cfg.applications + cfg.applications / 20 + 1) as i64;
    let step = (span_secs / expected_total).max(1);
    let user_pool = (cfg.applications as u64 / 2).max(10);

    let mut applications = Vec::with_capacity(expected_total as usize);
    let mut next_account_id = 900_001;
    let mut main_count = 0;
    let mut t = span_start;
    let mut id = 100_001;
    while main_count < cfg.applications {
        let org = if rng.u32(0..21) == 0 { OTHER_ORG } else { MAIN_ORG };
        t += ChronoDuration::seconds(rng.i64(1..=2 * step));
        let age = (now - t).num_days();
        let status = status_for_age(&mut rng, age);
        let app = make_application(&mut rng, id, org, &campaigns, t, status, user_pool, &mut next_account_id);
        applications.push((org, app));
        id += 1;
        if org == MAIN_ORG {
            main_count += 1;
        }
    }

    let sales = generate_sales(&mut rng, cfg, &campaigns);
    let payouts = generate_payouts(&mut rng, cfg, &campaigns);
    let mut campaigns = campaigns;
    for k in 1..=cfg.organizations {
        let org = numbered_org(k);
        let own: Vec<Campaign> = (1..=2)
            .map(|j| Campaign {
                id: 1_000_000 + 10 * i64::from(k) + j,
                org,
                name: format!("Organization {k}: campaign {j}"),
                commission_pct: COMMISSION_PCT[j as usize % COMMISSION_PCT.len()],
            })
            .collect();
        let mut rng = fastrand::Rng::with_seed(mix(cfg.seed ^ (u64::from(org) << 32)));
        let n = cfg.org_applications as i64;
        let step = (span_secs / (n + 1)).max(1);
        let mut t = span_start;
        for _ in 0..n {
            t += ChronoDuration::seconds(rng.i64(1..=2 * step));
            let status = status_for_age(&mut rng, (now - t).num_days());
            let pool = (cfg.org_applications as u64 / 2).max(10);
            applications.push((org, make_application(&mut rng, id, org, &own, t, status, pool, &mut next_account_id)));
            id += 1;
        }
        campaigns.extend(own);
    }
    let content = ContentModel {
        seed: cfg.seed,
        start: cfg.today - ChronoDuration::days(i64::from(cfg.content_years) * 365),
        today: cfg.today,
    };
    Dataset { campaigns, applications, sales, payouts, content, next_application_id: id, next_account_id }
}

fn generate_sales(rng: &mut fastrand::Rng, cfg: &GenConfig, campaigns: &[Campaign]) -> Vec<StoredSale> {
    let mut sales = vec![];
    let mut push = |rng: &mut fastrand::Rng, org: u32, id: i64, platform: &str, status: SaleStatus| {
        let own: Vec<&Campaign> = campaigns.iter().filter(|c| c.org == org).collect();
        let campaign = own[rng.usize(0..own.len())];
        let total = rng.i64(1_000..50_000);
        let occurred_at = midnight(cfg.today) - ChronoDuration::minutes(rng.i64(60..60 * 24 * 90));
        let first = FIRST[rng.usize(0..FIRST.len())];
        sales.push(StoredSale {
            org,
            id,
            external_id: format!("ord-{id}"),
            platform: platform.to_owned(),
            status,
            occurred_at,
            due_at: Some(occurred_at + ChronoDuration::days(30)),
            total,
            subtotal: total * 9 / 10,
            commission: total * campaign.commission_pct / 100,
            currency: Currency::KNOWN[rng.usize(0..3)].clone(),
            sub_id: (rng.bool()).then(|| "tiktok".to_owned()),
            customer_email: Some(format!("{}{id}@shopper.example", first.to_lowercase())),
            customer_name: Some(first.to_owned()),
            commission_pct: campaign.commission_pct,
        });
    };
    let platforms = ["website", "ios", "android"];
    for i in 0..cfg.sales {
        let status = if i % 2 == 0 { SaleStatus::Unpaid } else { SaleStatus::Paid };
        push(rng, MAIN_ORG, 7001 + i as i64, platforms[i % 3], status);
    }
    for i in 0..4 {
        push(rng, MAIN_ORG, 6001 + i, "shopify", SaleStatus::Unpaid);
        push(rng, MAIN_ORG, 6011 + i, "website", SaleStatus::Cancelled);
        push(rng, OTHER_ORG, 6901 + i, "website", SaleStatus::Unpaid);
    }
    sales.sort_by_key(|s| s.id);
    sales
}

fn generate_payouts(rng: &mut fastrand::Rng, cfg: &GenConfig, campaigns: &[Campaign]) -> Vec<StoredPayout> {
    use PayoutKind::*;
    let layout: Vec<(u32, PayoutKind)> = std::iter::repeat_n((MAIN_ORG, DueCredit), 24)
        .chain(std::iter::repeat_n((MAIN_ORG, PendingRequirementsCredit), 4))
        .chain(std::iter::repeat_n((MAIN_ORG, PaidExternally), 4))
        .chain(std::iter::repeat_n((MAIN_ORG, ZeroCredit), 2))
        .chain(std::iter::repeat_n((MAIN_ORG, Mixed), 2))
        .chain(std::iter::repeat_n((OTHER_ORG, DueCredit), 3))
        .collect();
    layout
        .into_iter()
        .enumerate()
        .map(|(i, (org, kind))| {
            let own: Vec<&Campaign> = campaigns.iter().filter(|c| c.org == org).collect();
            let campaign = own[i % own.len()];
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&mix(cfg.seed ^ (i as u64) << 1).to_le_bytes());
            bytes[8..].copy_from_slice(&mix(cfg.seed.rotate_left(17) ^ i as u64).to_le_bytes());
            let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid().to_string();
            let credit = (rng.u32(10..200) * 10) as f64;
            let (status, credit, cash) = match kind {
                DueCredit => ("due", credit, 0.0),
                PendingRequirementsCredit => ("pending_completing_requirements", credit, 0.0),
                PaidExternally => ("paid_externally", credit, 0.0),
                ZeroCredit => ("due", 0.0, 150.0),
                Mixed => ("due", credit, 75.0),
            };
            let deal_date = cfg.today - ChronoDuration::days(1 + (i as i64 * 2) % 80);
            StoredPayout {
                org,
                id: 3001 + i as i64,
                uuid,
                kind,
                status: status.to_owned(),
                creator_id: 200_000 + rng.i64(0..5_000),
                creator_name: FIRST[i % FIRST.len()].to_owned(),
                campaign_name: campaign.name.clone(),
                deal_date,
                since_date: deal_date - ChronoDuration::days(30),
                total_credit_amount: credit,
                total_cash_amount: cash,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n: usize) -> GenConfig {
        GenConfig {
            seed: 7,
            applications: n,
            sales: 16,
            today: NaiveDate::from_ymd_opt(2026, 3, 1).unwrap(),
            content_years: 3,
            organizations: 0,
            org_applications: 0,
        }
    }

    #[test]
    fn same_seed_same_data() {
        let a = generate(&cfg(300));
        let b = generate(&cfg(300));
        assert_eq!(a.applications, b.applications);
        assert_eq!(a.payouts, b.payouts);
        assert_eq!(a.applications.iter().filter(|(o, _)| *o == MAIN_ORG).count(), 300);
    }

    #[test]
    fn every_status_and_source_occurs() {
        let d = generate(&cfg(2000));
        for s in ApplicationStatus::KNOWN {
            assert!(d.applications.iter().any(|(_, a)| &a.status == s), "{s}");
        }
        let market: Vec<_> =
            d.applications.iter().filter(|(_, a)| a.signup_source == SignupSource::Marketplace).collect();
        assert!(!market.is_empty());
        assert!(market.iter().all(|(_, a)| a.email.is_none() && !a.creator_name.contains(' ')));
        assert!(d.applications.windows(2).all(|w| w[0].1.applied_at <= w[1].1.applied_at));
        assert!(d.applications.iter().any(|(o, _)| *o == OTHER_ORG));
    }

    #[test]
    fn content_is_zero_before_start() {
        let d = generate(&cfg(10));
        let before = d.content.start - ChronoDuration::days(1);
        assert_eq!(d.content.day(MAIN_ORG, before), (0, 0));
        let (v, l) = d.content.day(MAIN_ORG, d.content.today);
        assert!(v > 0 && l > 0 && l < v);
    }
}
