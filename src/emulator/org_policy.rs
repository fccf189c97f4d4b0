//! The `--org-policy K:SETTING,...` language: a numbered organization's own policy, as settings
//! laid over the emulator's rate policy, e.g. `3:hourly_cap=5,fault_rate=0.5`.
//!
//! Every setting is one row of [`SETTINGS`]: its usage as messages list it, the numbers it
//! accepts (none for a flag), and what it does to the policy. Adding a setting adds a row.

use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

use super::state::{OrgPolicy, RatePolicy};

/// One setting of the language.
#[derive(Debug)]
struct Setting {
    /// As written, with the form of its value (`hourly_cap=N`); a flag is its bare name.
    usage: &'static str,
    /// The numbers it accepts, bounds included; `None` makes it a flag, which takes no value.
    range: Option<(f64, f64)>,
    /// Lays the setting, with its number (zero for a flag), over the policy and its rate.
    apply: fn(&mut OrgPolicy, &mut RatePolicy, f64),
}

/// Every setting, in the order messages list them. Numbers are finite; counts and durations are
/// truncated to whole units.
static SETTINGS: &[Setting] = &[
    Setting {
        usage: "min_interval_ms=MS",
        range: Some((0.0, f64::MAX)),
        apply: |_, rate, v| rate.min_interval = Duration::from_millis(v as u64),
    },
    Setting {
        usage: "hourly_cap=N",
        range: Some((0.0, f64::MAX)),
        // Below one request there is no cap.
        apply: |_, rate, v| rate.hourly_cap = (v >= 1.0).then_some(v as u32),
    },
    Setting {
        usage: "cap_window_s=S",
        range: Some((1.0, f64::MAX)),
        apply: |_, rate, v| rate.cap_window = Duration::from_secs(v as u64),
    },
    Setting { usage: "fault_rate=P (0 to 1)", range: Some((0.0, 1.0)), apply: |p, _, v| p.fault_rate = Some(v) },
    Setting { usage: "revoked", range: None, apply: |p, _, _| p.revoked = true },
    Setting { usage: "skewed_totals", range: None, apply: |p, _, _| p.skewed_totals = true },
    Setting { usage: "no_content", range: None, apply: |p, _, _| p.no_content = true },
];

impl Setting {
    /// The name it is written with: its usage up to `=`.
    fn name(&self) -> &'static str {
        self.usage.split_once('=').map_or(self.usage, |(name, _)| name)
    }

    /// `name` or `name=VALUE` as this setting, with its number; `None` when it is not this
    /// setting or its value is not one it accepts.
    fn parse(&self, name: &str, value: &str) -> Option<f64> {
        if name != self.name() {
            return None;
        }
        match self.range {
            None => value.is_empty().then_some(0.0),
            Some((min, max)) => value.parse::<f64>().ok().filter(|v| v.is_finite() && (min..=max).contains(v)),
        }
    }
}

/// One `--org-policy` argument, parsed: the organization it is for and its settings, in order
/// (a later setting overrides an earlier one of the same name).
#[derive(Clone, Debug)]
pub struct OrgPolicySpec {
    /// The numbered organization, `K`.
    pub org: u32,
    settings: Vec<(&'static Setting, f64)>,
    /// The argument as given, for messages.
    text: String,
}

/// Why an `--org-policy` argument was refused; each message quotes the argument.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OrgPolicyError {
    #[error("`--org-policy` `{spec}`: expected `K:SETTING,...`")]
    Shape { spec: String },
    #[error("`--org-policy` `{spec}`: `{k}` is not an organization number")]
    NotANumber { spec: String, k: String },
    #[error("`--org-policy` `{spec}`: organization {k} is not served (`--organizations {organizations}`)")]
    NotServed { spec: String, k: u32, organizations: u32 },
    #[error("`--org-policy` `{spec}`: `{setting}` is not one of {usages}", usages = usages())]
    UnknownSetting { spec: String, setting: String },
}

/// Every setting's usage, for the message that refuses an unknown one.
fn usages() -> String {
    SETTINGS.iter().map(|s| s.usage).collect::<Vec<_>>().join(", ")
}

impl FromStr for OrgPolicySpec {
    type Err = OrgPolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let spec = || text.to_owned();
        let (k, settings) = text.split_once(':').ok_or_else(|| OrgPolicyError::Shape { spec: spec() })?;
        let org = k.trim().parse().map_err(|_| OrgPolicyError::NotANumber { spec: spec(), k: k.to_owned() })?;
        let settings = settings
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|setting| {
                let (name, value) = setting.split_once('=').unwrap_or((setting, ""));
                SETTINGS
                    .iter()
                    .find_map(|s| s.parse(name, value).map(|v| (s, v)))
                    .ok_or_else(|| OrgPolicyError::UnknownSetting { spec: spec(), setting: setting.to_owned() })
            })
            .collect::<Result<_, _>>()?;
        Ok(OrgPolicySpec { org, settings, text: text.to_owned() })
    }
}

impl OrgPolicySpec {
    /// The organization's policy: its settings laid over the emulator's rate policy `base`.
    /// Refused when the emulator serves fewer than `org` numbered organizations.
    pub fn policy(&self, base: &RatePolicy, organizations: u32) -> Result<OrgPolicy, OrgPolicyError> {
        if !(1..=organizations).contains(&self.org) {
            return Err(OrgPolicyError::NotServed { spec: self.text.clone(), k: self.org, organizations });
        }
        let mut policy = OrgPolicy::default();
        let mut rate = base.clone();
        for (setting, v) in &self.settings {
            (setting.apply)(&mut policy, &mut rate, *v);
        }
        policy.rate = Some(rate);
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The argument's organization and policy, or the message that refuses it.
    fn org_policy(spec: &str, base: &RatePolicy, organizations: u32) -> Result<(u32, OrgPolicy), String> {
        let spec: OrgPolicySpec = spec.parse().map_err(|e: OrgPolicyError| e.to_string())?;
        Ok((spec.org, spec.policy(base, organizations).map_err(|e| e.to_string())?))
    }

    fn base() -> RatePolicy {
        RatePolicy {
            min_interval: Duration::from_millis(2000),
            hourly_cap: Some(40),
            cap_window: Duration::from_secs(3600),
        }
    }

    #[test]
    fn org_policies_parse() {
        let base = base();
        let (k, p) = org_policy("3:hourly_cap=5,fault_rate=0.5,skewed_totals", &base, 4).unwrap();
        assert_eq!(k, 3);
        let rate = p.rate.unwrap();
        assert_eq!((rate.hourly_cap, rate.min_interval), (Some(5), Duration::from_millis(2000)));
        assert_eq!(p.fault_rate, Some(0.5));
        assert!(p.skewed_totals && !p.revoked && !p.no_content);
        let (_, p) = org_policy("2:no_content", &base, 4).unwrap();
        assert!(p.no_content && !p.skewed_totals);
        let (_, p) = org_policy("1:revoked,min_interval_ms=100,hourly_cap=0", &base, 1).unwrap();
        assert!(p.revoked);
        assert_eq!(p.rate.unwrap().hourly_cap, None);
        for (bad, why) in [
            ("5:revoked", "organization 5 is not served"),
            ("x:revoked", "not an organization number"),
            ("1:fault_rate=2", "`fault_rate=2` is not one of"),
            ("1:colour=red", "`colour=red` is not one of"),
            ("revoked", "expected `K:SETTING,...`"),
        ] {
            let e = org_policy(bad, &base, 4).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn settings_apply_in_order_over_the_base_rate() {
        let base = base();
        let (k, p) =
            org_policy(" 2 : cap_window_s=90 , ,min_interval_ms=2.9,hourly_cap=7,hourly_cap=3.5", &base, 2).unwrap();
        assert_eq!(k, 2);
        let rate = p.rate.unwrap();
        assert_eq!(rate.cap_window, Duration::from_secs(90));
        assert_eq!(rate.min_interval, Duration::from_millis(2), "truncated to whole milliseconds");
        assert_eq!(rate.hourly_cap, Some(3), "the later setting wins");
        assert_eq!((p.fault_rate, p.revoked, p.skewed_totals), (None, false, false));
        let (_, p) = org_policy("1:", &base, 1).unwrap();
        let rate = p.rate.expect("the base rate, even without settings");
        assert_eq!(
            (rate.min_interval, rate.hourly_cap, rate.cap_window),
            (base.min_interval, base.hourly_cap, base.cap_window)
        );
        assert!(org_policy("1:revoked=", &base, 1).unwrap().1.revoked, "an empty value is no value");
    }

    #[test]
    fn refusals_are_worded_exactly() {
        let list = "min_interval_ms=MS, hourly_cap=N, cap_window_s=S, fault_rate=P (0 to 1), revoked, skewed_totals, no_content";
        for (bad, message) in [
            ("revoked", "`--org-policy` `revoked`: expected `K:SETTING,...`".to_owned()),
            (" x :revoked", "`--org-policy` ` x :revoked`: ` x ` is not an organization number".to_owned()),
            ("0:revoked", "`--org-policy` `0:revoked`: organization 0 is not served (`--organizations 4`)".to_owned()),
            ("5:revoked", "`--org-policy` `5:revoked`: organization 5 is not served (`--organizations 4`)".to_owned()),
            ("1:revoked=yes", format!("`--org-policy` `1:revoked=yes`: `revoked=yes` is not one of {list}")),
            ("1: colour=red ", format!("`--org-policy` `1: colour=red `: `colour=red` is not one of {list}")),
            (
                "1:cap_window_s=0.5",
                format!("`--org-policy` `1:cap_window_s=0.5`: `cap_window_s=0.5` is not one of {list}"),
            ),
            (
                "1:min_interval_ms=-1",
                format!("`--org-policy` `1:min_interval_ms=-1`: `min_interval_ms=-1` is not one of {list}"),
            ),
            ("1:hourly_cap=inf", format!("`--org-policy` `1:hourly_cap=inf`: `hourly_cap=inf` is not one of {list}")),
            ("1:hourly_cap", format!("`--org-policy` `1:hourly_cap`: `hourly_cap` is not one of {list}")),
        ] {
            assert_eq!(org_policy(bad, &base(), 4).unwrap_err(), message, "{bad}");
        }
    }
}
