//! Transform on hand-computed frames.

use chrono::{Duration, TimeZone, Utc};

use super::*;
use crate::api::models::*;
use crate::extract::Metric;

fn d(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

fn views(from: &str, currents: &[i64], lasts: &[i64]) -> Vec<ContentRow> {
    currents
        .iter()
        .zip(lasts)
        .enumerate()
        .map(|(i, (c, l))| {
            let date = d(from) + Duration::days(i as i64);
            ContentRow {
                metric: Metric::Views,
                date,
                last_date: date - Duration::days(7),
                current: *c,
                last: *l,
                total: 0,
                last_total: 0,
            }
        })
        .collect()
}

fn i64_at(df: &DataFrame, name: &str, i: usize) -> Option<i64> {
    df.column(name).unwrap().i64().unwrap().get(i)
}

fn f64_at(df: &DataFrame, name: &str, i: usize) -> Option<f64> {
    df.column(name).unwrap().f64().unwrap().get(i)
}

fn day_at(df: &DataFrame, name: &str, i: usize) -> NaiveDate {
    let n = df.column(name).unwrap().cast(&DataType::Int32).unwrap().i32().unwrap().get(i).unwrap();
    EPOCH + Duration::days(i64::from(n))
}

fn app(id: i64, status: ApplicationStatus, applied: &str, user: i64, posts: &[i64], marketplace: bool) -> Observation {
    let applied_at = Utc.from_utc_datetime(&d(applied).and_hms_opt(10, 0, 0).unwrap());
    Observation {
        seq: id as u64,
        observed_at: applied_at,
        first_pass: 1,
        app: Application {
            id,
            status,
            campaign_id: 11,
            campaign_name: "C".into(),
            user_id: user,
            creator_name: if marketplace { "Ann".into() } else { "Ann Lee".into() },
            email: (!marketplace).then(|| "ann@example.com".into()),
            signup_source: if marketplace { SignupSource::Marketplace } else { SignupSource::BrandApi },
            connected_accounts: posts
                .iter()
                .enumerate()
                .map(|(k, p)| ConnectedAccount {
                    id: id * 10 + k as i64,
                    provider: Provider::TikTok,
                    username: (k > 0).then(|| format!("u{k}")),
                    monthly_post_count: *p,
                })
                .collect(),
            applied_at,
        },
    }
}

#[test]
fn buckets_follow_the_edges() {
    let b = buckets(&DEFAULT_COHORT_EDGES).unwrap();
    let labels: Vec<&str> = b.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["no_accounts", "0", "1-4", "5-12", "13-30", "31+"]);
    let of = |accounts, posts| bucket_of(&b, accounts, posts).label.as_str();
    assert_eq!(of(0, 0), "no_accounts");
    assert_eq!(of(1, 0), "0");
    assert_eq!(of(1, 1), "1-4");
    assert_eq!(of(2, 4), "1-4");
    assert_eq!(of(1, 5), "5-12");
    assert_eq!(of(1, 12), "5-12");
    assert_eq!(of(1, 13), "13-30");
    assert_eq!(of(3, 30), "13-30");
    assert_eq!(of(1, 31), "31+");
    assert_eq!(b[5].max, None);
    assert_eq!((b[2].min, b[2].max), (Some(1), Some(4)));
    assert!(buckets(&[5, 5]).is_err());
    assert!(buckets(&[0, 3]).is_err());
    assert!(buckets(&[]).is_err());
    let custom: Vec<String> = buckets(&[2, 10]).unwrap().into_iter().map(|b| b.label).collect();
    assert_eq!(custom, ["no_accounts", "0-1", "2-9", "10+"]);
}

/// 16 days across a year end: the 7-day view appears on day 7, the week before on day 14, and a
/// zero `last` gives a NULL rate.
#[test]
fn wow_deltas_and_seven_day_sums() {
    let currents: Vec<i64> = (1..=16).collect();
    let mut lasts = vec![10; 16];
    lasts[2] = 0;
    let f = run(&[], &views("2024-12-25", &currents, &lasts), &DEFAULT_COHORT_EDGES).unwrap();
    let w = &f.wow_deltas;
    assert_eq!(w.height(), 16);
    assert_eq!(day_at(w, "date", 0), d("2024-12-25"));
    assert_eq!(i64_at(w, "delta", 0), Some(1 - 10));
    assert_eq!(f64_at(w, "pct_change", 0), Some(-0.9));
    assert_eq!(i64_at(w, "delta", 2), Some(3));
    assert_eq!(f64_at(w, "pct_change", 2), None, "last = 0 gives NULL, not infinity");
    for i in 0..6 {
        assert_eq!(i64_at(w, "current_7d", i), None, "day {i} lacks a full week");
    }
    assert_eq!(i64_at(w, "current_7d", 6), Some((1..=7).sum()));
    assert_eq!(i64_at(w, "current_7d", 15), Some((10..=16).sum()));
    for i in 0..13 {
        assert_eq!(i64_at(w, "last_7d", i), None, "day {i} lacks the week before");
    }
    assert_eq!(i64_at(w, "last_7d", 13), Some((1..=7).sum()));
    assert_eq!(i64_at(w, "current_7d", 13), Some((8..=14).sum()));
    assert_eq!(i64_at(w, "delta_7d", 13), Some(49));
    assert_eq!(f64_at(w, "pct_change_7d", 13), Some(49.0 / 28.0));
}

#[test]
fn a_missing_day_blanks_only_the_windows_that_need_it() {
    let mut rows = views("2025-03-01", &[5; 20], &[5; 20]);
    rows.remove(9); // 2025-03-10 is missing
    let f = run(&[], &rows, &DEFAULT_COHORT_EDGES).unwrap();
    let w = &f.wow_deltas;
    assert_eq!(w.height(), 19);
    // Rows 9.. are shifted by one: row 9 is 2025-03-11.
    assert_eq!(day_at(w, "date", 9), d("2025-03-11"));
    assert_eq!(i64_at(w, "current_7d", 8), Some(35), "2025-03-09 does not need 03-10");
    for i in 9..15 {
        assert_eq!(i64_at(w, "current_7d", i), None, "{} needs 03-10", day_at(w, "date", i));
    }
    assert_eq!(i64_at(w, "current_7d", 15), Some(35), "2025-03-17 starts after the gap");
    assert_eq!(i64_at(w, "last_7d", 15), None, "…but its week before contains the gap");
}

/// ISO weeks start on Monday; 2024-12-30 is the Monday of the week that holds New Year.
#[test]
fn weekly_totals_by_monday_weeks() {
    // 2024-12-23 (Mon) .. 2025-01-08 (Wed): two full weeks and a partial one.
    let currents: Vec<i64> = vec![1; 17];
    let f = run(&[], &views("2024-12-23", &currents, &currents), &DEFAULT_COHORT_EDGES).unwrap();
    let wk = &f.weekly_totals;
    assert_eq!(wk.height(), 3);
    assert_eq!(day_at(wk, "week_start", 0), d("2024-12-23"));
    assert_eq!(day_at(wk, "week_start", 1), d("2024-12-30"));
    assert_eq!(day_at(wk, "week_start", 2), d("2025-01-06"));
    assert_eq!(i64_at(wk, "total", 1), Some(7));
    assert_eq!(i64_at(wk, "previous_total", 0), None);
    assert_eq!(i64_at(wk, "previous_total", 1), Some(7));
    assert_eq!(i64_at(wk, "total", 2), Some(3));
    assert_eq!(i64_at(wk, "delta", 2), Some(-4));
    let flags = wk.column("complete").unwrap().bool().unwrap();
    let complete: Vec<Option<bool>> = (0..3).map(|i| flags.get(i)).collect();

    assert_eq!(complete, [Some(true), Some(true), Some(false)]);
}

#[test]
fn weeks_before_1970_start_on_monday_too() {
    let f = run(&[], &views("1969-12-29", &[1; 7], &[1; 7]), &DEFAULT_COHORT_EDGES).unwrap();
    assert_eq!(f.weekly_totals.height(), 1);
    assert_eq!(day_at(&f.weekly_totals, "week_start", 0), d("1969-12-29"));
}

#[test]
fn cohorts_count_applications_creators_and_posts() {
    use ApplicationStatus::*;
    let apps = [
        app(1, Accepted, "2025-01-05", 100, &[], false),        // no_accounts
        app(2, Accepted, "2025-01-20", 100, &[0], true),        // 0, marketplace, same creator
        app(3, Rejected, "2025-01-21", 101, &[2, 2], false),    // 1-4
        app(4, Accepted, "2025-01-31", 102, &[3, 1], true),     // 1-4
        app(5, Accepted, "2025-02-01", 103, &[31], false),      // 31+, next month
        app(6, Accepted, "2025-01-02", 104, &[2, 1, 1], false), // 1-4
    ];
    let f = run(&apps, &[], &DEFAULT_COHORT_EDGES).unwrap();
    let c = &f.post_count_cohorts;
    let rows: Vec<(NaiveDate, String, String, i64, i64, i64, i64)> = (0..c.height())
        .map(|i| {
            (
                day_at(c, "applied_month", i),
                c.column("bucket").unwrap().str().unwrap().get(i).unwrap().to_owned(),
                c.column("status").unwrap().str().unwrap().get(i).unwrap().to_owned(),
                i64_at(c, "applications", i).unwrap(),
                i64_at(c, "creators", i).unwrap(),
                i64_at(c, "accounts", i).unwrap(),
                i64_at(c, "total_monthly_posts", i).unwrap(),
            )
        })
        .collect();
    let jan = d("2025-01-01");
    let s = |x: &str| x.to_owned();
    assert_eq!(
        rows,
        vec![
            (jan, s("no_accounts"), s("accepted"), 1, 1, 0, 0),
            (jan, s("0"), s("accepted"), 1, 1, 1, 0),
            (jan, s("1-4"), s("accepted"), 2, 2, 5, 8),
            (jan, s("1-4"), s("rejected"), 1, 1, 2, 4),
            (d("2025-02-01"), s("31+"), s("accepted"), 1, 1, 1, 31),
        ]
    );
    // Marketplace creators keep their null email; account rows keep null usernames.
    let a = &f.applications;
    assert_eq!(a.column("email").unwrap().null_count(), 2);
    assert_eq!(i64_at(a, "total_monthly_posts", 3), Some(4));
    assert_eq!(i64_at(a, "account_count", 0), Some(0));
    assert_eq!(f.connected_accounts.height(), 9);
    assert_eq!(f.connected_accounts.column("username").unwrap().null_count(), 5);
}

/// Regression: sums of the service's integers could overflow: a panic in debug builds, a silent
/// wrap in release (and in Polars). Values whose sums pass 64 bits are a data-quality error.
#[test]
fn sums_that_would_overflow_are_a_data_quality_error() {
    let ok = [app(1, ApplicationStatus::Pending, "2025-01-01", 1, &[3, 4], false)];
    assert!(check_sums(&ok, &views("2025-01-01", &[1, 2], &[3, 4])).is_ok());
    let posts = [
        app(1, ApplicationStatus::Pending, "2025-01-01", 1, &[i64::MAX / 2, 1], false),
        app(2, ApplicationStatus::Pending, "2025-01-01", 2, &[i64::MAX / 2 + 1], false),
    ];
    let e = check_sums(&posts, &[]).unwrap_err();
    assert!(e.contains("`monthly_post_count`"), "{e}");
    let e = check_sums(&ok, &views("2025-01-01", &[i64::MAX, 1], &[0, 0])).unwrap_err();
    assert!(e.contains("`current`"), "{e}");
    let e = check_sums(&ok, &views("2025-01-01", &[0, 0], &[i64::MIN, 1])).unwrap_err();
    assert!(e.contains("`last`"), "{e}");
    // Nothing here panics, even where the guard is bypassed.
    let huge = app(3, ApplicationStatus::Pending, "2025-01-01", 3, &[i64::MAX, 5], false);
    assert_eq!(monthly_posts(&huge.app.connected_accounts), i64::MAX);
}

#[test]
fn the_default_cohort_edges_flag_is_the_default_edges() {
    let parsed: Vec<i64> = DEFAULT_COHORT_EDGES_FLAG.split(',').map(|e| e.parse().unwrap()).collect();
    assert_eq!(parsed, DEFAULT_COHORT_EDGES);
}

/// A batch's frames are each member's frames alone: rows with the same ids, users and days in
/// two members never meet (sums, joins, distinct creators), and a member without rows gets
/// empty frames of the same schema.
#[test]
fn a_batch_gives_each_member_the_frames_it_would_get_alone() {
    let a_apps = vec![
        app(1, ApplicationStatus::Accepted, "2026-01-05", 7, &[3, 4], false),
        app(2, ApplicationStatus::Pending, "2026-02-10", 8, &[], true),
    ];
    let c_apps = vec![
        app(1, ApplicationStatus::Rejected, "2026-01-06", 7, &[40], false),
        app(3, ApplicationStatus::Accepted, "2026-01-20", 7, &[1], true),
    ];
    let a_content = views("2026-03-01", &(1..=20).collect::<Vec<_>>(), &(0..20).collect::<Vec<_>>());
    let mut c_content = views("2026-03-05", &(100..=120).collect::<Vec<_>>(), &(50..71).collect::<Vec<_>>());
    c_content.extend(a_content.iter().map(|r| ContentRow { metric: Metric::Likes, ..r.clone() }));
    let members = [
        Input { apps: &a_apps, content: &a_content },
        Input { apps: &[], content: &[] },
        Input { apps: &c_apps, content: &c_content },
    ];
    let together = run_batch(&members, &DEFAULT_COHORT_EDGES).unwrap();
    assert_eq!(together.len(), 3);
    for (member, frames) in members.iter().zip(&together) {
        let alone = run(member.apps, member.content, &DEFAULT_COHORT_EDGES).unwrap();
        for ((name, got), (_, want)) in frames.tables().into_iter().zip(alone.tables()) {
            assert_eq!(got.schema(), want.schema(), "{name}");
            assert!(got.equals_missing(want), "{name}: batch\n{got}\nalone\n{want}");
        }
    }
    assert_eq!(together[1].applications.height(), 0);
    assert_eq!(together[0].applications.schema(), together[1].applications.schema());
    assert!(together[2].content_daily.height() > 0 && together[0].wow_deltas.height() == 20);
}

/// `wow_deltas` as the transform built it before its 7-day sums slid over the days: every row
/// paired with the 14 days before it, joined and grouped. The reference the one-pass sums are
/// checked against.
fn wow_frame_by_join(content: &DataFrame) -> PolarsResult<DataFrame> {
    let cd = content.clone().lazy().with_column(col("date").cast(DataType::Int32).alias("day"));
    let offsets = DataFrame::new_infer_height(vec![Column::new("k".into(), (0i32..14).collect::<Vec<_>>())])?;
    // Each day paired with the 14 days ending on it: k = 0..6 is its week, 7..13 the week before.
    let sums = cd
        .clone()
        .select([col(MEMBER), col("metric"), col("day")])
        .cross_join(offsets.lazy(), None)
        .with_column((col("day") - col("k")).alias("src_day"))
        .join(
            cd.clone().select([
                col(MEMBER),
                col("metric"),
                col("day").alias("src_day"),
                col("current").alias("src_current"),
            ]),
            [col(MEMBER), col("metric"), col("src_day")],
            [col(MEMBER), col("metric"), col("src_day")],
            JoinArgs::new(JoinType::Left),
        )
        .group_by([col(MEMBER), col("metric"), col("day")])
        .agg([
            col("src_current").filter(col("k").lt(lit(7))).sum().alias("cur_sum"),
            col("src_current").filter(col("k").lt(lit(7))).count().alias("cur_n"),
            col("src_current").filter(col("k").gt_eq(lit(7))).sum().alias("prev_sum"),
            col("src_current").filter(col("k").gt_eq(lit(7))).count().alias("prev_n"),
        ]);
    let complete = |sum: &str, n: &str| {
        when(col(n).eq(lit(7))).then(col(sum).cast(DataType::Int64)).otherwise(lit(NULL).cast(DataType::Int64))
    };
    cd.join(
        sums,
        [col(MEMBER), col("metric"), col("day")],
        [col(MEMBER), col("metric"), col("day")],
        JoinArgs::new(JoinType::Left),
    )
    .with_columns([
        (col("current") - col("last")).alias("delta"),
        rate(col("current") - col("last"), col("last")).alias("pct_change"),
        complete("cur_sum", "cur_n").alias("current_7d"),
        complete("prev_sum", "prev_n").alias("last_7d"),
    ])
    .with_columns([
        (col("current_7d") - col("last_7d")).alias("delta_7d"),
        rate(col("current_7d") - col("last_7d"), col("last_7d")).alias("pct_change_7d"),
    ])
    .select([
        col(MEMBER),
        col("metric"),
        col("date"),
        col("current"),
        col("last"),
        col("delta"),
        col("pct_change"),
        col("current_7d"),
        col("last_7d"),
        col("delta_7d"),
        col("pct_change_7d"),
    ])
    .sort([MEMBER, "metric", "date"], SortMultipleOptions::default())
    .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// The one-pass 7-day sums give the frame the join gave: members whose metrics each have a
    /// run of days with some missing (each member its own share present, from a tenth, with
    /// long gaps, to all of them, with complete weeks), starting before or after 1970, with
    /// values of either sign.
    #[test]
    fn the_seven_day_sums_in_one_pass_are_the_joins(
        members in proptest::collection::vec(
            (
                -400i64..400,
                1u8..=10,
                proptest::collection::vec((0u8..10, -1_000_000_000_000i64..1_000_000_000_000), 0..45),
                proptest::collection::vec((0u8..10, -1_000_000_000_000i64..1_000_000_000_000), 0..45),
            ),
            1..4,
        )
    ) {
        let contents: Vec<Vec<ContentRow>> = members
            .iter()
            .map(|(start, present, views, likes)| {
                let mut rows = vec![];
                for (metric, days) in [(Metric::Views, views), (Metric::Likes, likes)] {
                    for (i, (draw, value)) in days.iter().enumerate() {
                        if draw >= present {
                            continue;
                        }
                        let date = EPOCH + Duration::days(start + i as i64);
                        rows.push(ContentRow {
                            metric,
                            date,
                            last_date: date - Duration::days(7),
                            current: *value,
                            last: value / 3,
                            total: 0,
                            last_total: 0,
                        });
                    }
                }
                rows
            })
            .collect();
        let inputs: Vec<Input> = contents.iter().map(|c| Input { apps: &[], content: c }).collect();
        let content = content_frame(&inputs).unwrap();
        let got = wow_frame(&content).unwrap();
        let want = wow_frame_by_join(&content).unwrap();
        proptest::prop_assert_eq!(got.schema(), want.schema());
        proptest::prop_assert!(got.equals_missing(&want), "one pass\n{}\njoin\n{}", got, want);
    }
}

/// Across 1970-01-01, the one-pass sums and the reference agree on complete weeks of both kinds
/// (the comparison above is not only between NULLs).
#[test]
fn the_seven_day_sums_reference_sees_complete_weeks() {
    let content = views("1969-12-20", &(1..=30).collect::<Vec<_>>(), &(0..30).collect::<Vec<_>>());
    let frame = content_frame(&[Input { apps: &[], content: &content }]).unwrap();
    let (got, want) = (wow_frame(&frame).unwrap(), wow_frame_by_join(&frame).unwrap());
    assert!(got.equals_missing(&want));
    assert_eq!(got.column("last_7d").unwrap().null_count(), 13, "days 14 to 30 have both weeks");
}

/// Content that is not one row per metric and day in date order is refused, never summed wrong.
#[test]
fn the_seven_day_sums_refuse_a_day_twice() {
    let mut content = views("2026-03-01", &[1, 2, 3, 4, 5, 6, 7, 8], &[0; 8]);
    content[4].date = content[3].date;
    let frame = DataFrame::new_infer_height(vec![
        Column::new(MEMBER.into(), vec![0u32; content.len()]),
        Column::new("metric".into(), vec!["views"; content.len()]),
        date_col("date", content.iter().map(|r| day_number(r.date)).collect()).unwrap(),
        Column::new("current".into(), content.iter().map(|r| r.current).collect::<Vec<_>>()),
    ])
    .unwrap();
    let e = week_sums(&frame).unwrap_err().to_string();
    assert!(e.contains("one row per metric and day") && e.contains("`views` on 2026-03-04"), "{e}");
}
