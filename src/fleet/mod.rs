//! A fleet of organizations: one TOML file, many organizations, each with its own key
//! and budget. This part reads and validates the fleet file; running the fleet builds on it.
//!
//! The file has a `[defaults]` table and one `[[organization]]` entry per organization. It is
//! read into a TOML table and checked key by key, so that every problem is reported at once,
//! before anything is sent: unknown keys, wrong types, duplicate names, a missing key variable
//! or file, and two organizations sharing one API key (they would share one budget). A command
//! that sends nothing (`fleet status`) checks the file alone ([`Check::FileOnly`]): it reads no
//! key and opens no actions file.

pub mod batch;
pub mod job;
pub mod observe;
pub mod report;
pub mod run;
pub mod status;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::api::models::ApplicationStatus;
use crate::api::ApiKey;

/// Settings an organization may override, and `[defaults]` may set.
const SETTINGS: [&str; 8] =
    ["base_url", "min_interval_ms", "hourly_cap", "statuses", "campaign_id", "since_days", "lookback_days", "actions"];

/// Where an organization's key comes from; never the key itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    Env(String),
    File(PathBuf),
}

/// The settings of one organization, its defaults applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub base_url: Option<String>,
    pub min_interval_ms: Option<u64>,
    pub hourly_cap: Option<u64>,
    pub statuses: Option<Vec<ApplicationStatus>>,
    pub campaign_id: Option<i64>,
    pub since_days: Option<u64>,
    pub lookback_days: Option<u64>,
    /// A reviewed CSV, relative paths resolved against the fleet file's directory.
    pub actions: Option<PathBuf>,
}

/// One organization of the fleet, validated.
#[derive(Clone, Debug)]
pub struct Organization {
    pub name: String,
    pub key_source: KeySource,
    /// The key, read under [`Check::Sync`]; `None` under [`Check::FileOnly`].
    pub key: Option<ApiKey>,
    pub settings: Settings,
}

/// How much of a fleet file a command checks.
#[derive(Clone, Copy)]
pub enum Check<'a> {
    /// Everything a sync needs: every key read (a `key_env` variable through the function, the
    /// process environment in the binary; a `key_file` from disk), no key shared by two
    /// organizations, every actions file present.
    Sync(&'a dyn Fn(&str) -> Option<String>),
    /// The file alone: names, key sources and settings. No key is read and no actions file is
    /// opened (`fleet status`, which sends nothing).
    FileOnly,
}

/// A validated fleet file.
#[derive(Clone, Debug)]
pub struct Fleet {
    pub organizations: Vec<Organization>,
}

/// One of `count` shards of a fleet: `--shard INDEX/COUNT`, `INDEX` from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `I/N` with `0 <= I < N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let bad = || format!("`--shard` `{text}` must be INDEX/COUNT with 0 <= INDEX < COUNT, e.g. `0/4`");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (i.trim().parse::<u32>().map_err(|_| bad())?, n.trim().parse::<u32>().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether the organization `name` is in this shard: a stable hash of the name (32-bit
    /// FNV-1a), modulo the count. The same name lands in the same shard on every machine and
    /// release, so N processes cover a fleet exactly once.
    pub fn contains(&self, name: &str) -> bool {
        crate::api::fnv1a(name.as_bytes()) % self.count == self.index
    }
}

impl Fleet {
    /// The organizations `--only` names (all when `None`) that fall in `shard`, in file order.
    /// A name in `only` that the file does not have is an error.
    pub fn select(&self, only: Option<&[String]>, shard: Option<Shard>) -> Result<Vec<&Organization>, Vec<String>> {
        if let Some(only) = only {
            let unknown: Vec<String> = only
                .iter()
                .filter(|n| !self.organizations.iter().any(|o| &o.name == *n))
                .map(|n| format!("`--only`: no organization `{n}` in the fleet file"))
                .collect();
            if !unknown.is_empty() {
                return Err(unknown);
            }
        }
        Ok(self
            .organizations
            .iter()
            .filter(|o| only.is_none_or(|only| only.contains(&o.name)))
            .filter(|o| shard.is_none_or(|s| s.contains(&o.name)))
            .collect())
    }
}

/// Reads and validates a fleet file, as much as `check` asks. Every problem is returned at once.
pub fn load(path: &Path, check: Check) -> Result<Fleet, Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("cannot read `{}`: {e}", path.display())])?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, base, check)
}

/// Validates a fleet file's text; relative paths are resolved against `base`.
pub fn parse(text: &str, base: &Path, check: Check) -> Result<Fleet, Vec<String>> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| vec![format!("not valid TOML: {e}")])?;
    let mut problems = vec![];
    for key in table.keys().filter(|k| *k != "defaults" && *k != "organization") {
        problems.push(format!("unknown key `{key}`; the file has `[defaults]` and `[[organization]]` entries"));
    }
    let defaults = match table.get("defaults") {
        None => Settings::default(),
        Some(toml::Value::Table(t)) => {
            for key in t.keys().filter(|k| !SETTINGS.contains(&k.as_str())) {
                let hint = if key.starts_with("key_") { ": each organization names its own key" } else { "" };
                problems.push(format!("`[defaults]`: unknown key `{key}`{hint}"));
            }
            settings(t, "`[defaults]`", base, &Settings::default(), check, &mut problems)
        }
        Some(_) => {
            problems.push("`defaults` must be a table: `[defaults]`".into());
            Settings::default()
        }
    };
    let entries: &[toml::Value] = match table.get("organization") {
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            problems.push("`organization` must be a list of tables: `[[organization]]`".into());
            &[]
        }
        None => &[],
    };
    if entries.is_empty() && problems.is_empty() {
        problems.push("no `[[organization]]` entries".into());
    }
    let mut organizations = vec![];
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    // Keys are compared as keys: a fingerprint's 32 bits would take two distinct keys for one.
    let mut keys: HashMap<ApiKey, String> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some(t) = entry.as_table() else {
            problems.push(format!("organization {}: must be a table", i + 1));
            continue;
        };
        let name = match t.get("name") {
            Some(toml::Value::String(n)) if crate::load::lake::valid_org(n) => n.clone(),
            Some(toml::Value::String(n)) => {
                problems.push(format!(
                    "organization {}: `name` `{n}` is not a slug (lowercase letters, digits, `-`, `_`, at most 63)",
                    i + 1
                ));
                n.clone()
            }
            _ => {
                problems.push(format!("organization {}: `name` is missing (a slug, unique in the file)", i + 1));
                format!("#{}", i + 1)
            }
        };
        let at = format!("organization `{name}`");
        if let Some(first) = names.insert(name.clone(), i + 1) {
            problems.push(format!("{at}: the name is used by organization {first} too; names are unique"));
        }
        for key in t
            .keys()
            .filter(|k| !SETTINGS.contains(&k.as_str()) && !["name", "key_env", "key_file"].contains(&k.as_str()))
        {
            let hint = if key == "key" || key == "api_key" {
                ": name the key's source, `key_env` or `key_file`, never the key"
            } else {
                ""
            };
            problems.push(format!("{at}: unknown key `{key}`{hint}"));
        }
        let source = match (t.get("key_env"), t.get("key_file")) {
            (Some(toml::Value::String(v)), None) => Some(KeySource::Env(v.clone())),
            (None, Some(toml::Value::String(f))) => Some(KeySource::File(base.join(f))),
            (Some(_), Some(_)) => {
                problems.push(format!("{at}: give one of `key_env` and `key_file`, not both"));
                None
            }
            (None, None) => {
                problems.push(format!("{at}: no key: give `key_env = \"VAR\"` or `key_file = \"path\"`"));
                None
            }
            _ => {
                problems.push(format!("{at}: `key_env` and `key_file` are text"));
                None
            }
        };
        let key = match (&source, check) {
            (_, Check::FileOnly) | (None, _) => None,
            (Some(KeySource::Env(var)), Check::Sync(env)) => match env(var) {
                Some(v) => ApiKey::new(&v, &format!("`{var}`")).map_err(|e| problems.push(format!("{at}: {e}"))).ok(),
                None => {
                    problems.push(format!("{at}: the key variable `{var}` is not set"));
                    None
                }
            },
            (Some(KeySource::File(path)), Check::Sync(_)) => {
                ApiKey::resolve(Some(path), None).map_err(|e| problems.push(format!("{at}: {e}"))).ok()
            }
        };
        if let Some(key) = &key {
            if let Some(other) = keys.insert(key.clone(), name.clone()) {
                problems.push(format!(
                    "{at}: uses the same API key as organization `{other}`; a key's rate budget is its own, so two organizations cannot share one"
                ));
            }
        }
        let settings = settings(t, &at, base, &defaults, check, &mut problems);
        if let Some(source) = source {
            organizations.push(Organization { name, key_source: source, key, settings });
        }
    }
    if problems.is_empty() {
        Ok(Fleet { organizations })
    } else {
        Err(problems)
    }
}

/// Reads the settings of a table over `defaults`; under [`Check::Sync`], an actions file must
/// exist.
fn settings(
    t: &toml::Table,
    at: &str,
    base: &Path,
    defaults: &Settings,
    check: Check,
    problems: &mut Vec<String>,
) -> Settings {
    let mut s = defaults.clone();
    let mut count = |key: &str, max: u64| -> Option<u64> {
        match t.get(key) {
            None => None,
            Some(toml::Value::Integer(n)) if (0..=max as i64).contains(n) => Some(*n as u64),
            Some(_) => {
                problems.push(format!("{at}: `{key}` must be a whole number from 0 to {max}"));
                None
            }
        }
    };
    s.min_interval_ms = count("min_interval_ms", 3_600_000).or(s.min_interval_ms);
    s.hourly_cap = count("hourly_cap", 1_000_000).or(s.hourly_cap);
    s.since_days = count("since_days", 36_500).or(s.since_days);
    s.lookback_days = count("lookback_days", 3_650).or(s.lookback_days);
    s.campaign_id = count("campaign_id", i64::MAX as u64).map(|n| n as i64).or(s.campaign_id);
    match t.get("base_url") {
        None => {}
        Some(toml::Value::String(u))
            if reqwest::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) =>
        {
            s.base_url = Some(u.clone())
        }
        Some(_) => problems.push(format!("{at}: `base_url` must be an http(s) URL")),
    }
    match t.get("statuses") {
        None => {}
        Some(toml::Value::Array(list)) => {
            if list.iter().any(|v| !v.is_str()) {
                problems.push(format!("{at}: `statuses` must be a list of text, e.g. [\"pending\", \"accepted\"]"));
            }
            let (known, unknown) = ApplicationStatus::parse_known(list.iter().filter_map(toml::Value::as_str));
            for st in unknown {
                problems.push(format!(
                    "{at}: `statuses`: `{st}` is not a status; allowed: {}",
                    ApplicationStatus::known_list()
                ));
            }
            if list.is_empty() {
                problems.push(format!("{at}: `statuses` is empty; leave it out for all six"));
            }
            s.statuses = Some(known);
        }
        Some(_) => problems.push(format!("{at}: `statuses` must be a list, e.g. [\"pending\", \"accepted\"]")),
    }
    match t.get("actions") {
        None => {}
        Some(toml::Value::String(f)) => {
            let path = base.join(f);
            if matches!(check, Check::Sync(_)) && !path.is_file() {
                problems.push(format!("{at}: `actions` file `{}` does not exist", path.display()));
            }
            s.actions = Some(path);
        }
        Some(_) => problems.push(format!("{at}: `actions` must be a path")),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "ACME_KEY" => Some("key-acme-1".into()),
            "BRAND_KEY" => Some("key-brand-2".into()),
            "SAME_AS_ACME" => Some("key-acme-1".into()),
            _ => None,
        }
    }

    #[test]
    fn a_valid_fleet_applies_its_defaults() {
        let text = r#"
            [defaults]
            hourly_cap = 40
            statuses = ["pending", "accepted"]
            [[organization]]
            name = "acme"
            key_env = "ACME_KEY"
            [[organization]]
            name = "brand-2"
            key_env = "BRAND_KEY"
            hourly_cap = 100
            since_days = 30
        "#;
        let fleet = parse(text, Path::new("/etc/fleet"), Check::Sync(&env)).unwrap();
        assert_eq!(fleet.organizations.len(), 2);
        let (a, b) = (&fleet.organizations[0], &fleet.organizations[1]);
        assert_eq!((a.name.as_str(), a.settings.hourly_cap), ("acme", Some(40)));
        assert_eq!((b.settings.hourly_cap, b.settings.since_days), (Some(100), Some(30)));
        assert_eq!(b.settings.statuses.as_ref().map(Vec::len), Some(2));
        assert_eq!(a.key_source, KeySource::Env("ACME_KEY".into()));
        assert!(!format!("{fleet:?}").contains("key-acme-1"), "the key never shows");
    }

    #[test]
    fn shards_cover_a_fleet_exactly_once() {
        let names: Vec<String> = (0..500).map(|i| format!("org-{i}")).collect();
        for n in [1, 2, 3, 4, 7, 16] {
            let mut seen = vec![0; names.len()];
            for i in 0..n {
                let shard = Shard::parse(&format!("{i}/{n}")).unwrap();
                for (k, name) in names.iter().enumerate() {
                    seen[k] += u32::from(shard.contains(name));
                }
            }
            assert!(seen.iter().all(|c| *c == 1), "{n} shards");
        }
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_example_fleet_file_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let env = |var: &str| Some(format!("key-of-{var}"));
        let fleet = load(&dir.join("fleet.toml"), Check::Sync(&env)).unwrap();
        let names: Vec<&str> = fleet.organizations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["acme", "brand-2"]);
        assert_eq!(fleet.organizations[1].settings.actions, Some(dir.join("reviewed.csv")));
        assert_eq!(fleet.organizations[0].settings.min_interval_ms, Some(2000));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
            colour = "blue"
            [defaults]
            key_env = "ACME_KEY"
            hourly_cap = -1
            [[organization]]
            name = "acme"
            key_env = "ACME_KEY"
            [[organization]]
            name = "acme"
            key_env = "BRAND_KEY"
            [[organization]]
            name = "twin"
            key_env = "SAME_AS_ACME"
            [[organization]]
            name = "Bad Name"
            key = "sk-live-123"
            [[organization]]
            name = "ghost"
            key_env = "NOT_SET"
            statuses = ["pending", "maybe"]
        "#;
        let problems = parse(text, Path::new("/"), Check::Sync(&env)).unwrap_err();
        let all = problems.join("\n");
        for want in [
            "unknown key `colour`",
            "`[defaults]`: unknown key `key_env`: each organization names its own key",
            "`[defaults]`: `hourly_cap` must be a whole number",
            "organization `acme`: the name is used by organization 1 too",
            "organization `twin`: uses the same API key as organization `acme`",
            "`name` `Bad Name` is not a slug",
            "unknown key `key`: name the key's source",
            "organization `Bad Name`: no key",
            "the key variable `NOT_SET` is not set",
            "`statuses`: `maybe` is not a status",
        ] {
            assert!(all.contains(want), "missing {want:?} in:\n{all}");
        }
        assert!(!all.contains("key-acme-1") && !all.contains("sk-live-123"), "no key text in messages");
        let e = parse("[[organization]\n", Path::new("/"), Check::Sync(&env)).unwrap_err();
        assert!(e[0].starts_with("not valid TOML"), "{e:?}");
        assert_eq!(parse("", Path::new("/"), Check::Sync(&env)).unwrap_err(), ["no `[[organization]]` entries"]);
    }

    #[test]
    fn distinct_keys_with_one_fingerprint_are_not_shared() {
        // Two keys whose 32-bit fingerprints collide (FNV-1a 0xaa0aede4).
        let env = |var: &str| match var {
            "A" => Some("key-901258".to_owned()),
            "B" => Some("key-1540052".to_owned()),
            "C" => Some("key-901258".to_owned()),
            _ => None,
        };
        let a = ApiKey::new("key-901258", "test").unwrap();
        let b = ApiKey::new("key-1540052", "test").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint(), "the pair collides");
        let two = "[[organization]]\nname = \"a\"\nkey_env = \"A\"\n[[organization]]\nname = \"b\"\nkey_env = \"B\"\n";
        assert_eq!(parse(two, Path::new("/"), Check::Sync(&env)).unwrap().organizations.len(), 2);
        let same = format!("{two}[[organization]]\nname = \"c\"\nkey_env = \"C\"\n");
        let problems = parse(&same, Path::new("/"), Check::Sync(&env)).unwrap_err().join("\n");
        assert!(problems.contains("organization `c`: uses the same API key as organization `a`"), "{problems}");
        assert!(!problems.contains("key-901258") && !problems.contains(&a.fingerprint()), "{problems}");
    }

    #[test]
    fn the_file_alone_needs_no_key_and_no_actions_file() {
        let text = r#"
            [[organization]]
            name = "acme"
            key_env = "NOT_SET"
            actions = "missing.csv"
            [[organization]]
            name = "brand"
            key_file = "/nonexistent/key"
        "#;
        let fleet = parse(text, Path::new("/etc/fleet"), Check::FileOnly).unwrap();
        assert_eq!(fleet.organizations.len(), 2);
        assert!(fleet.organizations.iter().all(|o| o.key.is_none()));
        let problems = parse(text, Path::new("/etc/fleet"), Check::Sync(&env)).unwrap_err().join("\n");
        for want in
            ["`NOT_SET` is not set", "`actions` file `/etc/fleet/missing.csv` does not exist", "/nonexistent/key"]
        {
            assert!(problems.contains(want), "missing {want:?} in {problems}");
        }
        // The file's own problems are still reported.
        let bad = "[[organization]]\nname = \"x\"\n";
        assert!(parse(bad, Path::new("/"), Check::FileOnly).unwrap_err()[0].contains("no key"));
    }
}
