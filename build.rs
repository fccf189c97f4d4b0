//! Records the git commit the binary is built from, for `creator-etl --version`.
//!
//! Outside a git checkout (a source archive), or without git, the commit is `unknown`. The
//! build script reruns when HEAD moves, so the commit is never stale.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    // HEAD itself, the branch it points at, and packed refs: a commit, checkout or pull changes
    // one. Only paths that exist: cargo takes a missing one as changed, and would rerun this
    // script, and recompile the crate, on every build.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rustc-env=CREATOR_ETL_COMMIT={commit}");
}
