//! The seeded choices of a soak (PURE): what each runner does, and which faults fall in each
//! stretch of simulated time. The same seed and settings give the same choices; the real
//! controller's own timing still varies from run to run (docs/soak.md, "Reproducing").

use std::collections::BTreeMap;
use std::time::Duration;

use captf_shared::protocol::PlanSummary;
use captf_sim::store::Rng;
use captf_sim::{RunnerAction, RunnerScript};
use serde_json::{Value, json};

/// Every runner behaviour the soak plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runner {
    Success,
    Failure,
    /// Runs until the deadline kill; the runner reports `interrupted` on SIGTERM.
    DeadlineInterrupted,
    /// Runs until the deadline kill; the runner exits 143 with no result.
    DeadlineSilent,
    Evicted,
    DiesHoldingLock,
    Blocked,
    PlanChanged,
    /// A deadline kill after which the runner takes minutes to stop.
    SlowShutdown,
    /// A deadline kill after which the pod stays terminating for an hour and a half.
    StuckTerminating,
}

impl Runner {
    pub const ALL: [Runner; 10] = [
        Runner::Success,
        Runner::Failure,
        Runner::DeadlineInterrupted,
        Runner::DeadlineSilent,
        Runner::Evicted,
        Runner::DiesHoldingLock,
        Runner::Blocked,
        Runner::PlanChanged,
        Runner::SlowShutdown,
        Runner::StuckTerminating,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Runner::Success => "runner succeeds",
            Runner::Failure => "runner fails",
            Runner::DeadlineInterrupted => "deadline kill, runner reports interrupted",
            Runner::DeadlineSilent => "deadline kill, no result",
            Runner::Evicted => "pod evicted",
            Runner::DiesHoldingLock => "runner dies holding the state lock",
            Runner::Blocked => "destructive plan blocked",
            Runner::PlanChanged => "approved plan changed",
            Runner::SlowShutdown => "slow shutdown after SIGTERM",
            Runner::StuckTerminating => "pod stuck terminating",
        }
    }
}

/// Relative weights of the runner behaviours (per Job, among those its op allows).
#[derive(Clone, Debug)]
pub struct RunnerWeights(pub BTreeMap<Runner, u32>);

impl Default for RunnerWeights {
    fn default() -> Self {
        RunnerWeights(BTreeMap::from([
            (Runner::Success, 70),
            (Runner::Failure, 10),
            (Runner::DeadlineInterrupted, 2),
            (Runner::DeadlineSilent, 1),
            (Runner::Evicted, 4),
            (Runner::DiesHoldingLock, 4),
            (Runner::Blocked, 4),
            (Runner::PlanChanged, 3),
            (Runner::SlowShutdown, 1),
            (Runner::StuckTerminating, 1),
        ]))
    }
}

/// Faults per simulated hour (expected counts; a stretch of `dt` gets `rate × dt` of each, the
/// fraction as a chance).
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    pub spec_change: f64,
    pub delete: f64,
    pub workstation_lock: f64,
    pub api_error: f64,
    pub latency: f64,
    pub drop_watches: f64,
    pub expire_watches: f64,
    pub kill_leader: f64,
    pub clock_jump: f64,
    pub evict: f64,
    /// A group (a cluster and its members) moved to another shard by relabelling it; played
    /// only with shards (the harness sets it to 0 without).
    pub relabel: f64,
    /// Chance per stretch that a pending destructive plan gets approved.
    pub approve: f64,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            spec_change: 6.0,
            delete: 0.5,
            workstation_lock: 0.5,
            api_error: 4.0,
            latency: 0.5,
            drop_watches: 1.0,
            expire_watches: 0.25,
            kill_leader: 0.5,
            clock_jump: 0.1,
            evict: 1.0,
            relabel: 1.0,
            approve: 0.3,
        }
    }
}

impl Rates {
    /// Every rate times `k` (the approval chance is kept).
    pub fn scaled(&self, k: f64) -> Rates {
        Rates {
            spec_change: self.spec_change * k,
            delete: self.delete * k,
            workstation_lock: self.workstation_lock * k,
            api_error: self.api_error * k,
            latency: self.latency * k,
            drop_watches: self.drop_watches * k,
            expire_watches: self.expire_watches * k,
            kill_leader: self.kill_leader * k,
            clock_jump: self.clock_jump * k,
            evict: self.evict * k,
            relabel: self.relabel * k,
            approve: self.approve,
        }
    }
}

/// Where a leader kill lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KillPoint {
    /// Whenever the stretch begins.
    Anytime,
    /// Right after a booking wrote a Job's outcome annotation, before the status write.
    AfterOutcome,
    /// Right after the run lease was taken, before the Job is created.
    AfterRunLease,
    /// Right after a Job was created, before the status names it.
    AfterJobCreate,
}

impl KillPoint {
    pub const ALL: [KillPoint; 4] = [
        KillPoint::Anytime,
        KillPoint::AfterOutcome,
        KillPoint::AfterRunLease,
        KillPoint::AfterJobCreate,
    ];
}

/// One fault or action the driver plays.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    SpecChange {
        pick: u64,
        value: u64,
    },
    Delete {
        pick: u64,
    },
    WorkstationLock {
        pick: u64,
        hold: Duration,
    },
    ApiError {
        verb: usize,
        resource: usize,
        status: u16,
        count: u32,
    },
    Latency {
        millis: u64,
        for_ticks: u32,
    },
    DropWatches,
    ExpireWatches,
    KillLeader(KillPoint),
    Evict {
        pick: u64,
    },
    /// A group moves to another instance: `pick` chooses the group, `to` the instance among
    /// the others ([`relabel_target`]).
    Relabel {
        pick: u64,
        to: u64,
    },
}

impl Action {
    /// The fault's name in the report.
    pub fn name(&self) -> String {
        match self {
            Action::SpecChange { .. } => "spec change".into(),
            Action::Delete { .. } => "deletion (re-created later)".into(),
            Action::WorkstationLock { .. } => "workstation takes the state lock".into(),
            Action::ApiError { status, .. } => format!("API error {status}"),
            Action::Latency { .. } => "API latency".into(),
            Action::DropWatches => "watches dropped".into(),
            Action::ExpireWatches => "watches expired (410 Gone)".into(),
            Action::KillLeader(p) => format!("kill -9 of the leader ({p:?})"),
            Action::Evict { .. } => "running pod evicted".into(),
            Action::Relabel { .. } => "relabel (a group moves to another shard)".into(),
        }
    }
}

/// The verbs and resources API errors are drawn from.
pub const ERROR_VERBS: [captf_sim::Verb; 6] = [
    captf_sim::Verb::Get,
    captf_sim::Verb::List,
    captf_sim::Verb::Create,
    captf_sim::Verb::Update,
    captf_sim::Verb::Patch,
    captf_sim::Verb::Delete,
];
pub const ERROR_RESOURCES: [&str; 8] = [
    "jobs",
    "leases",
    "secrets",
    "pods",
    "events",
    "terraformclusters",
    "terraformclusters/status",
    "terraformmachinepools/status",
];
const ERROR_CODES: [u16; 4] = [500, 409, 429, 503];

fn count_for(rng: &mut Rng, rate_per_hour: f64, dt: Duration) -> u32 {
    let expected = rate_per_hour * dt.as_secs_f64() / 3600.0;
    let whole = expected.floor();
    let frac = expected - whole;
    let extra = u32::from(unit(rng) < frac);
    (whole as u32).saturating_add(extra)
}

/// A number in [0, 1).
pub fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The faults and actions of a stretch of `dt` simulated time.
pub fn actions(rng: &mut Rng, rates: &Rates, dt: Duration) -> Vec<Action> {
    let mut out = Vec::new();
    for _ in 0..count_for(rng, rates.spec_change, dt) {
        out.push(Action::SpecChange {
            pick: rng.next_u64(),
            value: rng.next_u64() % 1000,
        });
    }
    for _ in 0..count_for(rng, rates.delete, dt) {
        out.push(Action::Delete { pick: rng.next_u64() });
    }
    for _ in 0..count_for(rng, rates.workstation_lock, dt) {
        let hold = Duration::from_secs(300 + rng.next_u64() % 7200);
        out.push(Action::WorkstationLock {
            pick: rng.next_u64(),
            hold,
        });
    }
    for _ in 0..count_for(rng, rates.api_error, dt) {
        out.push(Action::ApiError {
            verb: (rng.next_u64() % ERROR_VERBS.len() as u64) as usize,
            resource: (rng.next_u64() % ERROR_RESOURCES.len() as u64) as usize,
            status: ERROR_CODES[(rng.next_u64() % ERROR_CODES.len() as u64) as usize],
            count: 1 + (rng.next_u64() % 5) as u32,
        });
    }
    for _ in 0..count_for(rng, rates.latency, dt) {
        out.push(Action::Latency {
            millis: 20 + rng.next_u64() % 180,
            for_ticks: 1 + (rng.next_u64() % 3) as u32,
        });
    }
    for _ in 0..count_for(rng, rates.drop_watches, dt) {
        out.push(Action::DropWatches);
    }
    for _ in 0..count_for(rng, rates.expire_watches, dt) {
        out.push(Action::ExpireWatches);
    }
    for _ in 0..count_for(rng, rates.kill_leader, dt) {
        let p = KillPoint::ALL[(rng.next_u64() % KillPoint::ALL.len() as u64) as usize];
        out.push(Action::KillLeader(p));
    }
    for _ in 0..count_for(rng, rates.evict, dt) {
        out.push(Action::Evict { pick: rng.next_u64() });
    }
    // Last, and only when it can happen, so a soak without shards draws exactly what it drew
    // before relabelling existed.
    if rates.relabel > 0.0 {
        for _ in 0..count_for(rng, rates.relabel, dt) {
            out.push(Action::Relabel {
                pick: rng.next_u64(),
                to: rng.next_u64(),
            });
        }
    }
    out
}

/// The instance (an index into `instances` of them) a group starts in: in turn from one the
/// seed picks, so a soak with at least as many groups as instances gives each some.
pub fn first_instance(seed: u64, group: usize, instances: usize) -> usize {
    let instances = instances.max(1);
    let start = Rng::new(seed ^ 0x5348_4152_4453).next_u64() % instances as u64;
    ((start + group as u64) % instances as u64) as usize
}

/// The instance a relabelled group moves to: one of the others, chosen by `to`.
pub fn relabel_target(current: usize, instances: usize, to: u64) -> usize {
    if instances < 2 {
        return current;
    }
    let step = 1 + (to % (instances as u64 - 1)) as usize;
    (current + step) % instances
}

/// The next stretch of simulated time: up to `step`, or a clock jump of one to four hours.
pub fn stretch(rng: &mut Rng, rates: &Rates, step: Duration) -> (Duration, bool) {
    let jump_chance = rates.clock_jump * step.as_secs_f64() / 3600.0;
    if unit(rng) < jump_chance {
        return (Duration::from_secs(3600 + rng.next_u64() % (3 * 3600)), true);
    }
    let lo = 10u64;
    let hi = step.as_secs().max(lo + 1);
    (Duration::from_secs(lo + rng.next_u64() % (hi - lo)), false)
}

/// FNV-1a: a stable hash of a Job's name, mixed with the seed, so a Job's behaviour depends on
/// the seed and the Job alone, not on the order Jobs happened to be created in.
fn job_seed(seed: u64, ns: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ns.bytes().chain([b'/']).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ seed
}

/// Whether a Job of `op` can show behaviour `r`: only an apply plans and may be blocked; only an
/// approved apply can see its plan change.
fn allowed(r: Runner, op: &str, approved: bool) -> bool {
    match r {
        Runner::Blocked => op == "apply" && !approved,
        Runner::PlanChanged => op == "apply" && approved,
        _ => true,
    }
}

/// The first behaviour (in `Runner` order) with a weight that this Job allows and that no Job of
/// the run has shown yet: the first Jobs of a run take each behaviour in turn, so even a short
/// run sees every one, whichever Jobs the controllers' timing happens to create.
pub fn unseen(weights: &RunnerWeights, seen: &BTreeMap<Runner, usize>, op: &str, approved: bool) -> Option<Runner> {
    weights
        .0
        .iter()
        .find(|(r, w)| **w > 0 && allowed(**r, op, approved) && seen.get(*r).copied().unwrap_or(0) == 0)
        .map(|(r, _)| *r)
}

/// What a Job's runner does: a behaviour its op allows, chosen by weight.
pub fn runner_for(seed: u64, weights: &RunnerWeights, ns: &str, name: &str, op: &str, approved: bool) -> Runner {
    let options: Vec<(Runner, u32)> = weights
        .0
        .iter()
        .filter(|(r, _)| allowed(**r, op, approved))
        .map(|(r, w)| (*r, *w))
        .collect();
    let total: u64 = options.iter().map(|(_, w)| u64::from(*w)).sum();
    if total == 0 {
        return Runner::Success;
    }
    let mut rng = Rng::new(job_seed(seed, ns, name));
    let mut roll = rng.next_u64() % total;
    for (r, w) in options {
        if roll < u64::from(w) {
            return r;
        }
        roll -= u64::from(w);
    }
    Runner::Success
}

/// The outputs every successful runner returns.
pub fn outputs() -> BTreeMap<String, Value> {
    BTreeMap::from([(
        "control_plane_endpoint".to_string(),
        json!({"host": "10.0.0.1", "port": 6443}),
    )])
}

/// The simulator's script for a behaviour. `run` is how long the runner works.
pub fn script(r: Runner, op: &str, run: Duration, drift: bool) -> RunnerScript {
    let summary = PlanSummary {
        add: 1,
        change: 0,
        destroy: 1,
        replace: 1,
    };
    match r {
        Runner::Success => RunnerScript {
            action: RunnerAction::Realistic {
                outputs: outputs(),
                sensitive: Default::default(),
                drift: drift && op == "drift",
            },
            ..RunnerScript::realistic()
        },
        Runner::Failure => RunnerScript::fail("Error: creating thing: 500 from the cloud"),
        Runner::DeadlineInterrupted => RunnerScript::hang(),
        Runner::DeadlineSilent => RunnerScript::hang().silent_on_sigterm(),
        Runner::Evicted => RunnerScript::evicted(),
        Runner::DiesHoldingLock => RunnerScript::die_holding_lock(),
        Runner::Blocked => RunnerScript::blocked(format!("plan-{}", run.as_secs()), summary),
        Runner::PlanChanged => RunnerScript::plan_changed(format!("plan-{}", run.as_secs() + 1), summary),
        Runner::SlowShutdown => RunnerScript::hang().shutdown_after(Duration::from_secs(120)),
        Runner::StuckTerminating => RunnerScript::hang().shutdown_after(Duration::from_secs(90 * 60)),
    }
    .after(run)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_jobs_runner_depends_on_the_seed_and_the_job_alone() {
        let w = RunnerWeights::default();
        let a = runner_for(7, &w, "ns", "tc-x-apply-3", "apply", false);
        assert_eq!(a, runner_for(7, &w, "ns", "tc-x-apply-3", "apply", false));
        let many: std::collections::BTreeSet<_> = (0..2000)
            .map(|i| runner_for(7, &w, "ns", &format!("j{i}"), "apply", false))
            .collect();
        // Every behaviour an unapproved apply allows shows up.
        assert_eq!(many.len(), Runner::ALL.len() - 1, "{many:?}");
        assert!(!many.contains(&Runner::PlanChanged));
        let drift: std::collections::BTreeSet<_> = (0..2000)
            .map(|i| runner_for(7, &w, "ns", &format!("j{i}"), "drift", false))
            .collect();
        assert!(!drift.contains(&Runner::Blocked) && !drift.contains(&Runner::PlanChanged));
    }

    #[test]
    fn the_first_jobs_of_a_run_take_each_behaviour_in_turn() {
        let w = RunnerWeights::default();
        let mut seen: BTreeMap<Runner, usize> = BTreeMap::new();
        let mut order = Vec::new();
        while let Some(r) = unseen(&w, &seen, "apply", false) {
            *seen.entry(r).or_default() += 1;
            order.push(r);
        }
        // Every behaviour but PlanChanged (an unapproved apply cannot see it), once each, in order.
        let expected: Vec<Runner> = w.0.keys().copied().filter(|r| *r != Runner::PlanChanged).collect();
        assert_eq!(order, expected);
        // A drift check never takes Blocked; an approved apply takes PlanChanged once it is due.
        assert_eq!(unseen(&w, &seen, "drift", false), None);
        assert_eq!(unseen(&w, &seen, "apply", true), Some(Runner::PlanChanged));
        // A behaviour without weight is never forced.
        let mut none = w.clone();
        none.0.insert(Runner::PlanChanged, 0);
        assert_eq!(unseen(&none, &seen, "apply", true), None);
    }

    #[test]
    fn groups_start_spread_over_the_instances_and_a_relabel_always_moves_to_another() {
        // Three groups over four instances: three different ones.
        let first: std::collections::BTreeSet<usize> = (0..3).map(|g| first_instance(7, g, 4)).collect();
        assert_eq!(first.len(), 3, "{first:?}");
        assert!((0..100).all(|g| first_instance(7, g, 1) == 0));
        for current in 0..4 {
            let targets: std::collections::BTreeSet<usize> = (0..50).map(|to| relabel_target(current, 4, to)).collect();
            let others: std::collections::BTreeSet<usize> = (0..4).filter(|i| *i != current).collect();
            assert_eq!(targets, others);
        }
        assert_eq!(relabel_target(0, 1, 5), 0);
    }

    #[test]
    fn relabels_are_drawn_after_every_other_fault_and_not_at_all_without_a_rate() {
        let with = Rates::default().scaled(4.0);
        let without = Rates {
            relabel: 0.0,
            ..with.clone()
        };
        let mut relabels = 0;
        for seed in 0..200 {
            let a = actions(&mut Rng::new(seed), &with, Duration::from_secs(300));
            let b = actions(&mut Rng::new(seed), &without, Duration::from_secs(300));
            assert!(!b.iter().any(|x| matches!(x, Action::Relabel { .. })));
            // The stretch's other faults are those a soak without shards draws.
            let others: Vec<Action> = a
                .iter()
                .filter(|x| !matches!(x, Action::Relabel { .. }))
                .cloned()
                .collect();
            assert_eq!(others, b);
            relabels += a.len() - b.len();
        }
        assert!(relabels > 0);
    }

    #[test]
    fn fault_counts_follow_the_rates_over_many_stretches() {
        let mut rng = Rng::new(1);
        let rates = Rates::default();
        let hours = 2000.0;
        let mut n = 0usize;
        for _ in 0..(hours as usize * 12) {
            n += actions(&mut rng, &rates, Duration::from_secs(300))
                .iter()
                .filter(|a| matches!(a, Action::ApiError { .. }))
                .count();
        }
        let per_hour = n as f64 / hours;
        assert!((per_hour - rates.api_error).abs() < 0.4, "{per_hour}");
    }
}
