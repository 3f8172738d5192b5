//! Which objects one controller instance serves, and the leader Lease of that set (docs/operating.md
//! "Sharding").
//!
//! An instance serves the objects whose labels match its selector: `--watch-label-selector` (a
//! Kubernetes label selector, as Flux's sharding spells it: `sharding.captf.io/key=shard-1` on a
//! shard, `!sharding.captf.io/key` on the instance that serves the rest) and Cluster API's
//! `--watch-filter` (objects labelled `cluster.x-k8s.io/watch-filter=<value>`), both at once when
//! both are set. Each distinct selector is its own set of objects, so it elects its own leader:
//! two shards never wait on one Lease, and two replicas of one shard never both write.

use std::collections::{BTreeMap, BTreeSet};

use captf_shared::names::hex_sha256;

/// The label of Cluster API's `--watch-filter` convention.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// The label key CAPTF's chart shards by (`controller.shards`).
pub const SHARD_LABEL: &str = "sharding.captf.io/key";
/// The leader Lease of the instance that serves every object (no selector).
pub const LEADER_LEASE: &str = "captf-controller-leader";

/// Why a selector cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "--watch-filter {0:?} is not a valid label value (at most 63 characters: letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    WatchFilter(String),
    #[error("--watch-label-selector {0:?} is longer than {MAX_SELECTOR} characters")]
    TooLong(usize),
    #[error(
        "--watch-label-selector requirement {0:?} is not one the controller can check (key, !key, key=value, key==value, key!=value, key in (a,b), key notin (a,b))"
    )]
    Requirement(String),
}

/// The longest selector accepted (the API server's query limits are far above it; a selector this
/// long is a mistake).
pub const MAX_SELECTOR: usize = 1024;

/// The selector an instance watches its objects with: `label_selector` and the watch filter's
/// `cluster.x-k8s.io/watch-filter=<value>`, joined by a comma (both must match). Empty parts are
/// not set; `None`: every object. The label selector's own syntax is the API server's to judge
/// (the controller asks it once at start).
pub fn object_selector(label_selector: &str, watch_filter: &str) -> Result<Option<String>, SelectorError> {
    let label_selector = label_selector.trim();
    let watch_filter = watch_filter.trim();
    if label_selector.len() > MAX_SELECTOR {
        return Err(SelectorError::TooLong(label_selector.len()));
    }
    if !watch_filter.is_empty() && !is_label_value(watch_filter) {
        return Err(SelectorError::WatchFilter(watch_filter.to_string()));
    }
    let parts: Vec<String> = [
        (!label_selector.is_empty()).then(|| label_selector.to_string()),
        (!watch_filter.is_empty()).then(|| format!("{WATCH_FILTER_LABEL}={watch_filter}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok((!parts.is_empty()).then(|| parts.join(",")))
}

/// A Kubernetes label value: at most 63 characters, alphanumerics, `-`, `_`, `.`, beginning and
/// ending with an alphanumeric.
fn is_label_value(v: &str) -> bool {
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.len() <= 63
        && ok_end(v.chars().next())
        && ok_end(v.chars().last())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// One requirement of a label selector, as the API server reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    Equal(String, String),
    NotEqual(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = |k: &String| labels.get(k).map(String::as_str);
        match self {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::Absent(k) => !labels.contains_key(k),
            Requirement::Equal(k, v) => value(k) == Some(v.as_str()),
            Requirement::NotEqual(k, v) => value(k) != Some(v.as_str()),
            Requirement::In(k, vs) => value(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => value(k).is_none_or(|v| !vs.contains(v)),
        }
    }
}

/// The objects an instance serves, as a label selector it checks itself: the watch tells the
/// instance about an object, but a relabel can land between that event and the pass, so each
/// pass checks the object it read live (`serves`). Every requirement must match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectSelector(Vec<Requirement>);

impl ObjectSelector {
    /// Read a selector in the API server's syntax (as [`object_selector`] writes it). The
    /// set-based `key in (a,b)` and `key notin (a,b)` are read; the numeric `key>1` and `key<1`
    /// are refused, as the API server refuses them for labels of objects like these.
    pub fn parse(selector: &str) -> Result<ObjectSelector, SelectorError> {
        let mut out = Vec::new();
        for part in split_top_level(selector) {
            out.push(requirement(part.trim()).ok_or_else(|| SelectorError::Requirement(part.trim().to_string()))?);
        }
        Ok(ObjectSelector(out))
    }

    /// Whether an object with these labels is one of this instance's.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let none = BTreeMap::new();
        let labels = labels.unwrap_or(&none);
        self.0.iter().all(|r| r.matches(labels))
    }
}

/// Whether the instance with `selector` (`None`: every object) serves an object with `labels`.
pub fn serves(selector: Option<&ObjectSelector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    selector.is_none_or(|s| s.matches(labels))
}

/// The requirements of a selector: split at the commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A label key or value as the selector may name it (the API server checked the exact form).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn requirement(part: &str) -> Option<Requirement> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        return is_token(key).then(|| Requirement::Absent(key.to_string()));
    }
    if let Some((key, rest)) = part.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (negated, values) = if let Some(v) = rest.strip_prefix("notin") {
            (true, v)
        } else if let Some(v) = rest.strip_prefix("in") {
            (false, v)
        } else {
            return equality(part);
        };
        let values = values.trim().strip_prefix('(')?.strip_suffix(')')?;
        let set: BTreeSet<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if !is_token(key) || set.iter().any(|v| !v.is_empty() && !is_token(v)) {
            return None;
        }
        let key = key.to_string();
        return Some(if negated {
            Requirement::NotIn(key, set)
        } else {
            Requirement::In(key, set)
        });
    }
    equality(part)
}

/// `key`, `key=value`, `key==value` or `key!=value`.
fn equality(part: &str) -> Option<Requirement> {
    let (key, value, equal) = if let Some((k, v)) = part.split_once("!=") {
        (k, Some(v), false)
    } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        (k, Some(v), true)
    } else {
        (part, None, true)
    };
    let key = key.trim();
    if !is_token(key) {
        return None;
    }
    Some(match value.map(str::trim) {
        None => Requirement::Exists(key.to_string()),
        Some(v) if !v.is_empty() && !is_token(v) => return None,
        Some(v) if equal => Requirement::Equal(key.to_string(), v.to_string()),
        Some(v) => Requirement::NotEqual(key.to_string(), v.to_string()),
    })
}

/// The leader Lease of the instances serving `selector`: `captf-controller-leader` for every
/// object, `captf-controller-leader-<8 hex of the selector's SHA-256>` for a shard, so each set of
/// objects has one leader and the name is the same on every replica of that set.
pub fn leader_lease_name(selector: Option<&str>) -> String {
    match selector {
        None => LEADER_LEASE.to_string(),
        Some(s) => format!("{LEADER_LEASE}-{}", hex_sha256(s, 8)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_instance_without_a_selector_serves_every_object() {
        assert_eq!(object_selector("", "").unwrap(), None);
        assert_eq!(object_selector("  ", " ").unwrap(), None);
    }

    #[test]
    fn a_watch_filter_selects_cluster_apis_label_and_joins_the_label_selector() {
        assert_eq!(
            object_selector("", "team-a").unwrap().as_deref(),
            Some("cluster.x-k8s.io/watch-filter=team-a")
        );
        assert_eq!(
            object_selector("sharding.captf.io/key=shard-1", "team-a")
                .unwrap()
                .as_deref(),
            Some("sharding.captf.io/key=shard-1,cluster.x-k8s.io/watch-filter=team-a")
        );
        assert_eq!(
            object_selector("!sharding.captf.io/key", "").unwrap().as_deref(),
            Some("!sharding.captf.io/key")
        );
    }

    #[test]
    fn a_watch_filter_that_is_not_a_label_value_is_refused_by_name() {
        for bad in ["-a", "a-", "a b", "a,b", "a=b", &"x".repeat(64)] {
            let e = object_selector("", bad).unwrap_err();
            assert_eq!(e, SelectorError::WatchFilter(bad.to_string()));
            assert!(e.to_string().starts_with("--watch-filter "), "{e}");
        }
        assert!(object_selector("", &"x".repeat(63)).is_ok());
        assert_eq!(
            object_selector(&"a".repeat(MAX_SELECTOR + 1), ""),
            Err(SelectorError::TooLong(MAX_SELECTOR + 1))
        );
    }

    #[test]
    fn each_set_of_objects_elects_its_own_leader() {
        assert_eq!(leader_lease_name(None), "captf-controller-leader");
        let a = leader_lease_name(Some("sharding.captf.io/key=shard-1"));
        let b = leader_lease_name(Some("sharding.captf.io/key=shard-2"));
        let rest = leader_lease_name(Some("!sharding.captf.io/key"));
        assert!(a.starts_with("captf-controller-leader-") && a.len() == "captf-controller-leader-".len() + 8);
        assert_ne!(a, b);
        assert_ne!(a, rest);
        assert_eq!(a, leader_lease_name(Some("sharding.captf.io/key=shard-1")));
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_instance_serves_only_the_objects_its_selector_matches_when_it_reads_them_live() {
        let shard = ObjectSelector::parse("sharding.captf.io/key=shard-1").unwrap();
        let rest = ObjectSelector::parse("!sharding.captf.io/key").unwrap();
        let on_1 = labels(&[(SHARD_LABEL, "shard-1"), ("cluster.x-k8s.io/cluster-name", "c")]);
        let on_2 = labels(&[(SHARD_LABEL, "shard-2")]);
        let unsharded = labels(&[("cluster.x-k8s.io/cluster-name", "c")]);
        assert!(serves(Some(&shard), Some(&on_1)));
        assert!(!serves(Some(&shard), Some(&on_2)));
        assert!(!serves(Some(&shard), Some(&unsharded)));
        assert!(!serves(Some(&shard), None));
        assert!(serves(Some(&rest), Some(&unsharded)));
        assert!(serves(Some(&rest), None));
        assert!(!serves(Some(&rest), Some(&on_1)));
        // Without a selector, every object.
        assert!(serves(None, Some(&on_2)) && serves(None, None));
    }

    #[test]
    fn a_selector_reads_every_form_the_api_server_takes_for_labels() {
        let both =
            ObjectSelector::parse(&object_selector("sharding.captf.io/key=a", "team").unwrap().unwrap()).unwrap();
        assert!(both.matches(Some(&labels(&[(SHARD_LABEL, "a"), (WATCH_FILTER_LABEL, "team")]))));
        assert!(!both.matches(Some(&labels(&[(SHARD_LABEL, "a")]))));
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: [Case; 12] = [
            ("k==v", &[("k", "v")], true),
            ("k = v", &[("k", "v")], true),
            ("k!=v", &[("k", "w")], true),
            ("k!=v", &[], true),
            ("k!=v", &[("k", "v")], false),
            ("k", &[("k", "")], true),
            ("k", &[], false),
            ("k in (a, b)", &[("k", "b")], true),
            ("k in (a,b)", &[], false),
            ("k notin (a,b)", &[], true),
            ("k notin (a,b),x", &[("k", "c"), ("x", "1")], true),
            ("k notin (a,b)", &[("k", "a")], false),
        ];
        for (s, l, want) in cases {
            assert_eq!(
                ObjectSelector::parse(s).unwrap().matches(Some(&labels(l))),
                want,
                "{s} on {l:?}"
            );
        }
    }

    #[test]
    fn a_selector_the_controller_cannot_check_is_refused_by_its_requirement() {
        for bad in ["k>1", "a,,b", "k in a", "k in (a", "=v", "!", "k=v w", "a,"] {
            let e = ObjectSelector::parse(bad).unwrap_err();
            assert!(matches!(e, SelectorError::Requirement(_)), "{bad}: {e}");
            assert!(e.to_string().starts_with("--watch-label-selector requirement"), "{e}");
        }
    }

    proptest! {
        /// Whatever the selector says, reading it never panics.
        #[test]
        fn reading_any_selector_gives_a_selector_or_an_error(s in ".{0,200}") {
            let _ = ObjectSelector::parse(&s);
        }

        /// An object labelled with a shard's key is served by that shard and by no other, nor
        /// by the instance for the rest.
        #[test]
        fn each_object_is_served_by_exactly_one_of_the_charts_instances(label in proptest::option::of(0usize..4)) {
            let names = ["a", "b", "c", "d"];
            let mut instances: Vec<ObjectSelector> = names
                .iter()
                .map(|n| ObjectSelector::parse(&format!("{SHARD_LABEL}={n}")).unwrap())
                .collect();
            instances.push(ObjectSelector::parse(&format!("!{SHARD_LABEL}")).unwrap());
            let l = labels(&label.map(|i| (SHARD_LABEL, names[i])).into_iter().collect::<Vec<_>>());
            prop_assert_eq!(instances.iter().filter(|s| s.matches(Some(&l))).count(), 1);
        }

        /// A Lease name is a DNS subdomain: whatever the selector, the name is short and legal.
        #[test]
        fn a_shards_leader_lease_name_is_always_a_valid_name(s in ".{0,300}") {
            let n = leader_lease_name(Some(&s));
            prop_assert!(n.len() <= 253);
            prop_assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        }
    }
}
