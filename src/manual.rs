//! The manual's reference pages, generated from the code: one page per command from the clap
//! definitions (every subcommand and every flag, with its environment variable, default and
//! help), the global options, and the tables from the table catalog
//! ([`crate::load::catalog::dictionary`]). The book under `docs/` includes them; a test compares
//! the committed pages with [`pages`] and rewrites them when asked (see the manual's development
//! chapter).

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::cli::Cli;

/// Every generated page: its path under `docs/src/`, and its text.
pub fn pages() -> Vec<(String, String)> {
    let cli = Cli::command();
    let mut pages = vec![("commands/reference/global.md".to_owned(), global_page(&cli))];
    for sub in cli.get_subcommands() {
        pages.push((format!("commands/reference/{}.md", sub.get_name()), command_page(sub)));
    }
    // The tables chapter's own headings are `##`; each table is a section under them.
    let dictionary = crate::load::catalog::dictionary().replace("\n## ", "\n### ");
    let dictionary = dictionary.strip_prefix("## ").map_or(dictionary.clone(), |rest| format!("### {rest}"));
    pages.push(("reference/tables.md".to_owned(), generated(&dictionary)));
    pages
}

/// A page's text, marked as generated.
fn generated(body: &str) -> String {
    format!(
        "<!-- Generated from the code by `CREATOR_ETL_WRITE_MANUAL=1 cargo test --locked --test it manual`; do not edit. -->\n\n{}\n",
        body.trim_end()
    )
}

fn global_page(cli: &Command) -> String {
    let globals: Vec<&Arg> = cli.get_arguments().filter(|a| a.is_global_set() && !a.is_hide_set()).collect();
    let mut md = String::from("Global options go before or after the command's name, and hold for every command.\n\n");
    md.push_str(&options_table(&globals));
    generated(&md)
}

/// A command's page: its usage and options, and each of its subcommands' (`fleet run`) under a
/// heading of its own (the chapter that includes the page has the command's title).
fn command_page(cmd: &Command) -> String {
    let mut md = String::new();
    section(&mut md, &[cmd.get_name()], cmd, None);
    for nested in cmd.get_subcommands().filter(|n| !n.is_hide_set()) {
        section(&mut md, &[cmd.get_name(), nested.get_name()], nested, Some("###"));
    }
    generated(&md)
}

fn section(md: &mut String, names: &[&str], cmd: &Command, heading: Option<&str>) {
    let name = names.join(" ");
    let has_subcommands = cmd.get_subcommands().next().is_some();
    if let Some(level) = heading {
        md.push_str(&format!("{level} `creator-etl {name}`\n\n"));
    }
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        md.push_str(&one_paragraph(&about.to_string()));
        md.push_str("\n\n");
    }
    let args: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set()).collect();
    let positionals: Vec<String> = args.iter().filter(|a| a.is_positional()).map(|a| value_name(a)).collect();
    let mut usage = format!("creator-etl [GLOBAL OPTIONS] {name}");
    if has_subcommands {
        usage.push_str(" <COMMAND>");
    } else if args.iter().any(|a| !a.is_positional()) {
        usage.push_str(" [OPTIONS]");
    }
    for p in &positionals {
        usage.push_str(&format!(" {p}"));
    }
    md.push_str(&format!("```text\n{usage}\n```\n\n"));
    if has_subcommands {
        let subs: Vec<String> =
            cmd.get_subcommands().filter(|n| !n.is_hide_set()).map(|n| format!("`{name} {}`", n.get_name())).collect();
        md.push_str(&format!("Commands: {}.\n\n", subs.join(", ")));
    } else if args.is_empty() {
        md.push_str("No options besides the global ones.\n\n");
    } else {
        md.push_str(&options_table(&args));
    }
}

/// The options as a table: the option, its environment variable, its default, what it does.
fn options_table(args: &[&Arg]) -> String {
    let mut md = String::from("| option | environment | default | meaning |\n|---|---|---|---|\n");
    for arg in args {
        let env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy())).unwrap_or_default();
        let defaults: Vec<String> =
            arg.get_default_values().iter().map(|v| format!("`{}`", v.to_string_lossy())).collect();
        let mut help =
            arg.get_long_help().or(arg.get_help()).map(|h| one_paragraph(&h.to_string())).unwrap_or_default();
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if matches!(arg.get_action(), ArgAction::Count) {
            help.push_str(" (repeat for more)");
        }
        if !possible.is_empty() && !matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
            help.push_str(&format!(" (one of {})", possible.join(", ")));
        }
        md.push_str(&format!(
            "| {} | {env} | {} | {} |\n",
            cell(&spelling(arg)),
            defaults.join(", "),
            help.replace('|', "\\|")
        ));
    }
    md.push('\n');
    md
}

/// How the option is written: `-v`, `--verbose` (a count), `--out DIR`, `<FILE>`.
fn spelling(arg: &Arg) -> String {
    if arg.is_positional() {
        return value_name(arg);
    }
    let mut names = vec![];
    if let Some(s) = arg.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = arg.get_long() {
        names.push(format!("--{l}"));
    }
    let takes_value = !matches!(
        arg.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count | ArgAction::Help | ArgAction::Version
    );
    let mut spelled = names.join(", ");
    if takes_value {
        spelled.push(' ');
        spelled.push_str(&bare_value_name(arg));
    }
    spelled
}

/// The name of an option's value (`DIR`), or of a positional argument, as clap's help shows it.
fn bare_value_name(arg: &Arg) -> String {
    arg.get_value_names()
        .and_then(|n| n.first())
        .map_or_else(|| arg.get_id().to_string().to_uppercase(), |n| n.to_string())
}

/// A positional argument: `<FILE>` when required, `[FILE]` when not.
fn value_name(arg: &Arg) -> String {
    let name = bare_value_name(arg);
    if arg.is_required_set() {
        format!("<{name}>")
    } else {
        format!("[{name}]")
    }
}

fn cell(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

/// Help text on one line (a table cell): lines joined with spaces.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
