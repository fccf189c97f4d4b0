//! The layout proves itself: every `crate::…` path in `src/` names a module of the same layer or
//! a layer below. The table below is the map the README's "Development" section points at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, bottom to top, and the top-level modules of each. A module uses only its own layer
/// and the layers below.
const LAYERS: &[(&str, &[&str])] = &[
    // The API's client and models, and the utilities every layer shares.
    ("api and shared utilities", &["api", "out", "progress", "exit", "stop", "testing"]),
    // The stages, each on its own; the emulator serves the API's models and nothing else.
    ("stages", &["extract", "transform", "load", "action", "emulator"]),
    ("query", &["query"]),
    // One organization's sync, and the error that folds every stage's.
    ("sync", &["sync", "error"]),
    ("fleet, demo and report", &["fleet", "demo", "report"]),
    ("commands", &["commands"]),
    ("cli and main", &["cli", "main", "lib"]),
];

/// What the emulator may use besides itself: it must stay a faithful, independent service.
const EMULATOR_USES: &[&str] = &["api"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to: `src/load/lake.rs` → `load`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// The top-level modules a line of code names through `crate::`, including `use crate::{a, b}`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = vec![];
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = &rest[..at];
        rest = &rest[at + "crate::".len()..];
        // `creator_etl::…` and `other_crate::…` are not this crate's paths.
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // A group, perhaps nested and over several lines: the first segment of each member.
            let mut depth = 0;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.push(first_segment(&member));
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                member.push(c);
            }
            found.push(first_segment(&member));
        } else {
            found.push(first_segment(rest));
        }
    }
    // The crate root re-exports the error: `crate::Error` is the `error` module's.
    for m in &mut found {
        if m == "Error" {
            *m = "error".to_owned();
        }
    }
    found.retain(|m| !m.is_empty() && m.chars().next().is_some_and(|c| c.is_ascii_lowercase()));
    found
}

fn first_segment(path: &str) -> String {
    path.trim().split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("").to_owned()
}

/// Every `crate::` use in `src/`, by top-level module: (module, file, line, used module).
fn uses() -> Vec<(String, String, usize, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let mut all = vec![];
    for file in files {
        let module = module_of(&src, &file);
        let text = std::fs::read_to_string(&file).unwrap();
        // Code only (comments and doc links may point anywhere), joined, so that a `use` group
        // over several lines is read whole; each path is reported at its `use` or first line.
        let code: Vec<&str> = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect();
        let mut i = 0;
        while i < code.len() {
            let mut statement = code[i].to_owned();
            let mut end = i;
            if statement.contains("crate::{") {
                while statement.matches('{').count() > statement.matches('}').count() && end + 1 < code.len() {
                    end += 1;
                    statement.push(' ');
                    statement.push_str(code[end]);
                }
            }
            for used in crate_paths(&statement) {
                all.push((module.clone(), file.display().to_string(), i + 1, used));
            }
            i = end + 1;
        }
    }
    all
}

#[test]
fn every_module_uses_only_its_layer_and_the_layers_below() {
    let mut problems = vec![];
    let mut unknown = BTreeMap::new();
    for (module, file, line, used) in uses() {
        let (Some(from), Some(to)) = (layer_of(&module), layer_of(&used)) else {
            unknown.entry(if layer_of(&module).is_none() { module } else { used }).or_insert(file);
            continue;
        };
        if to > from {
            problems.push(format!(
                "{file}:{line}: `{module}` ({}) uses `{used}` ({}), a layer above",
                LAYERS[from].0, LAYERS[to].0
            ));
        }
        if module == "emulator" && used != "emulator" && !EMULATOR_USES.contains(&used.as_str()) {
            problems.push(format!("{file}:{line}: the emulator uses `{used}`; it may use only {EMULATOR_USES:?}"));
        }
    }
    for (module, file) in &unknown {
        problems.push(format!("`{module}` (seen in {file}) is in no layer: add it to LAYERS"));
    }
    assert!(problems.is_empty(), "the layout is broken:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_grouped_and_nested_paths() {
    assert_eq!(crate_paths("use crate::{exit, Error};"), ["exit", "error"]);
    assert_eq!(crate_paths("use crate::load::{lake, warehouse};"), ["load"]);
    assert_eq!(crate_paths("let x = crate::sync::run(a, crate::api::Client::new());"), ["sync", "api"]);
    assert_eq!(crate_paths("use crate::{fleet::job::Job, api::{Client, ApiKey}};"), ["fleet", "api"]);
    assert_eq!(crate_paths("use crate::{\n    sync::run,\n    api::{Client,\n ApiKey},\n};"), ["sync", "api"]);
    assert!(crate_paths("use creator_etl::cli::Cli;").is_empty());
    assert_eq!(first_segment(" load::lake"), "load");
}

/// The load stage's components, bottom to top (`src/load/<name>.rs` or `src/load/<name>/`): a
/// component uses only those below it (through `super::…` or `crate::load::…`), so no two of
/// them import each other, directly or round a circle. `mod.rs`, the stage's entry, uses them
/// all; its own items (the error, the config) are every component's.
const LOAD_LAYERS: &[&[&str]] = &[
    // Every table, declared once.
    &["catalog"],
    // The DuckDB files, their schema, reading values back.
    &["warehouse"],
    // The previous state merged and transformed; the Parquet tree.
    &["prepare", "parquet"],
    // The one commit of a batch (one organization's load is a batch of one).
    &["commit"],
    // The shared lake.
    &["lake"],
    // The fleet warehouse, loaded in batches through the commit.
    &["fleet_warehouse"],
];

/// Every use of a sibling component by a component of `src/load/`: (component, file, line, used).
fn load_uses() -> Vec<(String, String, usize, String)> {
    let load = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("load");
    let components: Vec<&str> = LOAD_LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    let mut files = vec![];
    rust_files(&load, &mut files);
    files.sort();
    let mut all = vec![];
    for file in files {
        let rel = file.strip_prefix(&load).unwrap();
        let component =
            rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if component == "mod" {
            continue;
        }
        // `super::` from `load/x.rs` is the load module; from `load/x/y.rs`, `super::super::` is.
        let depth = rel.components().count();
        let parent = "super::".repeat(depth);
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for prefix in [parent.as_str(), "crate::load::"] {
                let mut rest = code;
                while let Some(at) = rest.find(prefix) {
                    // `super::super::x` read from a nested file is not `super::x`.
                    let before = &rest[..at];
                    rest = &rest[at + prefix.len()..];
                    if prefix.starts_with("super") && before.ends_with("super::") {
                        continue;
                    }
                    let names: Vec<String> = match rest.strip_prefix('{') {
                        Some(group) => group.split('}').next().unwrap_or("").split(',').map(first_segment).collect(),
                        None => vec![first_segment(rest)],
                    };
                    for name in names {
                        if components.contains(&name.as_str()) && name != component {
                            all.push((component.clone(), file.display().to_string(), i + 1, name));
                        }
                    }
                }
            }
        }
    }
    all
}

#[test]
fn the_load_components_use_only_those_below_them() {
    let layer = |c: &str| LOAD_LAYERS.iter().position(|l| l.contains(&c));
    let mut problems = vec![];
    for (component, file, line, used) in load_uses() {
        match (layer(&component), layer(&used)) {
            (Some(from), Some(to)) if to < from => {}
            (Some(_), Some(_)) => problems.push(format!(
                "{file}:{line}: `load::{component}` uses `load::{used}`, which is not below it (LOAD_LAYERS)"
            )),
            _ => problems.push(format!("{file}:{line}: `load::{component}` is in no layer: add it to LOAD_LAYERS")),
        }
    }
    let load = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("load");
    for entry in std::fs::read_dir(&load).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let component = name.trim_end_matches(".rs");
        let code = entry.path().is_dir() || name.ends_with(".rs");
        if code && component != "mod" && layer(component).is_none() {
            problems.push(format!("`src/load/{name}` is in no layer: add it to LOAD_LAYERS"));
        }
    }
    let seen: std::collections::BTreeSet<String> = load_uses().into_iter().map(|(c, ..)| c).collect();
    assert!(seen.contains("fleet_warehouse") && seen.contains("commit"), "the checker reads the components: {seen:?}");
    assert!(problems.is_empty(), "the load layer's order is broken:\n{}", problems.join("\n"));
}
