//! The real binary: exit codes, configuration errors, and the key never leaking.

use creator_etl::emulator::EmulatorConfig;

use crate::util::*;

#[test]
fn check_reports_the_pending_count() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(120));
    let dir = tempfile::tempdir().unwrap();
    let args = ["check", "--base-url", &emu.base_url];
    let out = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_exit(&args, &out, 0);
    let report: serde_json::Value = report(&out);
    let pending = emu
        .state
        .applications(creator_etl::emulator::MAIN_ORG)
        .iter()
        .filter(|a| a.status.as_str() == "pending")
        .count();
    assert_eq!(report["pending_applications"], pending as u64);
    assert_eq!(report["requests"]["requests_total"], 1);
}

/// The secret test: with `RUST_LOG=trace`, neither a good nor a rejected key appears in
/// any output, whether it came from the environment or a file.
#[test]
fn the_key_never_appears_in_logs_errors_or_reports() {
    const GOOD: &str = "sekrit-GOOD-4b1d9e";
    const BAD: &str = "sekrit-BAD-77f00d";
    let mut cfg = EmulatorConfig::for_tests(30);
    cfg.keys.full = GOOD.into();
    let emu = TestEmu::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{GOOD}\n")).unwrap();
    let key_path = key_file.to_str().unwrap();
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, i32);
    let cases: Vec<Case> = vec![
        (vec!["check", "--base-url", &emu.base_url], vec![("CREATOR_API_KEY", GOOD)], 0),
        (vec!["check", "--base-url", &emu.base_url, "--api-key-file", key_path], vec![], 0),
        (vec!["check", "--base-url", &emu.base_url, "--log-format", "json"], vec![("CREATOR_API_KEY", GOOD)], 0),
        (vec!["check", "--base-url", &emu.base_url], vec![("CREATOR_API_KEY", BAD)], 4),
    ];
    for (args, mut envs, code) in cases {
        envs.push(("RUST_LOG", "trace"));
        let out = run_bin(dir.path(), &args, &envs);
        assert_exit(&args, &out, code);
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            all.contains("TRACE") || all.contains("\"level\":\"TRACE\""),
            "trace logging was on:\n{}",
            show(&args, &out)
        );
        assert!(!all.contains(GOOD) && !all.contains(BAD), "key leaked:\n{}", show(&args, &out));
        assert!(!all.contains("sekrit"), "no part of the key leaked:\n{}", show(&args, &out));
        if code == 4 {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("API key rejected (401 Not Authenticated)") && stderr.contains("CREATOR_API_KEY"),
                "{stderr}"
            );
        }
    }
    // Debug output of the configuration and the client.
    let cfg = creator_etl::api::ClientConfig::new(
        emu.base_url.parse().unwrap(),
        creator_etl::api::ApiKey::new(GOOD, "test").unwrap(),
    );
    assert!(!format!("{cfg:?}").contains("sekrit"));
    let client = creator_etl::api::Client::new(cfg).unwrap();
    assert!(!format!("{client:?}").contains("sekrit"));
}

#[test]
fn read_only_keys_are_accepted_for_reads() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(10));
    let dir = tempfile::tempdir().unwrap();
    let args = ["check", "--base-url", &emu.base_url];
    let out = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", READ_ONLY_KEY)]);
    assert_exit(&args, &out, 0);
}

#[test]
fn configuration_errors_exit_2_and_list_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-key-file");
    let args =
        ["check", "--base-url", "ftp:/nowhere", "--api-key-file", missing.to_str().unwrap(), "--max-attempts", "0"];
    let out = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in ["--base-url", "no-such-key-file", "--max-attempts"] {
        assert!(stderr.contains(needle), "`{needle}` in:\n{stderr}");
    }

    let args = ["check", "--base-url", "http://127.0.0.1:9/api/public/v1"];
    let out = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no API key: set `CREATOR_API_KEY`"));

    for args in [
        &["check", "--no-such-flag"][..],
        &["no-such-command"],
        &["emulator", "--fault-rate", "2"],
        &["emulator", "--today", "22/11/2026"],
    ] {
        let out = run_bin(dir.path(), args, &[]);
        assert_exit(args, &out, 2);
    }
    // The runtime's worker threads (the manual's fleets chapter, Threads): a count that is not
    // above 0 is refused before anything runs, not a panic.
    let args = ["check", "--base-url", "http://127.0.0.1:9/api/public/v1"];
    for bad in ["0", "many", ""] {
        let out = run_bin(dir.path(), &args, &[("TOKIO_WORKER_THREADS", bad)]);
        assert_exit(&args, &out, 2);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("TOKIO_WORKER_THREADS must be a number above 0"),
            "{bad:?}"
        );
    }
    let out = run_bin(dir.path(), &["--help"], &[]);
    assert_exit(&["--help"], &out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Exit codes"));
}

/// The binary allocates with mimalloc, which takes the settings of the manual's Performance page
/// from the environment: its verbose mode prints the options it runs with.
#[test]
fn the_allocator_takes_the_manuals_settings_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let settings = "MIMALLOC_PURGE_DELAY=0 MIMALLOC_ARENA_EAGER_COMMIT=0";
    assert!(include_str!("../../docs/src/performance.md").contains(&format!("{settings} creator-etl ")));
    let options = |envs: &[(&str, &str)]| {
        let mut envs = envs.to_vec();
        envs.push(("MIMALLOC_VERBOSE", "1"));
        let out = run_bin(dir.path(), &["--version"], &envs);
        assert_exit(&["--version"], &out, 0);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let option = |name: &str| {
            let prefix = format!("option '{name}': ");
            let value = stderr.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
            value.map(|v| v.trim().to_owned()).unwrap_or_else(|| panic!("no {name} in:\n{stderr}"))
        };
        (option("purge_delay"), option("arena_eager_commit"))
    };
    let envs: Vec<(&str, &str)> = settings.split(' ').filter_map(|kv| kv.split_once('=')).collect();
    assert_eq!(options(&envs), ("0".to_owned(), "0".to_owned()));
    // Without them, mimalloc's defaults: the settings change something.
    let (delay, commit) = options(&[]);
    assert!(delay != "0" && commit != "0", "defaults: purge_delay {delay}, arena_eager_commit {commit}");
}

#[test]
fn an_unreachable_service_fails_with_exit_1_after_retries() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) is closed on loopback: connections are refused at once.
    let args = ["check", "--base-url", "http://127.0.0.1:9/api/public/v1", "--max-attempts", "2"];
    let out = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_exit(&args, &out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed after 2 attempts") && stderr.contains("127.0.0.1:9"), "{stderr}");
}

/// Plain http to another machine would send the key in clear text: refused (exit 2) unless
/// `--allow-insecure-http`; a URL with `user:pass@` is always refused. Loopback http is fine.
#[test]
fn insecure_base_urls_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("http://api.example.com/api/public/v1", "plain http to another machine"),
        ("http://10.1.2.3/api/public/v1", "plain http to another machine"),
        ("https://user:pass@api.example.com/api/public/v1", "must not hold a user name or password"),
    ];
    for (url, want) in cases {
        let args = ["check", "--base-url", url];
        let out = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
        assert_exit(&args, &out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{}", show(&args, &out));
        assert!(!stderr.contains(FULL_KEY) && !stderr.contains("user:pass@api"), "the URL is not echoed: {stderr}");
    }
    // Allowed explicitly, the flag passes validation; loopback needs no flag.
    let cli = |args: &[&str]| {
        use clap::Parser;
        creator_etl::cli::Cli::try_parse_from(args).unwrap()
    };
    let key = dir.path().join("key");
    std::fs::write(&key, FULL_KEY).unwrap();
    let key = key.to_str().unwrap();
    let insecure = "http://10.1.2.3/api/public/v1";
    let c = cli(&["creator-etl", "--api-key-file", key, "--allow-insecure-http", "--base-url", insecure, "check"]);
    assert!(c.global.client_config().is_ok());
    for url in ["http://127.0.0.1:9/api/public/v1", "http://localhost:9/v1", "http://[::1]:9/v1"] {
        let c = cli(&["creator-etl", "--api-key-file", key, "--base-url", url, "check"]);
        assert!(c.global.client_config().is_ok(), "{url}");
    }
}

/// `--version` names the package version and the commit the binary was built from: a commit of
/// this checkout (not compared with HEAD, which may have moved since the build).
#[test]
fn version_names_the_commit_it_was_built_from() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_bin(dir.path(), &["--version"], &[]);
    assert_exit(&["--version"], &out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("creator-etl {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = stdout.strip_prefix(&prefix).and_then(|r| r.strip_suffix(")\n")).unwrap_or_else(|| panic!("{stdout}"));
    let git = |args: &[&str]| {
        std::process::Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()
    };
    // Built outside a git checkout, or without git: `unknown`, as build.rs says.
    if !git(&["rev-parse", "HEAD"]).is_some_and(|o| o.status.success()) {
        assert_eq!(commit, "unknown");
        return;
    }
    assert!(commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{stdout}");
    let known = git(&["cat-file", "-e", &format!("{commit}^{{commit}}")]).unwrap();
    assert!(known.status.success(), "{commit} is not a commit of this checkout");
}
