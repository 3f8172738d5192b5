//! Which objects one controller instance serves, and the leader Lease of that set (docs/operating.md
//! "Sharding").
//!
//! An instance serves the objects whose labels match its selector: `--watch-label-selector` (a
//! Kubernetes label selector, as Flux's sharding spells it: `sharding.captf.io/key=shard-1` on a
//! shard, `!sharding.captf.io/key` on the instance that serves the rest) and Cluster API's
//! `--watch-filter` (objects labelled `cluster.x-k8s.io/watch-filter=<value>`), both at once when
//! both are set. Each distinct selector is its own set of objects, so it elects its own leader:
//! two shards never wait on one Lease, and two replicas of one shard never both write.

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

    proptest! {
        /// A Lease name is a DNS subdomain: whatever the selector, the name is short and legal.
        #[test]
        fn a_shards_leader_lease_name_is_always_a_valid_name(s in ".{0,300}") {
            let n = leader_lease_name(Some(&s));
            prop_assert!(n.len() <= 253);
            prop_assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        }
    }
}
