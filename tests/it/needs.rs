//! What the tests need from outside cargo, got when missing, so that `cargo test --locked` passes
//! on a fresh machine with nothing installed by hand: Debian packages (Chromium for the report,
//! curl, Python's venv) through `apt-get` when the tests run as root, and mdBook from crates.io
//! into the target directory. Where a package cannot be installed, the test fails with the one
//! line that installs it; nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One `apt-get` at a time (tests run in parallel threads of this one binary).
static APT: Mutex<()> = Mutex::new(());

fn works(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().is_ok_and(|o| o.status.success())
}

/// Installs the Debian `packages` with `apt-get`, as root; panics with the command to run when
/// it cannot.
fn apt_install(packages: &[&str], why: &str) {
    let line = format!("sudo apt-get install -y {}", packages.join(" "));
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root || !works("apt-get", &["--version"]) {
        panic!("{why} needs {}, which is missing; install it with `{line}`", packages.join(", "));
    }
    let run = |args: &[&str]| {
        let o = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("apt-get: {e}; install with `{line}`"));
        assert!(
            o.status.success(),
            "`apt-get {}` failed ({why}); install with `{line}`:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&["update", "-qq"]);
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(packages);
    run(&args);
}

/// A command that answers `probe`, from the first of `names` found, installing `packages` when
/// none is.
fn command(names: &[&'static str], probe: &[&str], packages: &[&str], why: &str) -> &'static str {
    let found = || names.iter().copied().find(|n| works(n, probe));
    if let Some(name) = found() {
        return name;
    }
    let _one = APT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = found() {
        return name;
    }
    apt_install(packages, why);
    found().unwrap_or_else(|| panic!("{packages:?} were installed, yet none of {names:?} answers {probe:?}"))
}

/// Headless Chromium (Debian's `chromium`), for the report tests.
pub fn chromium() -> &'static str {
    static FOUND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        command(&["chromium", "chromium-browser"], &["--version"], &["chromium"], "rendering the HTML report")
    })
}

/// curl, which the emulator's tests drive as a user would.
pub fn curl() -> &'static str {
    static FOUND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| command(&["curl"], &["--version"], &["curl"], "the emulator's HTTP tests"))
}

/// `python3` with `venv` and `ensurepip`, for the virtualenvs of the notebook, lake and S3 tests.
pub fn python3() -> &'static str {
    static FOUND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        command(
            &["python3"],
            &["-c", "import venv, ensurepip"],
            &["python3", "python3-venv", "python3-pip"],
            "the Python virtualenvs (notebooks, lake, S3, Airflow)",
        )
    })
}

/// The mdBook version the manual is built with (`.ci/run` installs the same).
pub const MDBOOK_VERSION: &str = "0.5.4";

/// `mdbook` of [`MDBOOK_VERSION`]: the one on `PATH` if it is that version, else installed from
/// crates.io (`cargo install`, a few minutes, once) under the target directory.
pub fn mdbook() -> PathBuf {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let right = |p: &std::path::Path| {
                Command::new(p)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(MDBOOK_VERSION))
            };
            if right(std::path::Path::new("mdbook")) {
                return PathBuf::from("mdbook");
            }
            let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mdbook");
            let installed = root.join("bin/mdbook");
            if right(&installed) {
                return installed;
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let o = Command::new(&cargo)
                .args(["install", "mdbook", "--locked", "--version", MDBOOK_VERSION])
                .args(["--no-default-features", "--features", "search", "--root"])
                .arg(&root)
                // Its own build directory: the tests' target directory is not to be touched.
                .env("CARGO_TARGET_DIR", root.join("build"))
                .output()
                .unwrap_or_else(|e| panic!("{cargo}: {e}"));
            assert!(
                o.status.success(),
                "installing mdBook failed; install it with `cargo install mdbook --locked --version {MDBOOK_VERSION}`:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let _ = std::fs::remove_dir_all(root.join("build"));
            installed
        })
        .clone()
}

/// A virtualenv named `name` under the target directory with the requirements file
/// `requirements` (relative to the repository) installed from PyPI, made again only when that
/// file changed. Call it through a `OnceLock`: tests run in parallel threads.
pub fn venv(name: &str, requirements: &str) -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join(requirements);
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    let stamp = venv.join("requirements.installed");
    if venv.join("bin/python").exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return venv;
    }
    let run = |cmd: &mut Command| {
        let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            o.status.success(),
            "{cmd:?}:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    // Without the stamp, an earlier attempt may have stopped half-way: start clean.
    run(Command::new(python3()).args(["-m", "venv", "--clear"]).arg(&venv));
    run(Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements));
    std::fs::write(&stamp, wanted).unwrap();
    venv
}
