//! The fleet warehouse's unit tests: batches replace exactly their members' rows, a member fails alone, the publish.

use super::*;
use crate::api::models::{Application, ApplicationStatus, ConnectedAccount, Provider, SignupSource};
use crate::extract::{ContentRow, Metric, Observation, RunSpec, SyncMode};
use chrono::{DateTime, Duration as Days, NaiveDate, Utc};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// A complete full run of `apps` (id, status) and `days` of content ending 2026-11-01, each
/// value offset by `bias` so that organizations differ.
fn run(run_id: &str, apps: &[(i64, ApplicationStatus)], days: i64, bias: i64) -> Extracted {
    let to = NaiveDate::from_ymd_opt(2026, 11, 1).unwrap();
    let from = to - Days::days(days - 1);
    let observed = at("2026-11-02T00:00:00Z") + Days::seconds(bias);
    let applications = apps
        .iter()
        .map(|(id, status)| Observation {
            seq: 0,
            first_pass: 1,
            observed_at: observed,
            app: Application {
                id: *id,
                status: status.clone(),
                campaign_id: 1,
                campaign_name: "Spring".into(),
                user_id: id * 10,
                creator_name: format!("creator {id}"),
                email: None,
                signup_source: SignupSource::Marketplace,
                connected_accounts: vec![ConnectedAccount {
                    id: id * 100,
                    provider: Provider::TikTok,
                    username: None,
                    monthly_post_count: id % 7 + bias,
                }],
                applied_at: at("2026-06-01T00:00:00Z") + Days::days(*id),
            },
        })
        .collect();
    let mut content = vec![];
    let mut day = from;
    while day <= to {
        for metric in [Metric::Views, Metric::Likes] {
            content.push(ContentRow {
                metric,
                date: day,
                last_date: day - Days::days(7),
                current: 100 + bias,
                last: 90 + bias,
                total: 0,
                last_total: 0,
            });
        }
        day += Days::days(1);
    }
    // The windows' totals are the sums of their days, as the service sends them.
    for metric in [Metric::Views, Metric::Likes] {
        let (total, last_total) =
            content.iter().filter(|r| r.metric == metric).fold((0, 0), |(a, b), r| (a + r.current, b + r.last));
        for r in content.iter_mut().filter(|r| r.metric == metric) {
            r.total = total;
            r.last_total = last_total;
        }
    }
    Extracted {
        spec: RunSpec {
            run_id: run_id.into(),
            created_at: observed,
            base_url: "test".into(),
            statuses: ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect(),
            campaign_id: None,
            max_passes: 1,
            from,
            to,
            window_days: days as u32,
            sync: SyncMode::Full,
            base_run: None,
        },
        applications,
        content,
        complete: true,
        quick: None,
    }
}

fn config(strict: bool) -> BatchConfig {
    BatchConfig {
        cohort_edges: crate::transform::DEFAULT_COHORT_EDGES.to_vec(),
        strict,
        parquet_grace: Duration::from_secs(3600),
    }
}

fn member(org: &str, extracted: Extracted) -> Member {
    Member { org: org.into(), extracted, report: None, lake: None, actions: false }
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A `--out` whose path has `key=value` folders (`organization=` among them) loads each
/// member under its own name: the name never comes from a path.
#[test]
fn an_out_path_with_partition_like_folders_loads_each_member_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path().join("organization=main").join("env=prod"));
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::Pending;
    let outcomes = w.load(
        vec![member("a", run("r1", &[(1, Pending)], 7, 0)), member("b", run("r1", &[(2, Pending)], 7, 1))],
        &config(false),
    );
    assert!(
        outcomes.iter().all(|(_, r)| r.is_ok()),
        "{:?}",
        outcomes.iter().map(|(_, r)| r.as_ref().err()).collect::<Vec<_>>()
    );
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'a' AND id = 1"), 1);
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'b' AND id = 2"), 1);
    assert_eq!(count(conn, "SELECT count(DISTINCT organization) FROM content_daily"), 2);
    // One organization's load reads its staged files the same way.
    let single = super::super::LoadConfig {
        out: OutDir::new(dir.path().join("single").join("env=prod")),
        cohort_edges: crate::transform::DEFAULT_COHORT_EDGES.to_vec(),
        strict: false,
        parquet_grace: Duration::from_secs(3600),
        lake: None,
    };
    let report = super::super::load_extracted(&single, run("r1", &[(1, Pending)], 7, 0), None).unwrap();
    assert_eq!(report.rows["applications"], 1);
}

/// Two organizations in one batch, then one of them again: each holds exactly its own rows,
/// reads back through its views as one organization's warehouse, and the other's rows, history
/// and ledger are untouched.
#[test]
fn a_batch_replaces_exactly_its_members_rows() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::{Accepted, Pending, Rejected};
    let outcomes = w.load(
        vec![
            member("acme", run("r1", &[(1, Pending), (2, Accepted)], 14, 0)),
            member("0042", run("r1", &[(1, Rejected), (3, Pending), (4, Pending)], 21, 5)),
        ],
        &config(false),
    );
    let names: Vec<&str> = outcomes.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(names, ["acme", "0042"], "outcomes come back in the members' order");
    let reports: BTreeMap<String, LoadReport> = outcomes.into_iter().map(|(o, r)| (o, r.expect("loaded"))).collect();
    assert_eq!(reports["acme"].rows["applications"], 2);
    assert_eq!(reports["0042"].rows["applications"], 3);
    assert_eq!(reports["0042"].rows["content_daily"], 42);
    assert_eq!(w.organizations().unwrap(), ["0042".to_owned(), "acme".to_owned()].into());
    // The organization's name is text, never a number read from its path.
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = '0042'"), 3);
    let views = w
        .with_org("acme", |c| {
            Ok((
                warehouse::applications_where(c, "true")?.len(),
                warehouse::content(c)?.len(),
                warehouse::latest_run(c)?,
            ))
        })
        .unwrap();
    assert_eq!(views, (2, 28, Some("r1".to_owned())));
    // Views are gone after the read: the tables have every organization again.
    assert_eq!(count(w.conn().unwrap(), "SELECT count(DISTINCT organization) FROM applications"), 2);

    // acme again, one application changed status and one gone: only acme's rows move.
    let outcomes = w.load(vec![member("acme", run("r2", &[(1, Accepted)], 14, 1))], &config(false));
    let report = outcomes.into_iter().next().unwrap().1.expect("loaded");
    assert_eq!(report.quality.status_changes, 1);
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'acme'"), 1);
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = '0042'"), 3);
    assert_eq!(
        count(conn, "SELECT count(*) FROM application_status_history WHERE organization = 'acme' AND id = 1"),
        2,
        "acme's application 1: pending, then accepted"
    );
    assert_eq!(count(conn, "SELECT count(*) FROM application_status_history WHERE organization = '0042'"), 3);
    assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = 'acme'"), 2);
    assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = '0042'"), 1);
    // Loading the same run again changes nothing.
    let again = w.load(vec![member("acme", run("r2", &[(1, Accepted)], 14, 1))], &config(false));
    assert_eq!(again[0].1.as_ref().unwrap().rows, report.rows);
    assert_eq!(count(w.conn().unwrap(), "SELECT count(*) FROM runs WHERE organization = 'acme'"), 2);

    // Each application keeps its first sighting, its own organization's, in a batch of both:
    // 0042's application 1 is another than acme's (seen 5 seconds earlier), and another than
    // that of an organization loaded for the first time in the same batch.
    let outcomes = w.load(
        vec![
            member("0042", run("r3", &[(1, Rejected), (3, Pending)], 21, 9)),
            member("acme", run("r3", &[(1, Accepted)], 14, 10)),
            // And one with nothing loaded before: its history is its applications' first rows.
            member("new", run("r1", &[(1, Pending), (2, Accepted)], 14, 11)),
        ],
        &config(false),
    );
    assert!(outcomes.iter().all(|(_, r)| r.is_ok()), "all loaded");
    w.conn().unwrap();
    // Whether the application's one row says it was first seen `first` and last seen `last`
    // seconds after the first run's observation.
    let seen = |org: &str, id: i64, first: u32, last: u32| {
        let at = |s: u32| format!("TIMESTAMPTZ '2026-11-02 00:00:{s:02}+00'");
        let sql = format!(
            "SELECT count(*) FILTER (first_seen_at = {} AND last_seen_at = {}) - count(*) + 1 FROM applications \
             WHERE organization = '{org}' AND id = {id}",
            at(first),
            at(last)
        );
        count(w.conn.as_ref().unwrap(), &sql) == 1
    };
    assert!(seen("0042", 1, 5, 9));
    assert!(seen("0042", 3, 5, 9));
    assert!(seen("acme", 1, 0, 10));
    assert!(seen("new", 1, 11, 11));
    assert_eq!(
        count(
            w.conn.as_ref().unwrap(),
            "SELECT count(*) FROM application_status_history h JOIN applications a USING (organization, id) \
             WHERE organization = 'new' AND h.valid_to IS NULL AND h.status = a.status AND h.valid_from = a.last_seen_at"
        ),
        2,
        "each of its applications has its one open row"
    );
    assert_eq!(
        count(w.conn.as_ref().unwrap(), "SELECT count(*) FROM application_status_history WHERE organization = 'new'"),
        2
    );
}

/// Under `--strict`, a member whose content fails the checks fails alone: the others of its
/// batch load, and its own rows stay as they were.
#[test]
fn a_failing_member_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::Pending;
    w.load(vec![member("bad", run("r1", &[(1, Pending)], 7, 0))], &config(true)).pop().unwrap().1.unwrap();
    let mut broken = run("r2", &[(1, Pending), (2, Pending)], 7, 0);
    broken.content[0].total += 1; // a window whose total is not the sum of its days
    let outcomes = w.load(vec![member("good", run("r1", &[(5, Pending)], 7, 2)), member("bad", broken)], &config(true));
    assert!(outcomes[0].1.is_ok(), "{:?}", outcomes[0].1.as_ref().err().map(|e| e.to_string()));
    assert!(matches!(outcomes[1].1, Err(LoadError::Strict(_))), "{:?}", outcomes[1].1.as_ref().err());
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'good'"), 1);
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'bad'"), 1, "as it was");
    assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = 'bad'"), 1);
}

/// A member whose rows repeat a key (which the transform never makes: the frame is doubled
/// here) fails alone, with the table named: the batch's staging finds it, and the members are
/// committed one by one.
#[test]
fn a_member_whose_rows_repeat_a_key_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::Pending;
    let members = vec![
        member("good", run("r1", &[(5, Pending)], 7, 2)),
        member("twice", run("r1", &[(1, Pending)], 7, 0)),
        member("also", run("r1", &[(6, Pending)], 7, 3)),
    ];
    let mut prepared = prepare_batch(w.read_batch(members), &config(false));
    assert!(prepared.staged.is_some() && !prepared.alone, "staged together");
    let (_, twice) = prepared.ready.iter_mut().find(|(org, _)| org == "twice").unwrap();
    let frames = twice.frames.as_mut().unwrap();
    let doubled = frames.applications.clone();
    frames.applications.vstack_mut(&doubled).unwrap();
    (prepared.staged, prepared.alone) = stage_ready(&prepared.ready, &prepared.staging);
    assert!(prepared.staged.is_none() && prepared.alone, "the batch is committed one by one");
    let outcomes: BTreeMap<String, Result<LoadReport, LoadError>> = w.commit_batch(prepared).into_iter().collect();
    assert!(
        outcomes["good"].is_ok() && outcomes["also"].is_ok(),
        "{:?}",
        outcomes.values().map(|o| o.is_ok()).collect::<Vec<_>>()
    );
    match &outcomes["twice"] {
        Err(LoadError::DuplicateKeys { table, duplicates, .. }) => {
            assert_eq!((table.as_str(), *duplicates), ("applications", 1))
        }
        other => panic!("a repeated key was not refused: {:?}", other.as_ref().err().map(|e| e.to_string())),
    }
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization IN ('good', 'also')"), 2);
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'twice'"), 0);
    assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = 'twice'"), 0);
}

/// The publish writes one Parquet tree in segments (`organization` and `year` columns in the
/// files) and the readers' snapshot; a later publish writes only the segments of the changed
/// organizations and links the others; one organization's warehouse refuses to open a fleet's and
/// the other way round.
#[test]
fn the_publish_writes_a_tree_by_organization_and_the_kinds_are_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::Pending;
    // Two publishes of 20 organizations each: two segments a table.
    for half in [0..20, 20..40] {
        let members = half.map(|i| member(&format!("org-{i}"), run("r1", &[(i as i64 + 1, Pending)], 7, 0))).collect();
        w.load(members, &config(false));
        assert!(w.unpublished());
        w.publish().unwrap();
        assert!(!w.unpublished());
    }
    let tree = |conn: &Connection, t: &str| {
        let files = dir.path().join("parquet").join(t).join("*.parquet").display().to_string();
        let parquet = format!(
            "SELECT organization, count(*) FROM read_parquet('{files}', hive_partitioning = true) GROUP BY ALL"
        );
        let table = format!("SELECT organization, count(*) FROM {t} GROUP BY ALL");
        count(conn, &format!("SELECT count(*) FROM (({parquet} EXCEPT {table}) UNION ALL ({table} EXCEPT {parquet}))"))
    };
    for t in crate::load::catalog::exported() {
        assert_eq!(tree(w.conn().unwrap(), t), 0, "{t}: the tree's rows per organization are the warehouse's");
    }
    let content = dir.path().join("parquet/content_daily/*.parquet").display().to_string();
    let years = count(
        w.conn().unwrap(),
        &format!("SELECT count(DISTINCT year) FROM read_parquet('{content}') WHERE organization = 'org-3'"),
    );
    assert!(years >= 1, "`year` is a column of the content files");
    let inodes = |t: &str| -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        let mut v: Vec<u64> = std::fs::read_dir(dir.path().join("parquet").join(t))
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.metadata().unwrap().ino())
            .collect();
        v.sort();
        v
    };
    let before = inodes("applications");
    assert_eq!(before.len(), 2, "a segment a publish");
    // One organization of the first segment loads again: that segment is written anew, the
    // other linked; a warehouse opened again (nothing remembered) reads the segments' files.
    w.load(vec![member("org-0", run("r2", &[(1, Pending), (100, Pending)], 7, 0))], &config(false));
    w.publish().unwrap();
    let after = inodes("applications");
    assert_eq!(after.len(), 2);
    assert_eq!(after.iter().filter(|i| before.contains(i)).count(), 1, "the untouched segment is linked");
    drop(w);
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    w.load(vec![member("org-39", run("r2", &[(40, Pending), (400, Pending)], 7, 0))], &config(false));
    w.publish().unwrap();
    let last = inodes("applications");
    assert_eq!(last.iter().filter(|i| after.contains(i)).count(), 1, "again, from the files");
    for t in crate::load::catalog::exported() {
        assert_eq!(tree(w.conn().unwrap(), t), 0, "{t} after the later publishes");
    }
    let snapshot = Connection::open(out.warehouse()).unwrap();
    assert_eq!(count(&snapshot, "SELECT count(*) FROM applications"), 42);
    drop(snapshot);
    // After the publish the writer reopens for the next batch.
    w.load(vec![member("org-1", run("r2", &[(2, Pending), (300, Pending)], 7, 0))], &config(false));
    assert_eq!(count(w.conn().unwrap(), "SELECT count(*) FROM applications"), 43);
    drop(w);
    let err = warehouse::open_writer(&out).unwrap_err();
    assert!(matches!(err, LoadError::Kind(_)), "{err}");
    let single = tempfile::tempdir().unwrap();
    drop(warehouse::open_writer(&OutDir::new(single.path())).unwrap());
    let err = FleetWarehouse::open(&OutDir::new(single.path()), Duration::ZERO).err().expect("refused");
    assert!(matches!(err, LoadError::Kind(_)), "{err}");
}

/// Publishes whose changed organizations straddle segments keep the tree exact, no segment
/// above its bound, and a later publish of a few organizations rewrites only their segments.
#[test]
fn segments_stay_bounded_and_exact_across_straddling_publishes() {
    use super::super::parquet::SEGMENT_ORGANIZATIONS;
    use ApplicationStatus::Pending;
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    let n = SEGMENT_ORGANIZATIONS + 60;
    // Each load's values differ from the one before (`bias`), so every table of its
    // organizations changes, and only theirs.
    let load = |w: &mut FleetWarehouse, range: std::ops::Range<usize>, run_id: &str| {
        let bias = run_id.trim_start_matches('r').parse::<i64>().unwrap();
        let members =
            range.map(|i| member(&format!("org-{i:04}"), run(run_id, &[(i as i64 + 1, Pending)], 7, bias))).collect();
        for (org, outcome) in w.load(members, &config(false)) {
            outcome.unwrap_or_else(|e| panic!("{org}: {e}"));
        }
        w.publish().unwrap();
    };
    load(&mut w, 0..n, "r1");
    // Straddling: the end of one publish's organizations and the start of the next.
    load(&mut w, 200..n, "r2");
    load(&mut w, 100..250, "r3");
    let files = |t: &str| dir.path().join("parquet").join(t).join("*.parquet").display().to_string();
    let conn = w.conn().unwrap();
    for t in crate::load::catalog::exported() {
        let year = if crate::load::catalog::table(t).unwrap().by_year { " EXCLUDE (year)" } else { "" };
        let parquet = format!("SELECT *{year} FROM read_parquet('{}', hive_partitioning = false)", files(t));
        let table = format!("SELECT * FROM {t}");
        let differ = count(
            conn,
            &format!("SELECT count(*) FROM (({parquet} EXCEPT ALL {table}) UNION ALL ({table} EXCEPT ALL {parquet}))"),
        );
        assert_eq!(differ, 0, "{t}: the tree's rows are the warehouse's, every column");
        let biggest = count(
            conn,
            &format!("SELECT max(n) FROM (SELECT filename, count(DISTINCT organization) AS n FROM read_parquet('{}', filename = true, hive_partitioning = false) GROUP BY ALL)", files(t)),
        );
        assert!(biggest as usize <= SEGMENT_ORGANIZATIONS, "{t}: a segment of {biggest} organizations");
        let all = count(conn, &format!("SELECT count(*) FROM glob('{}')", files(t)));
        let with_rows = count(
            conn,
            &format!(
                "SELECT count(DISTINCT filename) FROM read_parquet('{}', filename = true, hive_partitioning = false)",
                files(t)
            ),
        );
        assert_eq!(all, with_rows, "{t}: no empty segment");
    }
    let segments = |t: &str| -> BTreeSet<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(dir.path().join("parquet").join(t))
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.metadata().unwrap().ino())
            .collect()
    };
    let before = segments("applications");
    load(&mut w, 5..6, "r4");
    let after = segments("applications");
    assert_eq!(after.difference(&before).count(), 1, "one organization changed: one segment written");
    assert_eq!(after.len(), before.len());
}

/// A member loaded again with the same data rewrites `applications` alone (its fingerprints
/// match), and the publish exports that table alone, unless a table's current version is not
/// in segments (an older creator-etl's layout): that one is exported whole.
#[test]
fn an_unchanged_table_keeps_its_version_unless_it_is_of_an_older_layout() {
    use ApplicationStatus::Pending;
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    let versions = || -> BTreeMap<&'static str, PathBuf> {
        let root = dir.path().join("parquet");
        crate::load::catalog::exported().into_iter().map(|t| (t, std::fs::read_link(root.join(t)).unwrap())).collect()
    };
    for (org, outcome) in w.load(vec![member("org-a", run("r1", &[(1, Pending), (2, Pending)], 7, 0))], &config(false))
    {
        outcome.unwrap_or_else(|e| panic!("{org}: {e}"));
    }
    w.publish().unwrap();
    let before = versions();
    assert_eq!(count(w.conn().unwrap(), "SELECT count(*) FROM frame_fingerprints"), 5);
    // `weekly_totals`' current version as an older creator-etl left it: a folder per
    // organization.
    std::fs::create_dir(dir.path().join("parquet").join(&before["weekly_totals"]).join("organization=org-a")).unwrap();
    let again = run("r2", &[(1, Pending), (2, Pending)], 7, 0);
    for (org, outcome) in w.load(vec![member("org-a", again)], &config(false)) {
        outcome.unwrap_or_else(|e| panic!("{org}: {e}"));
    }
    w.publish().unwrap();
    let after = versions();
    let moved: Vec<&str> = after.keys().copied().filter(|t| before[t] != after[t]).collect();
    assert_eq!(moved, ["applications", "weekly_totals"], "exported again");
    let root = dir.path().join("parquet");
    let names: Vec<String> = std::fs::read_dir(root.join(&after["weekly_totals"]))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert!(!names.is_empty() && names.iter().all(|n| n.starts_with("seg-")), "{names:?}");
}

/// A batch's load reads its members' previous rows with one query per table: for every
/// member, the same content, latest run and kept applications (with their accounts, for every
/// kind of keep) as reading it alone through its views; a damaged row marks its member alone.
#[test]
fn the_batch_read_of_previous_rows_is_each_members_own() {
    use super::super::prepare::{Keep, PreviousState};
    use ApplicationStatus::{Accepted, Pending, Rejected};
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    // The same application ids in every organization, other campaigns, two accounts or none.
    let varied = |run_id: &str, bias: i64| {
        let mut r = run(run_id, &[(1, Pending), (2, Accepted), (3, Rejected), (4, Pending)], 9, bias);
        r.applications[1].app.campaign_id = 2;
        r.applications[2].app.connected_accounts.clear();
        let mut second = r.applications[3].app.connected_accounts[0].clone();
        second.id += 1;
        r.applications[3].app.connected_accounts.insert(0, second);
        r
    };
    for (org, bias) in [("a", 0), ("b", 3), ("c", 5)] {
        let loaded = w.load(vec![member(org, varied("r1", bias))], &config(false));
        loaded.into_iter().for_each(|(_, r)| drop(r.unwrap()));
    }
    let loaded = w.load(vec![member("a", varied("r2", 1))], &config(false));
    loaded.into_iter().for_each(|(_, r)| drop(r.unwrap()));
    w.load(vec![member("d", varied("r1", 2))], &config(false)).pop().unwrap().1.unwrap();
    w.conn()
        .unwrap()
        .execute_batch("UPDATE content_daily SET date = 'infinity'::DATE WHERE organization = 'd' AND current = 102 AND date = (SELECT max(date) FROM content_daily WHERE organization = 'd');")
        .unwrap();
    let orgs: Vec<String> = ["a", "b", "c", "d", "none"].iter().map(|s| s.to_string()).collect();
    let conn = w.conn().unwrap();
    let apps_of: Vec<String> = ["a", "b", "c", "none"].iter().map(|s| s.to_string()).collect();
    let mut batch = warehouse::load_rows(conn, &orgs, &apps_of).unwrap();
    // Applications not read are an error, never an empty list (a load would drop them).
    let mut unread = warehouse::load_rows(conn, &orgs[..1], &[]).unwrap().remove("a").unwrap();
    assert!(matches!(PreviousState::applications(&mut unread, &Keep::Ids(&[1].into())), Err(LoadError::Bug(_))));
    assert!(batch["d"].damaged, "d's damaged date marks it");
    assert!(["a", "b", "c", "none"].iter().all(|o| !batch[*o].damaged));
    let all: Vec<String> = ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect();
    let ids: std::collections::HashSet<i64> = [2, 4, 9].into();
    let keeps = [
        Keep::OutOfScope { statuses: &all[..1], campaign_id: None },
        Keep::OutOfScope { statuses: &all, campaign_id: Some(1) },
        Keep::OutOfScope { statuses: &all[1..3], campaign_id: Some(2) },
        Keep::Ids(&ids),
    ];
    let sorted = |mut rows: Vec<crate::extract::ContentRow>| {
        rows.sort_by_key(|r| (r.metric, r.date));
        format!("{rows:?}")
    };
    for org in ["a", "b", "c", "none"] {
        let mut mine = batch.remove(org).unwrap();
        let alone = w
            .with_org(org, |c| {
                let mut c = c;
                let kept = keeps.iter().map(|k| c.applications(k)).collect::<Result<Vec<_>, _>>()?;
                Ok((sorted(c.content()?), c.latest_run()?, format!("{kept:?}")))
            })
            .unwrap();
        let kept: Vec<_> = keeps.iter().map(|k| PreviousState::applications(&mut mine, k).unwrap()).collect();
        if org != "none" {
            assert!(kept.iter().any(|k| !k.is_empty()), "{org}: the keeps name applications");
            assert!(alone.0.len() > 10, "{org}: content");
        }
        assert_eq!(sorted(mine.content().unwrap()), alone.0, "{org}: content");
        assert_eq!(PreviousState::latest_run(&mut mine).unwrap(), alone.1, "{org}: latest run");
        assert_eq!(format!("{kept:?}"), alone.2, "{org}: kept applications");
    }
    assert_eq!(w.with_org("a", warehouse::latest_run).unwrap().as_deref(), Some("r2"));
}

/// The fleet's writer prepares a batch on a thread of its own while it commits the batch before
/// and publishes (which closes and reopens its file): the preparation touches no warehouse, so
/// the batch commits exactly as a batch loaded at once.
#[test]
fn a_batch_prepared_on_another_thread_commits_after_the_writer_reopened() {
    use ApplicationStatus::{Accepted, Pending};
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    w.load(vec![member("a", run("r1", &[(1, Pending), (2, Pending)], 7, 0))], &config(false)).pop().unwrap().1.unwrap();
    let read = w.read_batch(vec![
        member("a", run("r2", &[(1, Accepted)], 7, 1)),
        member("new", run("r1", &[(5, Pending)], 7, 2)),
    ]);
    assert_eq!(read.organizations(), ["a", "new"]);
    let batch_config = config(false);
    let preparing = std::thread::spawn(move || prepare_batch(read, &batch_config));
    // Meanwhile another batch commits, and a publish closes and reopens the writer's file.
    w.load(vec![member("b", run("r1", &[(3, Pending)], 7, 3))], &config(false)).pop().unwrap().1.unwrap();
    w.publish().unwrap();
    let outcomes = w.commit_batch(preparing.join().unwrap());
    let names: Vec<&str> = outcomes.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(names, ["a", "new"]);
    let reports: Vec<LoadReport> = outcomes.into_iter().map(|(_, r)| r.expect("loaded")).collect();
    assert_eq!(reports[0].quality.status_changes, 1, "a's application 1: pending, then accepted");
    w.publish().unwrap();
    let published = Connection::open(out.warehouse()).unwrap();
    for (sql, want) in [
        ("SELECT count(*) FROM applications WHERE organization = 'a'", 1),
        ("SELECT count(*) FROM applications WHERE organization = 'a' AND status = 'accepted'", 1),
        ("SELECT count(*) FROM application_status_history WHERE organization = 'a'", 3),
        ("SELECT count(*) FROM applications WHERE organization = 'new'", 1),
        ("SELECT count(*) FROM applications WHERE organization = 'b'", 1),
        ("SELECT count(*) FROM runs WHERE organization = 'a'", 2),
        ("SELECT count(*) FROM content_daily WHERE organization = 'new'", 14),
    ] {
        assert_eq!(count(&published, sql), want, "{sql}");
    }
}

/// Members whose previous rows hold a value the batch reader cannot read are read alone through
/// their views (gathered together), and load as any member does; the others of their batch
/// load from the batch's read.
#[test]
fn members_with_unreadable_previous_rows_are_read_alone_and_load() {
    use ApplicationStatus::{Accepted, Pending};
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    let first: Vec<Member> =
        ["a", "b", "c"].iter().enumerate().map(|(i, o)| member(o, run("r1", &[(1, Pending)], 7, i as i64))).collect();
    assert!(w.load(first, &config(false)).into_iter().all(|(_, r)| r.is_ok()));
    // A `runs` row the batch reader cannot read (its `finished_at` is `infinity`), of a run that
    // is not the latest: the views' reader orders by it without reading it.
    w.conn()
        .unwrap()
        .execute_batch(
            "INSERT INTO runs (organization, run_id, status, finished_at, parquet_exported) \
             SELECT organization, 'r0', 'succeeded', '-infinity'::TIMESTAMPTZ, true FROM runs WHERE organization IN ('a', 'b');",
        )
        .unwrap();
    let conn = w.conn().unwrap();
    let rows = warehouse::load_rows(conn, &["a".into(), "b".into(), "c".into()], &[]).unwrap();
    assert!(rows["a"].damaged && rows["b"].damaged && !rows["c"].damaged);
    let outcomes = w.load(
        // Observed later than the first run (its bias in seconds).
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, o)| member(o, run("r2", &[(1, Accepted)], 7, i as i64 + 10)))
            .collect(),
        &config(false),
    );
    for (org, r) in outcomes {
        let report = r.unwrap_or_else(|e| panic!("{org}: {e}"));
        assert_eq!(report.quality.status_changes, 1, "{org}: pending, then accepted");
    }
    let conn = w.conn().unwrap();
    for org in ["a", "b", "c"] {
        let sql = format!("SELECT count(*) FROM application_status_history WHERE organization = '{org}'");
        assert_eq!(count(conn, &sql), 2, "{org}");
        let sql = format!("SELECT count(*) FROM content_daily WHERE organization = '{org}'");
        assert_eq!(count(conn, &sql), 14, "{org}");
    }
}

/// Rows read ahead ([`FleetWarehouse::read_ahead`]) load as rows read with the batch, and a
/// write of an organization's rows outside a batch (here a restore taken in) drops what was
/// read ahead of it: a load after that write merges with the rows it wrote, not the ones read
/// before it.
#[test]
fn rows_read_ahead_load_as_the_batchs_own_and_a_write_drops_them() {
    use ApplicationStatus::{Accepted, Pending};
    // b's own warehouse, as a restore from the lake leaves it: a later run than the fleet's.
    let own_dir = tempfile::tempdir().unwrap();
    let own = OutDir::new(own_dir.path());
    let own_config = crate::load::LoadConfig {
        out: own.clone(),
        cohort_edges: crate::transform::DEFAULT_COHORT_EDGES.to_vec(),
        strict: false,
        parquet_grace: Duration::from_secs(3600),
        lake: None,
    };
    crate::load::load_extracted(&own_config, run("r2", &[(2, Accepted)], 7, 5), None).unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut ws: Vec<FleetWarehouse> =
        dirs.iter().map(|d| FleetWarehouse::open(&OutDir::new(d.path()), Duration::from_secs(3600)).unwrap()).collect();
    let orgs: Vec<String> = ["a", "b", "new"].iter().map(|s| s.to_string()).collect();
    let load = |w: &mut FleetWarehouse, members: Vec<Member>| {
        for (org, r) in w.load(members, &config(false)) {
            r.unwrap_or_else(|e| panic!("{org}: {e}"));
        }
    };
    for (i, w) in ws.iter_mut().enumerate() {
        load(w, vec![member("a", run("r1", &[(1, Pending)], 7, 0)), member("b", run("r1", &[(2, Pending)], 7, 1))]);
        if i == 0 {
            // Read ahead: `new` has nothing loaded, so nothing is read of it.
            let orgs: Vec<(String, bool)> = orgs.iter().map(|o| (o.clone(), true)).collect();
            assert_eq!(w.read_ahead(&orgs), 2);
            assert_eq!(w.read_ahead(&orgs), 0, "held already");
            assert_eq!(w.held_ahead().0, 2);
            assert!(w.held_ahead().1 > 0);
        }
        // b's rows are written after the read ahead: its held rows go.
        w.take_restored("b", &own, true).unwrap();
        if i == 0 {
            assert_eq!(w.held_ahead().0, 1, "b's rows were written");
        }
        // A shorter window: the load keeps the days before it from the previous rows.
        load(
            w,
            vec![
                member("a", run("r3", &[(1, Accepted)], 3, 7)),
                member("b", run("r3", &[(2, Accepted)], 3, 9)),
                member("new", run("r1", &[(3, Pending)], 3, 11)),
            ],
        );
        assert_eq!(w.held_ahead(), (0, 0), "taken by the batch");
    }
    // Both warehouses hold the same rows, whatever was read ahead.
    let [ahead, batch] = &mut ws[..] else { unreachable!() };
    let path = sql_literal(&batch.out.writer_warehouse().display().to_string());
    batch.close();
    let conn = ahead.conn().unwrap();
    conn.execute_batch(&format!("ATTACH {path} AS other (READ_ONLY);")).unwrap();
    for table in ["content_daily", "applications", "application_status_history", "runs"] {
        let columns = match table {
            // Each warehouse's runs have their own times.
            "runs" => "organization, run_id, status, sync_mode".to_string(),
            _ => "*".to_string(),
        };
        let sql = format!(
            "SELECT count(*) FROM ((SELECT {columns} FROM {table} EXCEPT ALL SELECT {columns} FROM other.{table}) \
             UNION ALL (SELECT {columns} FROM other.{table} EXCEPT ALL SELECT {columns} FROM {table}))"
        );
        assert_eq!(count(conn, &sql), 0, "{table}");
    }
    let b_days = "SELECT count(*) FROM content_daily WHERE organization = 'b' AND current = 105";
    assert_eq!(count(conn, b_days), 8, "b's days before its last window are r2's (two metrics, four days)");
}

/// A load that keeps loaded applications (here a narrowed run's) reads their open history rows
/// with them: a member whose every application keeps its one open row's status is settled, and
/// its history step is not run (the tests' builds run it anyway and check that it changes
/// nothing); a new application leaves its member to the step, which records it.
#[test]
fn members_whose_statuses_all_stay_skip_the_history_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::{Accepted, Pending};
    let first = w.load(
        vec![
            member("a", run("r1", &[(1, Pending), (2, Accepted)], 14, 0)),
            member("b", run("r1", &[(1, Pending)], 14, 1)),
        ],
        &config(false),
    );
    assert!(first.iter().all(|(_, r)| r.is_ok()));
    // Pending applications only: each keeps its loaded applications of other statuses.
    let narrowed = |run_id: &str, apps: &[(i64, ApplicationStatus)], bias: i64| {
        let mut r = run(run_id, apps, 14, bias);
        r.spec.statuses = vec!["pending".into()];
        r
    };
    let read = w.read_batch(vec![
        member("a", narrowed("r2", &[(1, Pending)], 2)),
        member("b", narrowed("r2", &[(1, Pending), (3, Pending)], 3)),
    ]);
    let prepared = prepare_batch(read, &config(false));
    assert_eq!(prepared.settled(), ["a"], "b has a new application");
    let outcomes = w.commit_batch(prepared);
    assert!(outcomes.iter().all(|(_, r)| r.is_ok()), "both loaded");
    let conn = w.conn().unwrap();
    assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'a'"), 2, "2 kept");
    let history = |org: &str| {
        count(conn, &format!("SELECT count(*) FROM application_status_history WHERE organization = '{org}'"))
    };
    assert_eq!((history("a"), history("b")), (2, 2));
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM application_status_history WHERE organization = 'b' AND id = 3 AND valid_to IS NULL"
        ),
        1,
        "b's new application has its open row"
    );
}

/// An organization with nothing loaded but rows in the status history (written by something
/// else) gets the history's whole step, not its applications' first rows again: its open row
/// stays the one row of its application, and its first sighting is that row's.
#[test]
fn history_rows_without_a_loaded_run_get_the_whole_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = OutDir::new(dir.path());
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    w.conn()
        .unwrap()
        .execute_batch(
            "INSERT INTO application_status_history (organization, id, status, valid_from, valid_to) \
             VALUES ('ghost', 1, 'pending', TIMESTAMPTZ '2026-11-01 00:00:00+00', NULL);",
        )
        .unwrap();
    // Found when the warehouse opens (nothing creator-etl writes leaves such rows).
    drop(w);
    let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
    use ApplicationStatus::Pending;
    let outcomes = w.load(
        vec![
            member("ghost", run("r1", &[(1, Pending), (2, Pending)], 14, 0)),
            member("other", run("r1", &[(1, Pending)], 14, 1)),
        ],
        &config(false),
    );
    assert!(outcomes.iter().all(|(_, r)| r.is_ok()), "both loaded");
    let conn = w.conn().unwrap();
    assert_eq!(
        count(conn, "SELECT count(*) FROM application_status_history WHERE organization = 'ghost'"),
        2,
        "application 1's row kept, 2's opened"
    );
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM applications WHERE organization = 'ghost' AND id = 1 \
             AND first_seen_at = TIMESTAMPTZ '2026-11-01 00:00:00+00'"
        ),
        1
    );
    assert_eq!(count(conn, "SELECT count(*) FROM application_status_history WHERE organization = 'other'"), 1);
}
