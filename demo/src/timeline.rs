//! The readable timeline: what changed between two looks at the simulator (objects' conditions
//! and next action, Jobs created and booked, Events), stamped with the simulated clock.
//! Pure: [`Timeline::observe`] takes plain JSON and returns the new lines.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde_json::Value;

/// What the simulator holds at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// TerraformClusters, TerraformMachinePools, TerraformMachines.
    pub objects: Vec<Value>,
    pub jobs: Vec<Value>,
    /// core/v1 and events.k8s.io/v1 Events.
    pub events: Vec<Value>,
    /// The Jobs whose pod runs the real runner (real Terraform); the others' are scripted.
    pub real_jobs: BTreeSet<String>,
}

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub at: Timestamp,
    pub object: String,
    pub event: String,
    pub detail: String,
}

impl Line {
    /// `10:01:30  TerraformCluster/demo            Ready         False/ApplyFailed → True/Ready`
    pub fn render(&self) -> String {
        let t = self.at.strftime("%H:%M:%S");
        let line = format!("{t}  {:<36} {:<22} {}", self.object, self.event, self.detail);
        line.trim_end().to_string()
    }
}

#[derive(Debug, Default)]
pub struct Timeline {
    objects: BTreeMap<String, ObjectSeen>,
    jobs: BTreeMap<String, JobSeen>,
    events: BTreeMap<String, u64>,
    lines: Vec<Line>,
}

#[derive(Debug, Default)]
struct ObjectSeen {
    conditions: BTreeMap<String, String>,
    next_action: String,
    deleting: bool,
}

#[derive(Debug, Default)]
struct JobSeen {
    finished: String,
    outcome: String,
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn object_key(v: &Value) -> String {
    format!("{}/{}", s(v, "/kind"), s(v, "/metadata/name"))
}

fn condition_text(c: &Value) -> String {
    format!("{}/{}", s(c, "/status"), s(c, "/reason"))
}

/// `apply InputsChangedBackoff until 10:02:00` from `status.nextAction`.
fn next_action_text(v: &Value) -> String {
    let Some(na) = v.pointer("/status/nextAction").filter(|n| !n.is_null()) else {
        return String::new();
    };
    let mut out = [s(na, "/op"), s(na, "/reason")]
        .into_iter()
        .filter(|x| !x.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Ok(t) = s(na, "/notBefore").parse::<Timestamp>() {
        out.push_str(&format!(" until {}", t.strftime("%H:%M:%S")));
    }
    out
}

/// The Job's finished condition (`Complete`, `Failed/DeadlineExceeded`), or empty.
fn job_finished(j: &Value) -> String {
    let Some(cs) = j.pointer("/status/conditions").and_then(Value::as_array) else {
        return String::new();
    };
    cs.iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .map(|c| match s(c, "/reason") {
            "" => s(c, "/type").to_string(),
            r => format!("{}/{r}", s(c, "/type")),
        })
        .unwrap_or_default()
}

fn owner_of_job(j: &Value) -> String {
    j.pointer("/metadata/ownerReferences/0")
        .map(|o| format!("{}/{}", s(o, "/kind"), s(o, "/name")))
        .unwrap_or_else(|| format!("Job/{}", s(j, "/metadata/name")))
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every line so far.
    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// Compare with the previous look; return (and keep) the new lines, stamped `now`.
    pub fn observe(&mut self, now: Timestamp, snap: &Snapshot) -> Vec<Line> {
        let mut out = Vec::new();
        let mut push = |object: String, event: &str, detail: String| {
            out.push(Line {
                at: now,
                object,
                event: event.to_string(),
                detail,
            })
        };

        // Jobs first: a Job's creation explains the condition changes that follow it.
        for j in &snap.jobs {
            let name = s(j, "/metadata/name").to_string();
            let owner = owner_of_job(j);
            let seen = self.jobs.entry(name.clone()).or_insert_with(|| {
                let reason = s(j, "/metadata/annotations/captf.io~1reason");
                let attempt = s(j, "/metadata/labels/captf.io~1attempt");
                let mut detail = name.clone();
                if !reason.is_empty() {
                    detail.push_str(&format!(" ({reason}, attempt {attempt})"));
                }
                if let Some(id) = j
                    .pointer("/metadata/annotations/captf.io~1force-unlock")
                    .and_then(Value::as_str)
                {
                    detail.push_str(&format!(" force-unlock {id}"));
                }
                if let Some(h) = j
                    .pointer("/metadata/annotations/captf.io~1approved-plan")
                    .and_then(Value::as_str)
                {
                    detail.push_str(&format!(" approved-plan {h}"));
                }
                detail.push_str(if snap.real_jobs.contains(&name) {
                    " [real runner]"
                } else {
                    " [scripted]"
                });
                push(owner.clone(), "Job created", detail);
                JobSeen::default()
            });
            let fin = job_finished(j);
            if !fin.is_empty() && seen.finished != fin {
                seen.finished = fin.clone();
                push(owner.clone(), "Job finished", format!("{name} {fin}"));
            }
            let outcome = s(j, "/metadata/annotations/captf.io~1outcome");
            if !outcome.is_empty() && seen.outcome != outcome {
                seen.outcome = outcome.to_string();
                push(owner.clone(), "Job booked", format!("{name} outcome={outcome}"));
            }
        }

        let mut present = BTreeSet::new();
        for o in &snap.objects {
            let key = object_key(o);
            present.insert(key.clone());
            let is_new = !self.objects.contains_key(&key);
            let seen = self.objects.entry(key.clone()).or_default();
            if is_new {
                push(key.clone(), "created", String::new());
            }
            let deleting = o.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
            if deleting && !seen.deleting {
                let fins = o
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .map(|f| f.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                    .unwrap_or_default();
                push(key.clone(), "deleting", format!("held by finalizers [{fins}]"));
            }
            seen.deleting = deleting;
            for c in o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let ty = s(c, "/type").to_string();
                let now_text = condition_text(c);
                let before = seen.conditions.get(&ty).cloned().unwrap_or_default();
                if before != now_text {
                    let msg = s(c, "/message");
                    let mut detail = if before.is_empty() {
                        now_text.clone()
                    } else {
                        format!("{before} → {now_text}")
                    };
                    if !msg.is_empty() && !now_text.starts_with("True") {
                        detail.push_str(&format!(": {}", clip(msg, 110)));
                    }
                    push(key.clone(), &ty, detail);
                    seen.conditions.insert(ty, now_text);
                }
            }
            let na = next_action_text(o);
            if na != seen.next_action {
                // `JobActive` repeats what the Job lines and the Ready condition already say.
                if !na.is_empty() && na != "JobActive" {
                    push(key.clone(), "nextAction", na.clone());
                }
                seen.next_action = na;
            }
        }
        let gone: Vec<String> = self.objects.keys().filter(|k| !present.contains(*k)).cloned().collect();
        for k in gone {
            self.objects.remove(&k);
            push(k, "gone", "finalizer removed, object deleted".to_string());
        }

        for e in &snap.events {
            let id = format!("{}/{}", s(e, "/metadata/namespace"), s(e, "/metadata/name"));
            let count = e
                .pointer("/series/count")
                .or_else(|| e.pointer("/count"))
                .and_then(Value::as_u64)
                .unwrap_or(1);
            if self.events.get(&id).is_some_and(|c| *c >= count) {
                continue;
            }
            self.events.insert(id, count);
            let (kind, name) = match e.get("regarding").or_else(|| e.get("involvedObject")) {
                Some(r) => (s(r, "/kind"), s(r, "/name")),
                None => ("", ""),
            };
            let note = match s(e, "/note") {
                "" => s(e, "/message"),
                n => n,
            };
            let ty = s(e, "/type");
            let reason = s(e, "/reason");
            let label = if ty == "Warning" {
                format!("event {reason} (Warning)")
            } else {
                format!("event {reason}")
            };
            push(format!("{kind}/{name}"), &label, clip(note, 110));
        }
        self.lines.extend(out.iter().cloned());
        out
    }
}

/// At most `n` characters of `s`, with `…` when it was cut.
pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cluster(conds: Value, next: Value) -> Value {
        json!({"kind": "TerraformCluster", "metadata": {"name": "demo"},
               "status": {"conditions": conds, "nextAction": next}})
    }

    #[test]
    fn a_condition_change_is_one_line_with_before_and_after() {
        let mut tl = Timeline::new();
        let t0 = t("2026-03-01T10:00:00Z");
        let first = Snapshot {
            objects: vec![cluster(
                json!([{"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "boom"}]),
                Value::Null,
            )],
            ..Default::default()
        };
        let lines = tl.observe(t0, &first);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].event, "created");
        assert_eq!(lines[1].detail, "False/ApplyFailed: boom");
        assert!(tl.observe(t0, &first).is_empty(), "nothing new, no line");
        let second = Snapshot {
            objects: vec![cluster(
                json!([{"type": "Ready", "status": "True", "reason": "Ready", "message": "ok"}]),
                Value::Null,
            )],
            ..Default::default()
        };
        let lines = tl.observe(t("2026-03-01T10:01:30Z"), &second);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].detail, "False/ApplyFailed → True/Ready");
        assert_eq!(
            lines[0].render(),
            format!(
                "10:01:30  {:<36} {:<22} False/ApplyFailed → True/Ready",
                "TerraformCluster/demo", "Ready"
            )
        );
    }

    #[test]
    fn a_job_is_reported_created_finished_and_booked_once_each() {
        let mut tl = Timeline::new();
        let now = t("2026-03-01T10:00:00Z");
        let mut job = json!({"metadata": {"name": "tc-demo-abc123-apply-1",
            "annotations": {"captf.io/reason": "InputsChanged"}, "labels": {"captf.io/attempt": "1"},
            "ownerReferences": [{"kind": "TerraformCluster", "name": "demo"}]}});
        let snap = |j: &Value| Snapshot {
            jobs: vec![j.clone()],
            ..Default::default()
        };
        let l = tl.observe(now, &snap(&job));
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].object, "TerraformCluster/demo");
        assert_eq!(
            l[0].detail,
            "tc-demo-abc123-apply-1 (InputsChanged, attempt 1) [scripted]"
        );
        job["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]});
        job["metadata"]["annotations"]["captf.io/outcome"] = json!("failed");
        let l = tl.observe(now, &snap(&job));
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].detail, "tc-demo-abc123-apply-1 Failed/BackoffLimitExceeded");
        assert_eq!(l[1].detail, "tc-demo-abc123-apply-1 outcome=failed");
        assert!(tl.observe(now, &snap(&job)).is_empty());
    }

    #[test]
    fn a_job_whose_pod_runs_the_real_runner_says_so_when_created() {
        let mut tl = Timeline::new();
        let now = t("2026-03-01T10:00:00Z");
        let job = |n: &str| json!({"metadata": {"name": n, "ownerReferences": [{"kind": "TerraformCluster", "name": "demo"}]}});
        let snap = Snapshot {
            jobs: vec![job("tc-demo-abc123-apply-1"), job("tc-demo-abc123-drift-2")],
            real_jobs: BTreeSet::from(["tc-demo-abc123-drift-2".to_string()]),
            ..Default::default()
        };
        let l = tl.observe(now, &snap);
        let details: Vec<&str> = l.iter().map(|l| l.detail.as_str()).collect();
        assert_eq!(
            details,
            [
                "tc-demo-abc123-apply-1 [scripted]",
                "tc-demo-abc123-drift-2 [real runner]"
            ]
        );
    }

    #[test]
    fn an_event_series_prints_again_only_when_its_count_grows() {
        let mut tl = Timeline::new();
        let now = t("2026-03-01T10:00:00Z");
        let mut e = json!({"metadata": {"namespace": "default", "name": "demo.1"}, "reason": "StateLocked",
            "type": "Warning", "note": "held by alice@laptop", "regarding": {"kind": "TerraformCluster", "name": "demo"}});
        let snap = |e: &Value| Snapshot {
            events: vec![e.clone()],
            ..Default::default()
        };
        let l = tl.observe(now, &snap(&e));
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].event, "event StateLocked (Warning)");
        assert!(tl.observe(now, &snap(&e)).is_empty());
        e["series"] = json!({"count": 2});
        assert_eq!(tl.observe(now, &snap(&e)).len(), 1);
    }

    #[test]
    fn an_object_that_disappears_is_reported_gone() {
        let mut tl = Timeline::new();
        let now = t("2026-03-01T10:00:00Z");
        tl.observe(
            now,
            &Snapshot {
                objects: vec![cluster(json!([]), Value::Null)],
                ..Default::default()
            },
        );
        let l = tl.observe(now, &Snapshot::default());
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].event, "gone");
    }

    #[test]
    fn next_action_shows_the_backoff_end() {
        let o = cluster(
            json!([]),
            json!({"op": "apply", "reason": "InputsChangedBackoff", "notBefore": "2026-03-01T10:02:00Z"}),
        );
        assert_eq!(next_action_text(&o), "apply InputsChangedBackoff until 10:02:00");
    }

    proptest::proptest! {
        #[test]
        fn observing_the_same_snapshot_twice_adds_nothing(
            names in proptest::collection::vec("[a-z]{1,8}", 0..6),
            reasons in proptest::collection::vec("[A-Z][a-z]{1,8}", 0..6),
        ) {
            let objects = names.iter().map(|n| json!({"kind": "TerraformCluster", "metadata": {"name": n},
                "status": {"conditions": reasons.iter().map(|r| json!({"type": r, "status": "True", "reason": r})).collect::<Vec<_>>()}})).collect();
            let events = reasons.iter().enumerate().map(|(i, r)| json!({"metadata": {"namespace": "d", "name": format!("e{i}")}, "reason": r})).collect();
            let snap = Snapshot { objects, jobs: vec![], events, real_jobs: BTreeSet::new() };
            let mut tl = Timeline::new();
            let now: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap();
            tl.observe(now, &snap);
            proptest::prop_assert!(tl.observe(now, &snap).is_empty());
        }
    }
}
