//! The request bodies, one per target kind: pure functions of the event, its id and its time.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::config::TargetKind;
use crate::event::Event;

/// The version of the generic payload's shape; a change that breaks a reader bumps it.
pub const GENERIC_VERSION: &str = "captf.io/notification/v1";
/// The longest free text (a failure's reason, a policy message) a Slack message quotes.
pub const SLACK_MAX_TEXT: usize = 1000;

/// A notification as sent: the event with the id and time it was accepted at. Retries send the
/// same id, so a receiver can drop a retry it already has.
#[derive(Clone, Debug)]
pub struct Notification {
    pub event: Event,
    pub id: String,
    pub time: Timestamp,
}

/// The content type and body for a target of `kind`.
pub fn render(kind: TargetKind, n: &Notification) -> (&'static str, Vec<u8>) {
    match kind {
        TargetKind::Generic => ("application/json", to_bytes(&generic(n))),
        TargetKind::Slack => ("application/json", to_bytes(&json!({ "text": slack_text(&n.event) }))),
        TargetKind::CloudEvents => ("application/cloudevents+json; charset=utf-8", to_bytes(&cloudevent(n))),
    }
}

fn to_bytes(v: &Value) -> Vec<u8> {
    // A `Value` of strings and numbers always serializes.
    serde_json::to_vec(v).unwrap_or_default()
}

/// The event's own fields, shared by the generic and the CloudEvents payloads.
pub fn data(event: &Event) -> Value {
    let object = serde_json::to_value(event.object()).unwrap_or(Value::Null);
    let mut d = match event {
        Event::AwaitingApproval {
            plan_hash,
            counts,
            approve_command,
            ..
        } => json!({ "planHash": plan_hash, "counts": counts, "approveCommand": approve_command }),
        Event::PolicyDenied {
            rule, address, message, ..
        } => json!({ "rule": rule, "address": address, "message": message }),
        Event::DriftFound { counts, .. } => json!({ "counts": counts }),
        Event::ApplyFailed { failures, reason, .. } => json!({ "failures": failures, "reason": reason }),
        Event::Destroyed { .. } => json!({}),
        Event::StateLockedBySomeoneElse { lock_id, who, .. } => json!({ "lockId": lock_id, "who": who }),
    };
    if let Value::Object(m) = &mut d {
        m.insert("object".into(), object);
    }
    d
}

/// CAPTF's own document.
pub fn generic(n: &Notification) -> Value {
    let kind = n.event.kind();
    json!({
        "version": GENERIC_VERSION,
        "id": n.id,
        "type": kind.cloudevents_type(),
        "event": kind.as_str(),
        "time": n.time.to_string(),
        "source": n.event.object().source(),
        "summary": n.event.summary(),
        "data": data(&n.event),
    })
}

/// A CloudEvents 1.0 event in structured mode (the whole event is the JSON body).
pub fn cloudevent(n: &Notification) -> Value {
    json!({
        "specversion": "1.0",
        "id": n.id,
        "source": n.event.object().source(),
        "type": n.event.kind().cloudevents_type(),
        "time": n.time.to_string(),
        "subject": n.event.object().name,
        "datacontenttype": "application/json",
        "data": data(&n.event),
    })
}

/// Slack mrkdwn: `&`, `<` and `>` escaped as Slack asks, so a name or message can never become
/// a link or a mention.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A code span. Kubernetes names and plan hashes hold no backtick; anything that does is
/// shown with `'`, so it cannot end the span.
fn code(s: &str) -> String {
    format!("`{}`", esc(&s.replace('`', "'")))
}

fn clip(s: &str) -> String {
    if s.chars().count() <= SLACK_MAX_TEXT {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(SLACK_MAX_TEXT).collect::<String>())
    }
}

/// The Slack message: a bold headline naming the object, then what to know or do.
pub fn slack_text(event: &Event) -> String {
    let o = event.object();
    let on = format!("{} {}", o.kind.as_str(), code(&format!("{}/{}", o.namespace, o.name)));
    match event {
        Event::AwaitingApproval {
            plan_hash,
            counts,
            approve_command,
            ..
        } => format!(
            "*Plan waiting for approval* on {on}\nPlan {}: {counts}.\nApprove it with {}",
            code(plan_hash),
            code(approve_command)
        ),
        Event::PolicyDenied {
            rule, address, message, ..
        } => format!(
            "*Policy denied* a resource on {on}\nRule {} refused {}: {}",
            code(rule),
            code(address),
            esc(&clip(message))
        ),
        Event::DriftFound { counts, .. } => format!("*Drift found* on {on}\nResolving it would mean {counts}."),
        Event::ApplyFailed { failures, reason, .. } => {
            let times = if *failures == 1 { "once" } else { "times in a row" };
            let count = if *failures == 1 {
                String::new()
            } else {
                format!("{failures} ")
            };
            format!("*Apply failed* {count}{times} on {on}\n{}", esc(&clip(reason)))
        }
        Event::Destroyed { .. } => format!("*Destroyed*: the resources of {on} are gone."),
        Event::StateLockedBySomeoneElse { lock_id, who, .. } => format!(
            "*State locked* by someone else on {on}\nHeld by {} (lock {}).",
            esc(&clip(who)),
            code(lock_id)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ObjectRef, PlanCounts};
    use captf_shared::Kind;

    fn n(event: Event) -> Notification {
        Notification {
            event,
            id: "id-1".into(),
            time: Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
        }
    }

    fn obj() -> ObjectRef {
        ObjectRef::new(Kind::TerraformCluster, "team-a", "prod-eu")
    }

    #[test]
    fn the_slack_text_carries_the_approve_line_in_a_code_span() {
        let e = Event::awaiting_approval(
            obj(),
            "3f2a",
            PlanCounts {
                add: 1,
                change: 0,
                destroy: 2,
                replace: 1,
            },
        );
        let t = slack_text(&e);
        assert!(
            t.contains("`kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a`"),
            "{t}"
        );
        assert!(t.contains("1 to add, 0 to change, 2 to destroy, 1 to replace"), "{t}");
    }

    #[test]
    fn slack_markup_in_a_message_is_escaped() {
        let e = Event::ApplyFailed {
            object: obj(),
            failures: 3,
            reason: "<!channel> & <https://evil|click>".into(),
        };
        let t = slack_text(&e);
        assert!(t.contains("&lt;!channel&gt; &amp; &lt;https://evil|click&gt;"), "{t}");
        assert!(t.contains("3 times in a row"), "{t}");
    }

    #[test]
    fn a_long_message_is_clipped_on_a_character_boundary() {
        let e = Event::PolicyDenied {
            object: obj(),
            rule: "r".into(),
            address: "a".into(),
            message: "é".repeat(SLACK_MAX_TEXT * 3),
        };
        let t = slack_text(&e);
        assert!(t.chars().count() < SLACK_MAX_TEXT + 200, "{}", t.len());
        assert!(t.ends_with('…'));
    }

    #[test]
    fn a_cloudevent_has_the_required_attributes() {
        let v = cloudevent(&n(Event::Destroyed { object: obj() }));
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["id"], "id-1");
        assert_eq!(v["type"], "io.captf.object.destroyed");
        assert_eq!(v["source"], "/namespaces/team-a/terraformclusters/prod-eu");
        assert_eq!(v["time"], "2027-01-15T08:00:00Z");
        assert_eq!(v["data"]["object"]["kind"], "TerraformCluster");
    }

    #[test]
    fn every_event_renders_for_every_target_kind() {
        let events = [
            Event::awaiting_approval(obj(), "h", PlanCounts::default()),
            Event::PolicyDenied {
                object: obj(),
                rule: "r".into(),
                address: "a".into(),
                message: "m".into(),
            },
            Event::DriftFound {
                object: obj(),
                counts: PlanCounts::default(),
            },
            Event::ApplyFailed {
                object: obj(),
                failures: 1,
                reason: "x".into(),
            },
            Event::Destroyed { object: obj() },
            Event::StateLockedBySomeoneElse {
                object: obj(),
                lock_id: "l".into(),
                who: "w".into(),
            },
        ];
        for e in events {
            for k in [TargetKind::Generic, TargetKind::Slack, TargetKind::CloudEvents] {
                let (_, body) = render(k, &n(e.clone()));
                let v: Value = serde_json::from_slice(&body).unwrap();
                assert!(v.is_object(), "{k:?} {e:?}");
                if k != TargetKind::Slack {
                    assert_eq!(v["data"]["object"]["name"], "prod-eu");
                }
            }
        }
    }
}
