//! The README is the manual: every command line in it parses, and it names every flag.

use clap::{CommandFactory, Parser};
use creator_etl::cli::Cli;

const README: &str = include_str!("../../README.md");

/// `creator-etl …` command lines in the README's `sh` blocks, continuations joined, with any
/// shell pipe, redirection, substitution or comment after them cut off.
fn command_lines() -> Vec<String> {
    let mut lines = vec![];
    let mut in_sh = false;
    let mut pending = String::new();
    for line in README.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        if line.ends_with('\\') {
            continue;
        }
        let full = std::mem::take(&mut pending);
        if let Some(start) = full.find("creator-etl ") {
            let cmd = full[start..].split(['|', ')', '>', '#']).next().unwrap().trim().to_owned();
            lines.push(cmd);
        }
    }
    lines
}

#[test]
fn every_readme_command_line_parses() {
    let lines = command_lines();
    assert!(lines.len() >= 4, "{lines:?}");
    for line in lines {
        let args: Vec<&str> = line.split_whitespace().collect();
        if let Err(e) = Cli::try_parse_from(&args) {
            panic!("README command `{line}` does not parse:\n{e}");
        }
    }
}

#[test]
fn the_readme_names_every_command_and_flag() {
    let cmd = Cli::command();
    let mut missing = vec![];
    for arg in cmd.get_arguments() {
        if let Some(long) = arg.get_long() {
            if !README.contains(&format!("--{long}")) && long != "help" && long != "version" {
                missing.push(format!("--{long}"));
            }
        }
    }
    // Commands and their subcommands (`actions apply`, `fleet run`), each with its flags.
    let mut commands: Vec<(String, &clap::Command)> = vec![];
    for sub in cmd.get_subcommands() {
        commands.push((sub.get_name().to_owned(), sub));
        for nested in sub.get_subcommands().filter(|n| n.get_name() != "help") {
            commands.push((format!("{} {}", sub.get_name(), nested.get_name()), nested));
        }
    }
    for (name, sub) in commands {
        if !README.contains(&format!("creator-etl {name}")) {
            missing.push(format!("command `{name}`"));
        }
        for arg in sub.get_arguments() {
            if let Some(long) = arg.get_long() {
                if !README.contains(&format!("--{long}")) && long != "help" {
                    missing.push(format!("{name} --{long}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in the README: {missing:?}");
    for code in 0..=6 {
        assert!(README.contains(&format!("| {code} |")), "exit code {code} is documented");
    }
}

/// The README's fenced block of `lang` in the section titled `heading`.
fn block(heading: &str, lang: &str) -> String {
    let section = README.split(&format!("\n{heading}\n")).nth(1).unwrap_or_else(|| panic!("no {heading}"));
    let start = section.find(&format!("```{lang}\n")).unwrap_or_else(|| panic!("no {lang} block")) + lang.len() + 4;
    section[start..].split("\n```").next().unwrap().to_owned()
}

/// The Kubernetes CronJob is valid YAML of an indexed Job whose shard comes from the completion
/// index, and the Airflow DAG is valid Python that maps one task per shard. In both, `--out`
/// lasts from one run to the next: in Kubernetes a directory per completion index on a
/// persistent claim, never an `emptyDir`; in Airflow a directory per shard under `OUT_ROOT`, not
/// a temporary one.
#[test]
fn the_fleet_scheduling_snippets_parse() {
    let heading = "### Across machines: `--shard I/N`";
    let yaml = block(heading, "yaml");
    let python = block(heading, "python");
    let check = r#"
import ast, re, sys, yaml
docs = {d["kind"]: d for d in yaml.safe_load_all(open(sys.argv[1]))}
doc = docs["CronJob"]
job = doc["spec"]["jobTemplate"]["spec"]
assert job["completionMode"] == "Indexed"
n = job["completions"]
pod = job["template"]["spec"]
container = pod["containers"][0]
args = container["args"]
assert f"--shard=$(JOB_COMPLETION_INDEX)/{n}" in args, args
assert args[args.index("fleet") + 1] == "run"
# `--out` is a mount of a persistent claim, one directory per completion index.
out = next(a.split("=", 1)[1] for a in args if a.startswith("--out="))
mount = next(m for m in container["volumeMounts"] if m["mountPath"] == out)
volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
assert "emptyDir" not in volume, volume
claim = docs["PersistentVolumeClaim"]
assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], volume
assert "ReadWriteMany" in claim["spec"]["accessModes"], claim
var = re.fullmatch(r"shard-\$\((\w+)\)", mount["subPathExpr"]).group(1)
env = next(e for e in container["env"] if e["name"] == var)
field = env["valueFrom"]["fieldRef"]["fieldPath"]
assert field == "metadata.annotations['batch.kubernetes.io/job-completion-index']", field
tree = ast.parse(open(sys.argv[2]).read())
src = open(sys.argv[2]).read()
assert any(isinstance(n, ast.Attribute) and n.attr == "expand" for n in ast.walk(tree))
assert "--shard {i}/{SHARDS}" in src
roots = [n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
         and any(getattr(t, "id", None) == "OUT_ROOT" for t in n.targets)]
assert len(roots) == 1 and roots[0].startswith("/") and not roots[0].startswith("/tmp"), roots
assert "--out {OUT_ROOT}/shard-{i}" in src
print("ok")
"#;
    let dir = tempfile::tempdir().unwrap();
    let (y, p) = (dir.path().join("cronjob.yaml"), dir.path().join("dag.py"));
    std::fs::write(&y, yaml).unwrap();
    std::fs::write(&p, python).unwrap();
    let o = std::process::Command::new(crate::demo::notebook_python())
        .args(["-c", check])
        .arg(&y)
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The command line inside them parses.
    for line in [
        "creator-etl --out=/data fleet run --config=/etc/creator-etl/fleet.toml --lake=s3://a/b --shard=3/4 --max-duration=50m --metrics-file=/data/fleet.prom",
        "creator-etl --out /mnt/creator-etl/shard-0 fleet run --config /etc/creator-etl/fleet.toml --shard 0/4 --max-duration 50m",
    ] {
        let args: Vec<&str> = line.split_whitespace().collect();
        Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}
