//! Runner slots (docs/rules.md, "Runner slots"): how many runner Jobs may run at once, and who
//! starts next when there are more objects due to start a Job than free slots (PURE).
//!
//! Two limits hold together: one for the whole controller and one for each namespace (0: no
//! limit). The rule takes what runs per namespace (counted from the Jobs themselves: how many
//! run, and when the newest was created), the objects waiting to start one (each with its
//! [`Class`] and the time it began to wait) and the limits, and returns who may start now and
//! the place of everyone else.
//!
//! The order, one start at a time:
//! 1. **Fair turns between namespaces.** The next start goes, among the namespaces that have a
//!    waiting object and a free slot of their own, to the one with the fewest Jobs running
//!    (those it is about to start included), and between those with as many, to the one served
//!    longest ago (whose newest Job is the oldest; never served first). A namespace with many
//!    waiting objects takes its turn like any other, so it cannot starve another under the
//!    controller-wide limit, even when that limit is 1.
//! 2. **Urgency**, in its turn: a destroy (the object is being deleted) goes before an object
//!    that never applied, which goes before the rest (re-applies, drift remediation, drift
//!    checks, refreshes). Between namespaces it only breaks a tie of the turns, except for
//!    destroys: a waiting destroy takes the next free slot whatever its namespace runs (turns
//!    still go between namespaces' destroys), so when one namespace may take every slot
//!    (`--max-running-jobs-per-namespace` at or above `--max-running-jobs`), a deletion
//!    elsewhere waits for one Job to finish, not for that namespace's backlog. Destroys are
//!    bounded by the objects being deleted, so they cannot hold the others off for good.
//! 3. **Oldest waiting first** within a class; then namespace and name, so the order is the
//!    same on every pass.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::jiff::Timestamp;

/// The limits on running runner Jobs; `None` (0 on the command line): no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Every namespace together (`--max-running-jobs`).
    pub total: Option<u32>,
    /// Each namespace (`--max-running-jobs-per-namespace`).
    pub per_namespace: Option<u32>,
}

impl Limits {
    /// From the flags' values: 0 is no limit.
    pub fn from_flags(total: u32, per_namespace: u32) -> Limits {
        Limits {
            total: (total > 0).then_some(total),
            per_namespace: (per_namespace > 0).then_some(per_namespace),
        }
    }

    /// Whether either limit is set.
    pub fn any(&self) -> bool {
        self.total.is_some() || self.per_namespace.is_some()
    }
}

/// How urgent a waiting start is; the smaller goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// The object is being deleted: its destroy.
    Destroy,
    /// Nothing was ever applied: the object's first apply (someone waits for it).
    NeverApplied,
    /// Re-applies, drift remediation, drift checks, refreshes.
    Other,
}

impl Class {
    /// The class of a start of `op` for an object that is being deleted or not, and that has
    /// applied something before or not.
    pub fn of(op: captf_shared::Op, deleting: bool, ever_applied: bool) -> Class {
        if deleting || op == captf_shared::Op::Destroy {
            Class::Destroy
        } else if !ever_applied {
            Class::NeverApplied
        } else {
            Class::Other
        }
    }
}

/// The class of a `Start` of the object `s` describes (PURE): a destroy, a first apply (nothing
/// ever applied: no applied inputs in the status or the durable record, no successful apply
/// listed), or anything else.
pub fn class_of(start: &crate::Start, s: &crate::Snapshot) -> Class {
    let ever_applied = s.status.applied_inputs_hash.is_some()
        || s.durable.applied_inputs_hash.is_some()
        || s.last_success(captf_shared::Op::Apply).is_some();
    Class::of(start.op, s.deletion_timestamp.is_some(), ever_applied)
}

/// Who waits: a namespace and a name unique within it (the controller uses `<kind>/<name>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Key {
        Key {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// An object that is due to start a Job and waits for a runner slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub key: Key,
    pub class: Class,
    /// When it began to wait.
    pub since: Timestamp,
}

/// The place of an object that may not start yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub namespace: String,
    /// Its place among the objects waiting in its namespace, from 1.
    pub position: usize,
    /// The objects waiting in its namespace (not counting those that may start now).
    pub queued_in_namespace: usize,
    /// Its place among every waiting object, from 1, in the order they would start if every
    /// running Job finished at once.
    pub overall: usize,
    /// Every waiting object.
    pub queued: usize,
    /// Jobs running in its namespace, with those that may start now.
    pub running_in_namespace: u32,
    /// Jobs running in every namespace, with those that may start now.
    pub running: u32,
    /// Which limit holds it back.
    pub held_by: HeldBy,
    pub limits: Limits,
}

/// The limit that holds a waiting object back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldBy {
    /// Its namespace runs as many Jobs as the per-namespace limit allows.
    Namespace,
    /// The controller runs as many Jobs as the controller-wide limit allows.
    Controller,
}

impl fmt::Display for Place {
    /// "waiting for a runner slot: 3 of 7 queued in namespace team-a (10 of 10 running)"; under
    /// the controller-wide limit "(4 running in team-a, 20 of 20 in all namespaces; 9 of 31
    /// queued in all)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "waiting for a runner slot: {} of {} queued in namespace {} ",
            self.position, self.queued_in_namespace, self.namespace
        )?;
        match (self.held_by, self.limits.per_namespace, self.limits.total) {
            (HeldBy::Namespace, Some(limit), _) => {
                write!(f, "({} of {limit} running)", self.running_in_namespace)
            }
            (_, _, Some(total)) => write!(
                f,
                "({} running in {}, {} of {total} in all namespaces; {} of {} queued in all)",
                self.running_in_namespace, self.namespace, self.running, self.overall, self.queued
            ),
            // Not reached: a place is only given under a limit.
            _ => write!(f, "({} running)", self.running_in_namespace),
        }
    }
}

/// What the rule decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Who may start now, in the order they were chosen.
    pub start: Vec<Key>,
    /// Everyone else's place.
    pub places: BTreeMap<Key, Place>,
}

/// What runs in one namespace, counted from its Jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Jobs running now (no `Complete` or `Failed` condition).
    pub running: u32,
    /// When its newest Job was created, running or not; `None`: none is known.
    pub last_start: Option<Timestamp>,
}

/// When a namespace was last served: its newest Job's creation, then the starts of this very
/// admission in order (a start now is more recent than any Job's creation).
type Served = (Option<Timestamp>, u32);

/// The order key of a namespace's next candidate: a destroy first, then fewest running, then
/// the namespace served longest ago, then urgency, then the oldest waiting, then namespace and
/// name.
type Turn<'a> = (bool, u32, Served, Class, Timestamp, &'a str, &'a str);

/// Who may start now, and the place of every other waiting object (PURE). `load` is what runs
/// per namespace (any namespace may be missing: nothing). A candidate listed twice counts once,
/// with its first entry.
pub fn admit(load: &BTreeMap<String, Load>, waiting: &[Candidate], limits: Limits) -> Admission {
    let running: BTreeMap<&str, u32> = load.iter().map(|(ns, l)| (ns.as_str(), l.running)).collect();
    // Each namespace's queue in its own order: urgency, oldest, name.
    let mut queues: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in waiting {
        if seen.insert(&c.key) {
            queues.entry(c.key.namespace.as_str()).or_default().push(c);
        }
    }
    for q in queues.values_mut() {
        q.sort_by(|a, b| (a.class, a.since, &a.key.name).cmp(&(b.class, b.since, &b.key.name)));
    }
    let ns_running = |ns: &str| running.get(ns).copied().unwrap_or(0);
    let mut counts: BTreeMap<&str, u32> = queues.keys().map(|ns| (*ns, ns_running(ns))).collect();
    let mut served: BTreeMap<&str, Served> = queues
        .keys()
        .map(|ns| (*ns, (load.get(*ns).and_then(|l| l.last_start), 0)))
        .collect();
    let mut serving: u32 = 0;
    let mut total: u32 = running.values().copied().fold(0, u32::saturating_add);
    let mut next: BTreeMap<&str, usize> = queues.keys().map(|ns| (*ns, 0)).collect();

    // The order every waiting object would start in if slots were free, limits aside except
    // the per-namespace one's turns: the admitted prefix is the part that fits.
    fn turn<'a>(
        ns: &str,
        i: usize,
        counts: &BTreeMap<&str, u32>,
        served: &BTreeMap<&str, Served>,
        queues: &BTreeMap<&str, Vec<&'a Candidate>>,
    ) -> Option<Turn<'a>> {
        queues.get(ns).and_then(|q| q.get(i)).map(|c| {
            (
                c.class != Class::Destroy,
                counts.get(ns).copied().unwrap_or(0),
                served.get(ns).copied().unwrap_or_default(),
                c.class,
                c.since,
                c.key.namespace.as_str(),
                c.key.name.as_str(),
            )
        })
    }
    let mut admission = Admission::default();
    let mut order: Vec<&Candidate> = Vec::new();
    // Nothing starts while the controller runs as many Jobs as it may (or more, after the limit
    // was lowered).
    let mut admitting = limits.total.is_none_or(|t| total < t);
    // Each namespace's next turn, smallest first: one entry per namespace with a candidate left,
    // so a start costs a logarithm of the namespaces, not a scan of them.
    let at_limit = |ns: &str, counts: &BTreeMap<&str, u32>| {
        limits
            .per_namespace
            .is_some_and(|l| counts.get(ns).copied().unwrap_or(0) >= l)
    };
    let mut turns: std::collections::BTreeSet<Turn> = std::collections::BTreeSet::new();
    // While admitting, a namespace at its own limit waits here; afterwards (places only) every
    // queue goes on in turns, as slots would free.
    let mut held: Vec<Turn> = Vec::new();
    for ns in queues.keys() {
        if let Some(t) = turn(ns, 0, &counts, &served, &queues) {
            if admitting && at_limit(ns, &counts) {
                held.push(t);
            } else {
                turns.insert(t);
            }
        }
    }
    loop {
        let Some((_, _, _, _, _, ns, _)) = turns.pop_first() else {
            if admitting {
                admitting = false;
                turns.extend(held.drain(..));
                continue;
            }
            break;
        };
        let i = next.get(ns).copied().unwrap_or(0);
        let Some(c) = queues.get(ns).and_then(|q| q.get(i)).copied() else {
            continue;
        };
        if let Some(n) = next.get_mut(ns) {
            *n += 1;
        }
        if let Some(n) = counts.get_mut(ns) {
            *n = n.saturating_add(1);
        }
        serving += 1;
        served.insert(ns, (Some(Timestamp::MAX), serving));
        if admitting {
            admission.start.push(c.key.clone());
            total = total.saturating_add(1);
        } else {
            order.push(c);
        }
        if let Some(t) = turn(ns, i + 1, &counts, &served, &queues) {
            if admitting && at_limit(ns, &counts) {
                held.push(t);
            } else {
                turns.insert(t);
            }
        }
        if admitting && limits.total.is_some_and(|t| total >= t) {
            admitting = false;
            turns.extend(held.drain(..));
        }
    }

    // Places: counts as they are once the admitted objects started.
    let mut after: BTreeMap<&str, u32> = queues.keys().map(|ns| (*ns, ns_running(ns))).collect();
    for k in &admission.start {
        if let Some(n) = after.get_mut(k.namespace.as_str()) {
            *n += 1;
        }
    }
    let overall: std::collections::HashMap<&Key, usize> =
        order.iter().enumerate().map(|(i, c)| (&c.key, i + 1)).collect();
    let mut in_namespace: BTreeMap<&str, usize> = BTreeMap::new();
    let queued_in: BTreeMap<&str, usize> = queues
        .iter()
        .map(|(ns, q)| {
            (
                *ns,
                q.len() - admission.start.iter().filter(|k| k.namespace == *ns).count(),
            )
        })
        .collect();
    // A namespace's places follow its own queue's order.
    for (ns, q) in &queues {
        for c in q.iter().filter(|c| !admission.start.contains(&c.key)) {
            let pos = in_namespace.entry(ns).or_default();
            *pos += 1;
            let running_in_namespace = after.get(ns).copied().unwrap_or(0);
            let held_by = if limits.per_namespace.is_some_and(|l| running_in_namespace >= l) {
                HeldBy::Namespace
            } else {
                HeldBy::Controller
            };
            admission.places.insert(
                c.key.clone(),
                Place {
                    namespace: ns.to_string(),
                    position: *pos,
                    queued_in_namespace: queued_in.get(ns).copied().unwrap_or(0),
                    overall: overall.get(&c.key).copied().unwrap_or(0),
                    queued: order.len(),
                    running_in_namespace,
                    running: total,
                    held_by,
                    limits,
                },
            );
        }
    }
    admission
}

/// How often a queued object is looked at again without a slot freeing (its place in the
/// message is refreshed then; a freed slot wakes the next objects at once).
pub const QUEUE_LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// The wait of a `Start` that may not run yet (`Queued`), looked at again after [`QUEUE_LOOK`]
/// or when a slot frees (PURE).
pub fn queued(start: &crate::Start) -> crate::Wait {
    crate::Wait {
        reason: crate::Reason::Queued,
        op: Some(start.op),
        requeue_after: Some(QUEUE_LOOK),
        not_before: None,
        attempt: Some(start.attempt),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn cand(ns: &str, name: &str, class: Class, since: i64) -> Candidate {
        Candidate {
            key: Key::new(ns, name),
            class,
            since: ts(since),
        }
    }

    fn running(pairs: &[(&str, u32)]) -> BTreeMap<String, Load> {
        pairs
            .iter()
            .map(|(n, c)| {
                (
                    n.to_string(),
                    Load {
                        running: *c,
                        last_start: None,
                    },
                )
            })
            .collect()
    }

    fn names(keys: &[Key]) -> Vec<String> {
        keys.iter().map(|k| format!("{}/{}", k.namespace, k.name)).collect()
    }

    #[test]
    fn runner_slots_per_namespace_limit_two_of_five_start_and_the_rest_are_queued_in_order() {
        let waiting: Vec<Candidate> = (0..5)
            .map(|i| cand("team-a", &format!("c{i}"), Class::NeverApplied, i))
            .collect();
        let a = admit(&running(&[]), &waiting, Limits::from_flags(0, 2));
        assert_eq!(names(&a.start), ["team-a/c0", "team-a/c1"]);
        let c4 = &a.places[&Key::new("team-a", "c4")];
        assert_eq!(
            (c4.position, c4.queued_in_namespace, c4.held_by),
            (3, 3, HeldBy::Namespace)
        );
        assert_eq!(
            c4.to_string(),
            "waiting for a runner slot: 3 of 3 queued in namespace team-a (2 of 2 running)"
        );
        assert_eq!(a.places[&Key::new("team-a", "c2")].position, 1);
    }

    #[test]
    fn runner_slots_message_names_the_place_and_the_namespace_limit() {
        let waiting: Vec<Candidate> = (0..7)
            .map(|i| cand("team-a", &format!("c{i}"), Class::Other, i))
            .collect();
        let a = admit(&running(&[("team-a", 10)]), &waiting, Limits::from_flags(0, 10));
        assert!(a.start.is_empty());
        assert_eq!(
            a.places[&Key::new("team-a", "c2")].to_string(),
            "waiting for a runner slot: 3 of 7 queued in namespace team-a (10 of 10 running)"
        );
    }

    #[test]
    fn runner_slots_no_limit_starts_everyone() {
        let waiting: Vec<Candidate> = (0..50)
            .map(|i| cand("team-a", &format!("c{i}"), Class::Other, i))
            .collect();
        let a = admit(&running(&[("team-a", 1000)]), &waiting, Limits::from_flags(0, 0));
        assert_eq!(a.start.len(), 50);
        assert!(a.places.is_empty());
    }

    #[test]
    fn runner_slots_controller_wide_limit_takes_turns_between_namespaces() {
        // team-a has six waiting, team-b one; three slots free of four.
        let mut waiting: Vec<Candidate> = (0..6)
            .map(|i| cand("team-a", &format!("a{i}"), Class::Other, i))
            .collect();
        waiting.push(cand("team-b", "b0", Class::Other, 100));
        let a = admit(&running(&[("team-a", 1)]), &waiting, Limits::from_flags(4, 10));
        // team-b has fewer running: its object starts although it waited the least.
        assert_eq!(names(&a.start), ["team-b/b0", "team-a/a0", "team-a/a1"]);
        let a2 = &a.places[&Key::new("team-a", "a2")];
        assert_eq!(a2.held_by, HeldBy::Controller);
        assert_eq!(
            a2.to_string(),
            "waiting for a runner slot: 1 of 4 queued in namespace team-a (3 running in team-a, 4 of 4 in all namespaces; 1 of 4 queued in all)"
        );
    }

    #[test]
    fn runner_slots_destroys_go_before_never_applied_before_the_rest() {
        let waiting = vec![
            cand("ns", "drift", Class::Other, 0),
            cand("ns", "new", Class::NeverApplied, 5),
            cand("ns", "gone", Class::Destroy, 10),
        ];
        let a = admit(&running(&[]), &waiting, Limits::from_flags(0, 1));
        assert_eq!(names(&a.start), ["ns/gone"]);
        assert_eq!(a.places[&Key::new("ns", "new")].position, 1);
        assert_eq!(a.places[&Key::new("ns", "drift")].position, 2);
    }

    #[test]
    fn runner_slots_within_a_class_the_oldest_first_then_by_namespace_and_name() {
        let waiting = vec![
            cand("b", "x", Class::Other, 1),
            cand("a", "y", Class::Other, 1),
            cand("a", "x", Class::Other, 1),
            cand("a", "old", Class::Other, 0),
        ];
        let a = admit(&running(&[]), &waiting, Limits::from_flags(1, 0));
        assert_eq!(names(&a.start), ["a/old"]);
        // The rest in turns: b has none running, so b/x is next overall.
        assert_eq!(a.places[&Key::new("b", "x")].overall, 1);
        assert_eq!(a.places[&Key::new("a", "x")].overall, 2);
        assert_eq!(a.places[&Key::new("a", "y")].overall, 3);
    }

    #[test]
    fn runner_slots_a_candidate_listed_twice_counts_once() {
        let waiting = vec![cand("a", "x", Class::Other, 1), cand("a", "x", Class::Destroy, 0)];
        let a = admit(&running(&[]), &waiting, Limits::from_flags(0, 5));
        assert_eq!(names(&a.start), ["a/x"]);
    }

    #[test]
    fn runner_slots_more_running_than_the_limit_starts_nobody() {
        // After the limit was lowered: nothing starts until enough finished.
        let waiting = vec![cand("a", "x", Class::Destroy, 0)];
        let a = admit(&running(&[("a", 12)]), &waiting, Limits::from_flags(0, 10));
        assert!(a.start.is_empty());
        assert_eq!(a.places[&Key::new("a", "x")].running_in_namespace, 12);
        let a = admit(&running(&[("b", 30)]), &waiting, Limits::from_flags(20, 10));
        assert!(a.start.is_empty());
        assert_eq!(a.places[&Key::new("a", "x")].held_by, HeldBy::Controller);
    }

    #[test]
    fn runner_slots_class_of_a_start() {
        use captf_shared::Op;
        assert_eq!(Class::of(Op::Destroy, true, true), Class::Destroy);
        assert_eq!(Class::of(Op::Apply, false, false), Class::NeverApplied);
        assert_eq!(Class::of(Op::Apply, false, true), Class::Other);
        assert_eq!(Class::of(Op::Drift, false, true), Class::Other);
        assert_eq!(Class::of(Op::Refresh, true, true), Class::Destroy);
    }

    fn class() -> impl Strategy<Value = Class> {
        prop_oneof![Just(Class::Destroy), Just(Class::NeverApplied), Just(Class::Other)]
    }

    fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::vec((0..4usize, 0..12usize, class(), 0..20i64), 0..30).prop_map(|v| {
            v.into_iter()
                .map(|(ns, n, c, s)| cand(&format!("ns{ns}"), &format!("o{n}"), c, s))
                .collect()
        })
    }

    fn running_strategy() -> impl Strategy<Value = BTreeMap<String, Load>> {
        prop::collection::btree_map(
            (0..4usize).prop_map(|n| format!("ns{n}")),
            (0..6u32, prop::option::of(0..20i64)).prop_map(|(running, last)| Load {
                running,
                last_start: last.map(ts),
            }),
            0..4,
        )
    }

    fn ran(load: &BTreeMap<String, Load>, ns: &str) -> u32 {
        load.get(ns).map_or(0, |l| l.running)
    }

    proptest! {
        #[test]
        fn runner_slots_never_more_running_than_either_limit(
            running in running_strategy(),
            waiting in candidates(),
            total in 0..8u32,
            per_ns in 0..5u32,
        ) {
            let limits = Limits::from_flags(total, per_ns);
            let a = admit(&running, &waiting, limits);
            let before: u32 = running.values().map(|l| l.running).sum();
            let mut after: BTreeMap<String, u32> = running.iter().map(|(n, l)| (n.clone(), l.running)).collect();
            for k in &a.start {
                *after.entry(k.namespace.clone()).or_default() += 1;
            }
            if let Some(t) = limits.total {
                // Starting never takes the total over the limit (it may already be over).
                prop_assert!(a.start.is_empty() || before + a.start.len() as u32 <= t);
            }
            if let Some(l) = limits.per_namespace {
                for k in &a.start {
                    prop_assert!(after[&k.namespace] <= l);
                    prop_assert!(ran(&running, &k.namespace) < l);
                }
            }
            // Every distinct candidate either starts or has a place, never both.
            let distinct: std::collections::BTreeSet<&Key> = waiting.iter().map(|c| &c.key).collect();
            prop_assert_eq!(a.start.len() + a.places.len(), distinct.len());
            for k in &a.start {
                prop_assert!(!a.places.contains_key(k));
            }
        }

        #[test]
        fn runner_slots_fill_every_free_slot_they_may(
            running in running_strategy(),
            waiting in candidates(),
            total in 0..8u32,
            per_ns in 0..5u32,
        ) {
            // Nobody waits while a slot it may take is free.
            let limits = Limits::from_flags(total, per_ns);
            let a = admit(&running, &waiting, limits);
            let total_after: u32 = running.values().map(|l| l.running).sum::<u32>() + a.start.len() as u32;
            for p in a.places.values() {
                let ns_full = limits.per_namespace.is_some_and(|l| p.running_in_namespace >= l);
                let all_full = limits.total.is_some_and(|t| total_after >= t);
                prop_assert!(ns_full || all_full, "{p:?} waits with a free slot");
            }
        }

        #[test]
        fn runner_slots_destroys_before_never_applied_before_the_rest_within_a_namespace(
            running in running_strategy(),
            waiting in candidates(),
            total in 0..8u32,
            per_ns in 0..5u32,
        ) {
            let a = admit(&running, &waiting, Limits::from_flags(total, per_ns));
            let class_of = |k: &Key| waiting.iter().find(|c| &c.key == k).map(|c| c.class);
            // No object starts while a more urgent one of its namespace waits, and places follow
            // urgency within a namespace.
            for started in &a.start {
                for (k, _) in a.places.iter().filter(|(k, _)| k.namespace == started.namespace) {
                    prop_assert!(class_of(k) >= class_of(started));
                }
            }
            for (k1, p1) in &a.places {
                for (k2, p2) in a.places.iter().filter(|(k2, _)| k2.namespace == k1.namespace) {
                    if class_of(k1) < class_of(k2) {
                        prop_assert!(p1.position < p2.position);
                    }
                }
            }
        }

        #[test]
        fn runner_slots_a_waiting_namespace_is_not_starved_under_the_controller_wide_limit(
            total in 1..6u32,
            per_ns in 0..4u32,
            others in 1..4usize,
            class in class(),
            rounds_seed in prop::collection::vec(0..1000u32, 64),
        ) {
            // Namespace "b" has one waiting object and a free slot of its own; the other
            // namespaces always have more waiting work than slots, of the same urgency, and a
            // backlog that waited longer than b's object (oldest-first alone would serve all of
            // it first). Jobs finish in the order they started. "b" must start within a bounded
            // number of finishes, however long the others' backlog.
            let limits = Limits::from_flags(total, per_ns);
            // (namespace, created) of the running Jobs, oldest first.
            let mut runs: std::collections::VecDeque<(String, i64)> = std::collections::VecDeque::new();
            let mut newest: BTreeMap<String, i64> = BTreeMap::new();
            for i in 0..total as usize {
                let ns = format!("a{}", i % others);
                runs.push_back((ns.clone(), -1));
                newest.insert(ns, -1);
            }
            let waiting_b = cand("b", "late", class, 0);
            let mut started_b = None;
            for (round, seed) in rounds_seed.iter().enumerate() {
                // One Job finishes.
                runs.pop_front();
                let mut load: BTreeMap<String, Load> = newest
                    .iter()
                    .map(|(ns, t)| (ns.clone(), Load { running: 0, last_start: Some(ts(*t)) }))
                    .collect();
                for (ns, _) in &runs {
                    load.entry(ns.clone()).or_default().running += 1;
                }
                let mut waiting = vec![waiting_b.clone()];
                for o in 0..others {
                    for j in 0..3 {
                        let since = -1000 + 3 * round as i64 + i64::from(seed % 3) + j;
                        waiting.push(cand(&format!("a{o}"), &format!("w{round}-{j}"), class, since));
                    }
                }
                let a = admit(&load, &waiting, limits);
                for k in &a.start {
                    runs.push_back((k.namespace.clone(), round as i64));
                    newest.insert(k.namespace.clone(), round as i64);
                }
                if a.start.iter().any(|k| k.namespace == "b") {
                    started_b = Some(round);
                    break;
                }
            }
            let bound = (total as usize) + others + 1;
            prop_assert!(started_b.is_some_and(|r| r <= bound), "b started at {started_b:?}, bound {bound}");
        }

        #[test]
        fn runner_slots_a_waiting_destroy_takes_the_next_free_slot_whatever_its_namespace_runs(
            running in running_strategy(),
            waiting in candidates(),
            total in 1..8u32,
        ) {
            // One namespace may take every slot (no per-namespace limit): a destroy waiting
            // anywhere starts before any other object, however much its namespace runs.
            let a = admit(&running, &waiting, Limits::from_flags(total, 0));
            // A candidate listed twice counts with its first entry.
            let class_of = |k: &Key| waiting.iter().find(|c| &c.key == k).map(|c| c.class);
            let destroys: std::collections::BTreeSet<&Key> =
                waiting.iter().map(|c| &c.key).filter(|k| class_of(k) == Some(Class::Destroy)).collect();
            let n = a.start.len().min(destroys.len());
            prop_assert!(a.start.iter().take(n).all(|k| class_of(k) == Some(Class::Destroy)));
            // No destroy waits while an object of another class started.
            if a.places.keys().any(|k| class_of(k) == Some(Class::Destroy)) {
                prop_assert!(a.start.iter().all(|k| class_of(k) == Some(Class::Destroy)));
            }
        }

        #[test]
        fn runner_slots_namespaces_at_equal_load_are_served_least_recently_first(
            last in prop::collection::vec(prop::option::of(0..100i64), 2..5),
        ) {
            // One free slot, every namespace with one waiting object and nothing running: the
            // namespace whose newest Job is the oldest (or that has none) starts.
            let load: BTreeMap<String, Load> = last
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("ns{i}"), Load { running: 0, last_start: t.map(ts) }))
                .collect();
            let waiting: Vec<Candidate> =
                (0..last.len()).map(|i| cand(&format!("ns{i}"), "x", Class::Other, i as i64)).collect();
            let a = admit(&load, &waiting, Limits::from_flags(1, 0));
            let want = load.iter().min_by_key(|(ns, l)| (l.last_start, (*ns).clone())).map(|(ns, _)| ns.clone());
            prop_assert_eq!(a.start.first().map(|k| k.namespace.clone()), want);
        }
    }
}
