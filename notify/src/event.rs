//! What a notification is about: the events, their names, their deduplication keys and the
//! text a person reads.

use std::fmt;

use captf_shared::Kind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The object an event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The CloudEvents `source`: the object's path as the API server names it, without the group
    /// and version (`/namespaces/team-a/terraformclusters/prod-eu`).
    pub fn source(&self) -> String {
        format!("/namespaces/{}/{}/{}", self.namespace, self.kind.plural(), self.name)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// A plan's resource changes, as `plan` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PlanCounts {
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    pub replace: u32,
}

impl fmt::Display for PlanCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} to add, {} to change, {} to destroy, {} to replace",
            self.add, self.change, self.destroy, self.replace
        )
    }
}

/// Something a platform team wants to hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// An apply stopped on a plan that deletes or replaces resources and waits for a person.
    AwaitingApproval {
        object: ObjectRef,
        plan_hash: String,
        counts: PlanCounts,
        /// The line that approves exactly this plan; [`Event::awaiting_approval`] builds it with
        /// [`approve_command`].
        approve_command: String,
    },
    /// A tenant policy rule refused a resource of the plan.
    PolicyDenied {
        object: ObjectRef,
        rule: String,
        address: String,
        message: String,
    },
    /// A drift check found the real resources differ from the state.
    DriftFound { object: ObjectRef, counts: PlanCounts },
    /// Applies failed `failures` times in a row.
    ApplyFailed {
        object: ObjectRef,
        failures: u32,
        reason: String,
    },
    /// The object's resources were destroyed.
    Destroyed { object: ObjectRef },
    /// The state is locked by someone other than CAPTF's runner.
    StateLockedBySomeoneElse {
        object: ObjectRef,
        lock_id: String,
        who: String,
    },
}

/// The events by name: what a target's `events` filter lists and the `event` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    AwaitingApproval,
    PolicyDenied,
    DriftFound,
    ApplyFailed,
    Destroyed,
    StateLocked,
}

impl EventKind {
    pub const ALL: [EventKind; 6] = [
        EventKind::AwaitingApproval,
        EventKind::PolicyDenied,
        EventKind::DriftFound,
        EventKind::ApplyFailed,
        EventKind::Destroyed,
        EventKind::StateLocked,
    ];

    /// The name in a target's `events` list, in the payloads' `event` field and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AwaitingApproval => "awaiting-approval",
            EventKind::PolicyDenied => "policy-denied",
            EventKind::DriftFound => "drift-found",
            EventKind::ApplyFailed => "apply-failed",
            EventKind::Destroyed => "destroyed",
            EventKind::StateLocked => "state-locked",
        }
    }

    /// The CloudEvents `type` (and the generic payload's `type`).
    pub fn cloudevents_type(self) -> &'static str {
        match self {
            EventKind::AwaitingApproval => "io.captf.plan.awaiting-approval",
            EventKind::PolicyDenied => "io.captf.plan.policy-denied",
            EventKind::DriftFound => "io.captf.drift.found",
            EventKind::ApplyFailed => "io.captf.apply.failed",
            EventKind::Destroyed => "io.captf.object.destroyed",
            EventKind::StateLocked => "io.captf.state.locked",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key two notifications share when they say the same thing. A digest, so the memory a
/// remembered key takes does not grow with a long policy message.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DedupKey([u8; 32]);

impl fmt::Debug for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DedupKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The `kubectl captf` line that approves exactly the plan `hash` of `object`:
/// `kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a…`.
///
/// Kubernetes names and plan hashes never need quoting; anything else is single-quoted, so a
/// pasted line can never run more than the approval.
pub fn approve_command(object: &ObjectRef, hash: &str) -> String {
    let kind = object.kind.as_str().to_ascii_lowercase();
    format!(
        "kubectl captf approve {} -n {} --hash {}",
        shell_word(&format!("{kind}/{}", object.name)),
        shell_word(&object.namespace),
        shell_word(hash)
    )
}

fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'/'));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl Event {
    /// A plan waiting for approval, with its approve line built by [`approve_command`].
    pub fn awaiting_approval(object: ObjectRef, plan_hash: impl Into<String>, counts: PlanCounts) -> Self {
        let plan_hash = plan_hash.into();
        let approve_command = approve_command(&object, &plan_hash);
        Event::AwaitingApproval {
            object,
            plan_hash,
            counts,
            approve_command,
        }
    }

    pub fn kind(&self) -> EventKind {
        match self {
            Event::AwaitingApproval { .. } => EventKind::AwaitingApproval,
            Event::PolicyDenied { .. } => EventKind::PolicyDenied,
            Event::DriftFound { .. } => EventKind::DriftFound,
            Event::ApplyFailed { .. } => EventKind::ApplyFailed,
            Event::Destroyed { .. } => EventKind::Destroyed,
            Event::StateLockedBySomeoneElse { .. } => EventKind::StateLocked,
        }
    }

    pub fn object(&self) -> &ObjectRef {
        match self {
            Event::AwaitingApproval { object, .. }
            | Event::PolicyDenied { object, .. }
            | Event::DriftFound { object, .. }
            | Event::ApplyFailed { object, .. }
            | Event::Destroyed { object }
            | Event::StateLockedBySomeoneElse { object, .. } => object,
        }
    }

    /// What makes two events the same news: the kind, the object and what would change the
    /// message a person acts on (a new plan hash, one more failure, another lock). Counts are
    /// part of drift's key, so drift that grows is sent again; a failure's reason is not, so a
    /// reworded error of the same failure is not.
    pub fn dedup_key(&self) -> DedupKey {
        let o = self.object();
        let mut h = Sha256::new();
        // Length-prefixed parts: ("a", "bc") and ("ab", "c") must not share a key.
        let mut part = |s: &str| {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        };
        part(self.kind().as_str());
        part(o.kind.as_str());
        part(&o.namespace);
        part(&o.name);
        match self {
            Event::AwaitingApproval { plan_hash, .. } => part(plan_hash),
            Event::PolicyDenied { rule, address, .. } => {
                part(rule);
                part(address);
            }
            Event::DriftFound { counts, .. } => part(&counts.to_string()),
            Event::ApplyFailed { failures, .. } => part(&failures.to_string()),
            Event::Destroyed { .. } => {}
            Event::StateLockedBySomeoneElse { lock_id, .. } => part(lock_id),
        }
        DedupKey(h.finalize().into())
    }

    /// One line for a person, without markup.
    pub fn summary(&self) -> String {
        match self {
            Event::AwaitingApproval { object, counts, .. } => {
                format!("Plan waiting for approval on {object}: {counts}")
            }
            Event::PolicyDenied {
                object, rule, address, ..
            } => format!("Policy rule {rule} denied {address} on {object}"),
            Event::DriftFound { object, counts } => format!("Drift found on {object}: {counts}"),
            Event::ApplyFailed { object, failures, .. } => {
                let times = if *failures == 1 { "time" } else { "times in a row" };
                format!("Apply failed {failures} {times} on {object}")
            }
            Event::Destroyed { object } => format!("Resources of {object} destroyed"),
            Event::StateLockedBySomeoneElse { object, who, .. } => {
                format!("State of {object} is locked by {who}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> ObjectRef {
        ObjectRef::new(Kind::TerraformCluster, "team-a", "prod-eu")
    }

    #[test]
    fn the_approve_line_is_the_one_kubectl_captf_takes() {
        assert_eq!(
            approve_command(&obj(), "3f2a9c"),
            "kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a9c"
        );
    }

    #[test]
    fn an_approve_line_with_odd_characters_is_quoted_so_it_runs_nothing_else() {
        let o = ObjectRef::new(Kind::TerraformMachine, "ns; rm -rf /", "m");
        let line = approve_command(&o, "h'`x`");
        assert_eq!(
            line,
            r"kubectl captf approve terraformmachine/m -n 'ns; rm -rf /' --hash 'h'\''`x`'"
        );
    }

    #[test]
    fn the_source_is_the_objects_api_path() {
        assert_eq!(obj().source(), "/namespaces/team-a/terraformclusters/prod-eu");
    }

    #[test]
    fn a_new_plan_hash_or_one_more_failure_is_new_news() {
        let a = Event::awaiting_approval(obj(), "h1", PlanCounts::default());
        let b = Event::awaiting_approval(obj(), "h2", PlanCounts::default());
        assert_eq!(a.dedup_key(), a.clone().dedup_key());
        assert_ne!(a.dedup_key(), b.dedup_key());
        let f = |n, reason: &str| Event::ApplyFailed {
            object: obj(),
            failures: n,
            reason: reason.into(),
        };
        assert_ne!(f(1, "x").dedup_key(), f(2, "x").dedup_key());
        assert_eq!(f(2, "x").dedup_key(), f(2, "reworded").dedup_key());
    }

    #[test]
    fn keys_of_different_parts_never_collide_by_concatenation() {
        let p = |rule: &str, address: &str| Event::PolicyDenied {
            object: obj(),
            rule: rule.into(),
            address: address.into(),
            message: String::new(),
        };
        assert_ne!(p("ab", "c").dedup_key(), p("a", "bc").dedup_key());
    }

    #[test]
    fn every_event_kind_has_a_distinct_name_and_type() {
        let names: std::collections::BTreeSet<_> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        let types: std::collections::BTreeSet<_> = EventKind::ALL.iter().map(|k| k.cloudevents_type()).collect();
        assert_eq!(names.len(), EventKind::ALL.len());
        assert_eq!(types.len(), EventKind::ALL.len());
        for k in EventKind::ALL {
            let json = serde_json::to_string(&k).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
    }
}
