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
    for sub in cmd.get_subcommands() {
        if !README.contains(&format!("creator-etl {}", sub.get_name())) {
            missing.push(format!("command `{}`", sub.get_name()));
        }
        for arg in sub.get_arguments() {
            if let Some(long) = arg.get_long() {
                if !README.contains(&format!("--{long}")) && long != "help" {
                    missing.push(format!("{} --{long}", sub.get_name()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in the README: {missing:?}");
    for code in 0..=5 {
        assert!(README.contains(&format!("| {code} |")), "exit code {code} is documented");
    }
}
