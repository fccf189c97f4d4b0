//! The declarations: every table and view of the warehouse, its columns with their types and
//! meanings, its key, and where it goes. The rest of the catalog ([`super`]) makes everything
//! else from these.

use super::{null, req, Column, FleetKey, Role, Table, Type, View};

pub(super) const APPLICATIONS: Table = Table {
    name: "applications",
    about: "One row per application, as last observed.",
    columns: &[
        req("id", Type::BigInt, "application id (the service's, also the `invitation_id`)"),
        req(
            "status",
            Type::Varchar,
            "`pending`, `accepted`, `rejected`, `canceled`, `pending_contract`, `pending_payment` (a new value is kept as the service sends it)",
        ),
        req("campaign_id", Type::BigInt, "campaign applied to"),
        null("campaign_name", Type::Varchar, "campaign name"),
        req("user_id", Type::BigInt, "the creator's user id"),
        null("creator_name", Type::Varchar, "creator's name; first name only for marketplace applicants"),
        null("email", Type::Varchar, "creator's email; NULL for marketplace applicants"),
        null("signup_source", Type::Varchar, "`brand_api`, `whitelabel` or `marketplace`"),
        req("applied_at", Type::TimestampTz, "when the creator applied"),
        req("account_count", Type::BigInt, "connected accounts listed with the application"),
        req("total_monthly_posts", Type::BigInt, "sum of `monthly_post_count` over those accounts"),
        req("first_seen_at", Type::TimestampTz, "first time creator-etl saw the application"),
        req("last_seen_at", Type::TimestampTz, "time of the observation this row holds"),
    ],
    key: &["id"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: false,
};

const CONNECTED_ACCOUNTS: Table = Table {
    name: "connected_accounts",
    about: "The accounts listed with each application.",
    columns: &[
        req("application_id", Type::BigInt, "the application (`applications.id`)"),
        req("account_id", Type::BigInt, "connected account id"),
        null("provider", Type::Varchar, "`tik_tok`"),
        null("username", Type::Varchar, "the account's handle; NULL when the service has none"),
        req("monthly_post_count", Type::BigInt, "posts on the account in the last 30 days"),
    ],
    key: &["application_id", "account_id"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: false,
};

const CONTENT_DAILY: Table = Table {
    name: "content_daily",
    about: "Daily statistics, one row per metric and day, kept across runs.",
    columns: &[
        req("metric", Type::Varchar, "`views` or `likes`"),
        req("date", Type::Date, "the day (UTC)"),
        req("last_date", Type::Date, "the comparison day, `date` − 7 days"),
        req("current", Type::BigInt, "views or likes on `date`"),
        req("last", Type::BigInt, "the same on `last_date`, as the API reported it"),
    ],
    key: &["metric", "date"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: true,
};

const WOW_DELTAS: Table = Table {
    name: "wow_deltas",
    about: "Week-over-week change per metric and day.",
    columns: &[
        req("metric", Type::Varchar, "`views` or `likes`"),
        req("date", Type::Date, "the day"),
        req("current", Type::BigInt, "as in `content_daily`"),
        req("last", Type::BigInt, "as in `content_daily`"),
        req("delta", Type::BigInt, "`current − last`"),
        null("pct_change", Type::Double, "`delta / last`; NULL when `last` is 0"),
        null("current_7d", Type::BigInt, "sum of `current` over `date − 6 … date`; NULL unless all 7 days are loaded"),
        null(
            "last_7d",
            Type::BigInt,
            "sum of `current` over `date − 13 … date − 7`; NULL unless all 7 days are loaded",
        ),
        null("delta_7d", Type::BigInt, "`current_7d − last_7d`"),
        null("pct_change_7d", Type::Double, "`delta_7d / last_7d`; NULL when either is NULL or `last_7d` is 0"),
    ],
    key: &["metric", "date"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: true,
};

const WEEKLY_TOTALS: Table = Table {
    name: "weekly_totals",
    about: "Totals per metric and ISO week (weeks start on Monday).",
    columns: &[
        req("metric", Type::Varchar, "`views` or `likes`"),
        req("week_start", Type::Date, "the week's Monday"),
        req("total", Type::BigInt, "sum of `current` over the loaded days of the week"),
        null("previous_total", Type::BigInt, "the previous week's `total`; NULL when not loaded"),
        null("delta", Type::BigInt, "`total − previous_total`"),
        null("pct_change", Type::Double, "`delta / previous_total`; NULL when that is 0 or NULL"),
        req("complete", Type::Boolean, "all seven days of the week are loaded"),
    ],
    key: &["metric", "week_start"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: false,
};

const POST_COUNT_COHORTS: Table = Table {
    name: "post_count_cohorts",
    about: "Applications by month applied, post-count bucket and status.",
    columns: &[
        req("applied_month", Type::Date, "first day of the month of `applied_at` (UTC)"),
        req(
            "bucket",
            Type::Varchar,
            "`no_accounts`, or the range of `total_monthly_posts` the application falls in (`0`, `1-4`, `5-12`, `13-30`, `31+` by default; see `--cohort-edges`)",
        ),
        null("bucket_min", Type::BigInt, "the bucket's lowest post count; NULL for `no_accounts`"),
        null("bucket_max", Type::BigInt, "the bucket's highest post count; NULL for `no_accounts` and the top bucket"),
        req("status", Type::Varchar, "application status"),
        req("applications", Type::BigInt, "applications in the cell"),
        req("creators", Type::BigInt, "distinct `user_id`s in the cell"),
        req("accounts", Type::BigInt, "connected accounts of those applications"),
        req("total_monthly_posts", Type::BigInt, "their summed monthly posts"),
    ],
    key: &["applied_month", "bucket", "status"],
    role: Role::Frame,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: false,
};

const APPLICATION_STATUS_HISTORY: Table = Table {
    name: "application_status_history",
    about: "Every status each application has had (SCD type 2), kept across runs.",
    columns: &[
        req("id", Type::BigInt, "the application"),
        req("status", Type::Varchar, "its status during the interval"),
        req("valid_from", Type::TimestampTz, "when creator-etl first saw this status"),
        null("valid_to", Type::TimestampTz, "when a later run saw another status; NULL while current"),
    ],
    key: &["id", "valid_from"],
    role: Role::History,
    fleet: Some(FleetKey::Checked),
    exported: true,
    lake: true,
    by_year: false,
};

const ACTION_RESULTS: Table = Table {
    name: "action_results",
    about: "Every row of every applied reviewed file, whatever its outcome.",
    columns: &[
        req("run_id", Type::Varchar, "the actions run"),
        req("file", Type::Varchar, "the reviewed CSV's path as given"),
        req("line", Type::BigInt, "the row's line"),
        null("row_id", Type::Varchar, "the row's `row_id` cell"),
        req("action", Type::Varchar, "`update_sale` or `mark_payout`"),
        req("target", Type::Varchar, "`sale <id>` or `payout <uuid>`"),
        req("approved", Type::Boolean, "the row was approved"),
        req("outcome", Type::Varchar, "see the outcomes table of the manual's Exactly-once actions"),
        null("http_status", Type::Integer, "the service's status, when it answered"),
        null("message", Type::Varchar, "the service's message, or why the row was skipped"),
        req("fingerprint", Type::Varchar, "as in `action_journal`"),
        null("reviewer", Type::Varchar, "the row's `reviewer` cell"),
        req("finished_at", Type::TimestampTz, "when the run finished"),
    ],
    key: &["run_id", "line"],
    role: Role::Results,
    fleet: Some(FleetKey::Declared),
    exported: false,
    lake: true,
    by_year: false,
};

pub(super) const RUNS: Table = Table {
    name: "runs",
    about: "The ledger: one row per loaded run.",
    columns: &[
        req("run_id", Type::Varchar, "the run (also its raw directory and report name)"),
        null("started_at", Type::TimestampTz, "when its extract started"),
        null("finished_at", Type::TimestampTz, "when its load's transaction ran"),
        req("status", Type::Varchar, "the extract's status (`completed`), or `loaded` for a run loaded without its report"),
        null("extract_ms", Type::BigInt, "extract duration"),
        null("transform_ms", Type::BigInt, "transform duration"),
        null("load_ms", Type::BigInt, "the load's own time before its transaction: opening the warehouse (a fleet member: its views) and reading the previous state, and in one organization's warehouse staging the frames"),
        null("requests", Type::BigInt, "API requests of the run"),
        null("retries", Type::BigInt, "retried attempts"),
        null("rate_limited", Type::BigInt, "429 answers"),
        null("pacing_wait_ms", Type::BigInt, "time spent waiting for the pacer"),
        null("rows_json", Type::Varchar, "rows per table after the load, JSON"),
        null("warnings_json", Type::Varchar, "drift and data-quality warnings, JSON array"),
        null("status_changes", Type::BigInt, "applications whose status changed since the previous load"),
        Column { default: Some("false"), ..req("parquet_exported", Type::Boolean, "the Parquet export finished") },
        null("report_json", Type::Varchar, "the extract's full run report, JSON"),
        null("warnings", Type::BigInt, "how many warnings `warnings_json` holds"),
        null(
            "sync_mode",
            Type::Varchar,
            "`quick` or `full` (a reconcile); runs loaded before schema version 4 are `full`",
        ),
        null(
            "sync_scope",
            Type::Varchar,
            "the statuses and campaign the run covered, e.g. `statuses=accepted,…;campaign=all`: a quick sync compares only with a warehouse whose last run had its scope",
        ),
        null("pages_verified", Type::BigInt, "pages of applications the run read"),
        null(
            "last_reconcile_at",
            Type::TimestampTz,
            "the full sync this run's data rests on: its own finish for a full sync, the last full sync's for a quick one",
        ),
        null("counts_agree", Type::Boolean, "every status's rows add up to the service's `row_count`"),
    ],
    key: &["run_id"],
    role: Role::Ledger,
    fleet: Some(FleetKey::Declared),
    exported: false,
    lake: true,
    by_year: false,
};

pub(super) const ACTION_JOURNAL: Table = Table {
    name: "action_journal",
    about: "One row per action sent, per run: the exactly-once record (see the manual's Exactly-once actions). With `--lake`, it is also the lake's `action_journal`.",
    columns: &[
        req("fingerprint", Type::Varchar, "the action, target and normalised body, e.g. `update_sale sale=7001 {\"total\":1250}`"),
        req("run_id", Type::Varchar, "the actions run"),
        req("file", Type::Varchar, "the reviewed CSV's path as given"),
        req("line", Type::BigInt, "the row's line in it"),
        null("row_id", Type::Varchar, "the row's `row_id` cell, if any"),
        req("action", Type::Varchar, "`update_sale` or `mark_payout`"),
        req("target", Type::Varchar, "`sale <id>` or `payout <uuid>`"),
        req("body_json", Type::Varchar, "the JSON body sent"),
        req(
            "outcome",
            Type::Varchar,
            "`pending` (intent recorded, no answer yet), `applied`, `noop`, `failed`, `failed_transient`, `in_doubt`, `superseded` (an intent or doubt a later run resolved; `message` names it)",
        ),
        null("http_status", Type::Integer, "the service's status, when it answered"),
        null("message", Type::Varchar, "the service's message"),
        null("response_excerpt", Type::Varchar, "the first 300 characters of its answer"),
        req("intent_at", Type::TimestampTz, "when the intent was recorded, just before sending"),
        null("outcome_at", Type::TimestampTz, "when the outcome was recorded"),
        null("service", Type::Varchar, "the base URL the row was sent to (NULL: before schema version 3)"),
        null("key_fingerprint", Type::Varchar, "the key's fingerprint, `key-xxxxxxxx` (never the key)"),
    ],
    key: &["fingerprint", "run_id"],
    role: Role::Journal,
    fleet: None,
    exported: false,
    lake: true,
    by_year: false,
};

pub(super) const FRAME_FINGERPRINTS: Table = Table {
    name: "frame_fingerprints",
    about: "A fingerprint of each organization's rows of each table rebuilt from the transform, as its last load wrote them: a batch rewrites an organization's table, and the next publish exports it, only when its fingerprint changed (`applications` is written at every load, and has none). The writer's own record; readers have no use for it.",
    columns: &[
        req("table_name", Type::Varchar, "a table rebuilt from the transform's frame"),
        req(
            "fingerprint",
            Type::Varchar,
            "xxh3-128 of the transform's frame (its columns' names, types and values in order, with the fingerprints' format and the schema version), 32 hexadecimal digits",
        ),
    ],
    key: &["table_name"],
    role: Role::Fingerprints,
    fleet: Some(FleetKey::Declared),
    exported: false,
    lake: false,
    by_year: false,
};

pub(super) const SCHEMA_VERSION: Table = Table {
    name: "schema_version",
    about: "The schema versions applied to the warehouse (a fleet warehouse's is `fleet_schema_version`).",
    columns: &[
        req("version", Type::Integer, "a schema version applied to this warehouse"),
        req("applied_at", Type::TimestampTz, "when it was applied"),
    ],
    key: &[],
    role: Role::Version,
    fleet: None,
    exported: false,
    lake: false,
    by_year: false,
};

/// Every table, in the order the Parquet tree and the lake list them (`runs`, the completion
/// marker of a sync in the lake, after the tables it completes).
pub const TABLES: [&Table; 12] = [
    &APPLICATIONS,
    &CONNECTED_ACCOUNTS,
    &CONTENT_DAILY,
    &WOW_DELTAS,
    &WEEKLY_TOTALS,
    &POST_COUNT_COHORTS,
    &APPLICATION_STATUS_HISTORY,
    &ACTION_RESULTS,
    &RUNS,
    &ACTION_JOURNAL,
    &FRAME_FINGERPRINTS,
    &SCHEMA_VERSION,
];

/// The views, as [`super::views_sql`] makes them.
pub const VIEWS: [View; 1] = [View {
    name: "cohort_acceptance",
    about: "The acceptance rate per post-count bucket, over every month (`queries/cohort_acceptance.sql` reads it).",
    columns: &[
        null("bucket", Type::Varchar, "as in `post_count_cohorts`"),
        null("bucket_min", Type::BigInt, "as in `post_count_cohorts`"),
        null("bucket_max", Type::BigInt, "as in `post_count_cohorts`"),
        null("applications", Type::BigInt, "applications in the bucket"),
        null("creators", Type::BigInt, "creators in the bucket, summed over its cells"),
        null("accepted", Type::BigInt, "accepted applications"),
        null("rejected", Type::BigInt, "rejected applications"),
        null("pending", Type::BigInt, "pending applications"),
        null("acceptance_rate", Type::Double, "accepted / (accepted + rejected); NULL when both are 0"),
    ],
}];
