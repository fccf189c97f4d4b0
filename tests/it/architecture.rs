//! The layout proves itself: every path in `src/` to this crate's items (`crate::…`, `super::…`,
//! `self::…`, in `use` trees and in code) names a module of the same layer or a layer below, and
//! no sibling modules import each other round a circle. The tables below are the map the
//! manual's development chapter points at.

use std::collections::{BTreeMap, BTreeSet};
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
    ("cli and main", &["cli", "manual", "main", "lib"]),
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

/// The module path of a file of `src/`: `src/load/lake.rs` → `load::lake`, `src/load/catalog/mod.rs`
/// → `load::catalog`, `src/lib.rs` → the root (empty), `src/main.rs` → `main` (its own crate).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut path: Vec<String> =
        rel.components().map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if path.last().is_some_and(|l| l == "mod" || l == "lib") {
        path.pop();
    }
    path
}

/// Rust code without comments, string and char literals (each replaced by a space), so that
/// braces and `::` inside them are not read as code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            i += 2;
            while i < c.len() && !(c[i] == '*' && c.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if at(0) == 'r'
            && (at(1) == '"' || (at(1) == '#' && (at(2) == '"' || at(2) == '#')))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // A raw string: r"…", r#"…"#, r##"…"##.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1;
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            while j < c.len() && c[j..].iter().take(close.len()).ne(close.iter()) {
                j += 1;
            }
            i = j + close.len();
            out.push(' ');
        } else if at(0) == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if at(0) == '\'' && (at(1) == '\\' || at(2) == '\'') {
            // A char literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The paths a `use` tree names, with groups expanded: `a::{b, c::{d, e}}` → a::b, a::c::d, a::c::e
/// (a renaming `x as y` names `x`).
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn go(prefix: &[String], tree: &str, into: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        let mut path = prefix.to_vec();
        match tree.find('{') {
            Some(open) => {
                path.extend(tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
                let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
                let (mut depth, mut from) = (0, 0);
                for (k, b) in inner.char_indices() {
                    match b {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            go(&path, &inner[from..k], into);
                            from = k + 1;
                        }
                        _ => {}
                    }
                }
                go(&path, &inner[from..], into);
            }
            None if !tree.is_empty() => {
                let named = tree.split_whitespace().next().unwrap_or("");
                path.extend(named.split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
                into.push(path);
            }
            None => {}
        }
    }
    let mut out = vec![];
    go(&[], tree, &mut out);
    out
}

/// A path as written, made absolute from the module it is written in, when it starts with
/// `crate`, `super` or `self` (other paths name other crates or are relative to a child).
fn absolute(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => vec![],
        "self" => from.to_vec(),
        "super" => from.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop()?;
        while rest.first().is_some_and(|s| s == "super") {
            base.pop()?;
            rest = &rest[1..];
        }
    }
    base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
    Some(base)
}

/// Every path to this crate's items in `src/`: (file, module it is written in, absolute path).
/// Inline modules (`mod tests { … }`) count as modules of their own.
fn uses() -> Vec<(String, Vec<String>, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let mut all = vec![];
    for file in files {
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        let module = module_path(&src, &file);
        let shown = file.strip_prefix(&src).unwrap().display().to_string();
        // Walk the code: track inline modules by their braces; read `use` trees up to `;`, and
        // other `crate::`/`super::`/`self::` paths as words joined by `::`.
        let chars: Vec<char> = code.chars().collect();
        let mut stack: Vec<(String, usize)> = vec![];
        let mut depth = 0usize;
        let mut i = 0;
        let word_at =
            |i: usize| -> String { chars[i..].iter().take_while(|c| c.is_alphanumeric() || **c == '_').collect() };
        let starts_word = |i: usize| i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        while i < chars.len() {
            let here: Vec<String> = module.iter().cloned().chain(stack.iter().map(|(m, _)| m.clone())).collect();
            match chars[i] {
                '{' => {
                    depth += 1;
                    i += 1;
                    continue;
                }
                '}' => {
                    if stack.last().is_some_and(|(_, d)| *d == depth) {
                        stack.pop();
                    }
                    depth = depth.saturating_sub(1);
                    i += 1;
                    continue;
                }
                _ => {}
            }
            if !starts_word(i) || !(chars[i].is_alphabetic() || chars[i] == '_') {
                i += 1;
                continue;
            }
            let word = word_at(i);
            if word == "mod" {
                let rest: String = chars[i + 3..].iter().take_while(|c| **c != ';' && **c != '{').collect();
                let next = chars.get(i + 3 + rest.chars().count()).copied();
                if next == Some('{') {
                    stack.push((rest.trim().to_owned(), depth + 1));
                    i += 3 + rest.chars().count();
                    continue;
                }
            }
            if word == "use" {
                let tree: String = chars[i + 3..].iter().take_while(|c| **c != ';').collect();
                for path in expand_use(&tree) {
                    if let Some(abs) = absolute(&here, &path) {
                        all.push((shown.clone(), here.clone(), abs));
                    }
                }
                i += 3 + tree.chars().count();
                continue;
            }
            if matches!(word.as_str(), "crate" | "super" | "self") {
                // A path: words joined by `::` (a `{` here would be a struct literal, not a group).
                let mut path = vec![];
                let mut j = i;
                loop {
                    let w = word_at(j);
                    if w.is_empty() {
                        break;
                    }
                    j += w.chars().count();
                    path.push(w);
                    if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                        j += 2;
                    } else {
                        break;
                    }
                }
                if path.len() > 1 {
                    if let Some(abs) = absolute(&here, &path) {
                        all.push((shown.clone(), here.clone(), abs));
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            i += word.chars().count();
        }
    }
    all
}

/// The top-level module a module path belongs to (`lib` for the crate root; the root re-exports
/// the error, so `crate::Error` is the `error` module's).
fn top(path: &[String]) -> String {
    match path.first().map(String::as_str) {
        None => "lib".to_owned(),
        Some("Error") => "error".to_owned(),
        Some(m) => m.to_owned(),
    }
}

/// The edge between siblings that a use makes: from the module's child and the used path's child
/// of their deepest common parent, when both are modules of that parent (not the parent itself).
fn sibling_edge(from: &[String], to: &[String]) -> Option<(Vec<String>, String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    let (a, b) = (from.get(common)?, to.get(common)?);
    Some((from[..common].to_vec(), a.clone(), b.clone()))
}

#[test]
fn every_module_uses_only_its_layer_and_the_layers_below() {
    let mut problems = vec![];
    let mut unknown = BTreeMap::new();
    for (file, here, used_path) in uses() {
        let (module, used) = (top(&here), top(&used_path));
        let (Some(from), Some(to)) = (layer_of(&module), layer_of(&used)) else {
            unknown.entry(if layer_of(&module).is_none() { module } else { used }).or_insert(file);
            continue;
        };
        if to > from {
            problems.push(format!(
                "{file}: `{}` ({}) uses `{}` ({}), a layer above",
                here.join("::"),
                LAYERS[from].0,
                used_path.join("::"),
                LAYERS[to].0
            ));
        }
        if module == "emulator" && used != "emulator" && !EMULATOR_USES.contains(&used.as_str()) {
            problems.push(format!("{file}: the emulator uses `{used}`; it may use only {EMULATOR_USES:?}"));
        }
    }
    for (module, file) in &unknown {
        problems.push(format!("`{module}` (seen in {file}) is in no layer: add it to LAYERS"));
    }
    assert!(problems.is_empty(), "the layout is broken:\n{}", problems.join("\n"));
}

/// Which sibling uses which, per parent module: parent → (user → (used → a file where it is)).
type Siblings = BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>>;

/// The uses between sibling modules (files, folders and inline modules of one parent).
fn sibling_uses() -> Siblings {
    let all = uses();
    let modules: BTreeSet<Vec<String>> = all.iter().map(|(_, here, _)| here.clone()).collect();
    let mut graph = Siblings::new();
    for (file, here, used) in all {
        let Some((parent, a, b)) = sibling_edge(&here, &used) else { continue };
        let is_module =
            |name: &str| modules.contains(&parent.iter().cloned().chain([name.to_owned()]).collect::<Vec<_>>());
        if a != b && is_module(&a) && is_module(&b) {
            graph.entry(parent).or_default().entry(a).or_default().entry(b).or_insert(file);
        }
    }
    graph
}

/// A circle in one parent's graph, if any, as the modules round it.
fn circle(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            return Some(path[at..].iter().cloned().chain([node.to_owned()]).collect());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| visit(start, edges, &mut vec![], &mut done))
}

#[test]
fn no_sibling_modules_import_each_other_round_a_circle() {
    let graph = sibling_uses();
    assert!(
        graph.get(&vec!["load".to_owned()]).is_some_and(|e| e.contains_key("commit")),
        "the checker reads siblings"
    );
    let mut problems = vec![];
    for (parent, edges) in &graph {
        if let Some(round) = circle(edges) {
            let at: Vec<String> =
                round.windows(2).map(|w| format!("{} → {} ({})", w[0], w[1], edges[&w[0]][&w[1]])).collect();
            problems.push(format!("in `crate::{}`: {}", parent.join("::"), at.join(", ")));
        }
    }
    assert!(problems.is_empty(), "sibling modules import each other round a circle:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_reads_paths_as_rust_does() {
    let strings = |v: Vec<Vec<String>>| v.into_iter().map(|p| p.join("::")).collect::<Vec<_>>();
    assert_eq!(strings(expand_use(" crate::{exit, Error}")), ["crate::exit", "crate::Error"]);
    assert_eq!(
        strings(expand_use("crate::{\n fleet::job::Job,\n api::{Client, key::{ApiKey as K}},\n}")),
        ["crate::fleet::job::Job", "crate::api::Client", "crate::api::key::ApiKey"]
    );
    assert_eq!(
        strings(expand_use("super::{catalog, warehouse::Warehouse}")),
        ["super::catalog", "super::warehouse::Warehouse"]
    );
    let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    // `super::` from `load/catalog/mod.rs` (module load::catalog) is `load`; from its inline tests, catalog.
    assert_eq!(absolute(&path("load::catalog"), &path("super::warehouse::X")), Some(path("load::warehouse::X")));
    assert_eq!(absolute(&path("load::catalog::tests"), &path("super::super::commit")), Some(path("load::commit")));
    assert_eq!(absolute(&path("load::commit"), &path("self::inner")), Some(path("load::commit::inner")));
    assert_eq!(absolute(&path("load"), &path("polars::prelude")), None);
    let src = Path::new("/s");
    assert_eq!(module_path(src, Path::new("/s/load/catalog/mod.rs")), path("load::catalog"));
    assert_eq!(module_path(src, Path::new("/s/load/lake.rs")), path("load::lake"));
    assert!(module_path(src, Path::new("/s/lib.rs")).is_empty());
    assert_eq!(top(&path("Error")), "error");
    assert_eq!(
        sibling_edge(&path("load::commit"), &path("load::catalog::Table")),
        Some((path("load"), "commit".to_owned(), "catalog".to_owned()))
    );
    assert_eq!(sibling_edge(&path("load"), &path("load::commit::x")), None);
    // Strings, chars and comments are not code; lifetimes are.
    assert_eq!(
        code_only("let a = \"crate::x {\"; // super::y\nlet b = '{'; fn f<'a>()"),
        "let a =  ; \nlet b =  ; fn f<'a>()"
    );
    assert_eq!(code_only("r#\"crate::{\"# x"), "  x");
    // A circle is found, and a tree is not one.
    let edges = |pairs: &[(&str, &str)]| {
        let mut e: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (a, b) in pairs {
            e.entry((*a).to_owned()).or_default().insert((*b).to_owned(), String::new());
        }
        e
    };
    assert_eq!(
        circle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(circle(&edges(&[("a", "b"), ("a", "c"), ("b", "c")])), None);
}

/// The load stage's components, bottom to top (`src/load/<name>.rs` or `src/load/<name>/`): a
/// component uses only those below it, so no two of them import each other, directly or round a
/// circle. `mod.rs`, the stage's entry, uses them all; its own items (the error, the config) are
/// every component's.
const LOAD_LAYERS: &[&[&str]] = &[
    // Every table, declared once.
    &["catalog"],
    // The DuckDB files, their schema, reading values back.
    &["warehouse"],
    // The previous state merged and transformed; the Parquet tree; a frame's fingerprint.
    &["prepare", "parquet", "fingerprint"],
    // The one commit of a batch (one organization's load is a batch of one).
    &["commit"],
    // The shared lake.
    &["lake"],
    // The fleet warehouse, loaded in batches through the commit.
    &["fleet_warehouse"],
];

#[test]
fn the_load_components_use_only_those_below_them() {
    let layer = |c: &str| LOAD_LAYERS.iter().position(|l| l.contains(&c));
    let graph = sibling_uses();
    let edges = graph.get(&vec!["load".to_owned()]).cloned().unwrap_or_default();
    assert!(
        edges.contains_key("fleet_warehouse") && edges.contains_key("commit"),
        "the checker reads the components: {edges:?}"
    );
    let mut problems = vec![];
    for (component, used) in &edges {
        for (name, file) in used {
            match (layer(component), layer(name)) {
                (Some(from), Some(to)) if to < from => {}
                (Some(_), Some(_)) => problems.push(format!(
                    "{file}: `load::{component}` uses `load::{name}`, which is not below it (LOAD_LAYERS)"
                )),
                _ => problems.push(format!(
                    "{file}: `load::{component}` or `load::{name}` is in no layer: add it to LOAD_LAYERS"
                )),
            }
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
    assert!(problems.is_empty(), "the load layer's order is broken:\n{}", problems.join("\n"));
}
