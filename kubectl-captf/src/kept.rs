//! The plan kept next to the object: the runner writes the record and the text of a plan that
//! waits for approval into the object's outputs Secret (`plan.json`, `plan.txt`), so `plan` can
//! show it after the runner's pod and its log are gone.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use captf_shared::protocol::{KeptPlan, PLAN_KEY, PLAN_TEXT_KEY};
use captf_shared::{Kind, names};

use crate::errors::from_kube;

/// What the outputs Secret holds for the plan waiting with hash `hash`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// That plan, with its text as the runner's log showed it.
    This { plan: KeptPlan, text: String },
    /// A plan, but another one (kept before the plan now waiting was made).
    Other { hash: String },
    /// No plan is kept.
    Nothing,
    /// The record is there but cannot be read: why.
    Unreadable(String),
}

/// `text` as it may reach a person's terminal: the runner (so the module's code) wrote it, so
/// every control character but newline and tab goes (an escape sequence could move the cursor,
/// recolour or rewrite what was printed above, a carriage return overwrite a line), and so do
/// Unicode's bidirectional overrides (which make text read in another order than it is).
/// PURE.
pub fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| {
            !((c.is_control() && *c != '\n' && *c != '\t')
                || matches!(*c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}'))
        })
        .collect()
}

/// Whether the kept list of changes adds up to the counts the controller recorded for the plan
/// with its hash (from the runner's result, next to the hash): when it does not, the list (which
/// the runner's pod wrote into the outputs Secret) cannot be taken for that plan. PURE.
pub fn matches_recorded(plan: &KeptPlan, recorded: &captf_shared::types::PendingPlan) -> bool {
    if plan.more > 0 {
        // Not all listed: only the summary can be compared.
        let s = &plan.summary;
        return (s.add, s.change, s.destroy, s.replace)
            == (recorded.add, recorded.change, recorded.destroy, recorded.replace);
    }
    let count = |a: &str| plan.changes.iter().filter(|c| c.action() == a).count() as u64;
    (count("create"), count("update"), count("destroy"), count("replace"))
        == (
            u64::from(recorded.add),
            u64::from(recorded.change),
            u64::from(recorded.destroy),
            u64::from(recorded.replace),
        )
}

/// The name of the Secret the plan of `kind` `namespace`/`name` is kept in.
pub fn secret_name(kind: Kind, namespace: &str, name: &str) -> String {
    names::outputs_secret_name(&names::suffix(kind, namespace, name))
}

/// Read the kept plan out of the outputs Secret for the plan with hash `hash` (PURE).
pub fn kept(secret: Option<&Secret>, hash: &str) -> Kept {
    let data = secret.and_then(|s| s.data.as_ref());
    let Some(record) = data.and_then(|d| d.get(PLAN_KEY)) else {
        return Kept::Nothing;
    };
    let mut plan: KeptPlan = match serde_json::from_slice(&record.0) {
        Ok(p) => p,
        Err(e) => return Kept::Unreadable(format!("{PLAN_KEY} is not a plan record: {e}")),
    };
    for c in &mut plan.changes {
        c.address = printable(&c.address);
    }
    plan.hash = printable(&plan.hash);
    if !plan.hash.eq_ignore_ascii_case(hash) {
        return Kept::Other { hash: plan.hash };
    }
    let text = data
        .and_then(|d| d.get(PLAN_TEXT_KEY))
        .map(|t| printable(&String::from_utf8_lossy(&t.0)))
        .unwrap_or_default();
    Kept::This { plan, text }
}

/// Read the outputs Secret of the object live; a Secret the user may not read, or a failed
/// read, is [`Kept::Unreadable`] with the reason (the rest of `plan` still answers).
pub async fn read(client: &kube::Client, kind: Kind, namespace: &str, name: &str, hash: &str) -> (String, Kept) {
    let secret = secret_name(kind, namespace, name);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = match api.get_opt(&secret).await {
        Ok(s) => kept(s.as_ref(), hash),
        Err(err) => Kept::Unreadable(
            from_kube(
                err,
                &format!("read the kept plan in Secret {namespace}/{secret}"),
                ("get", "secrets", ""),
                Some(namespace),
            )
            .to_string(),
        ),
    };
    (secret, found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_shared::protocol::{PlanSummary, PlannedChange};
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(record: Option<&[u8]>, text: Option<&str>) -> Secret {
        let mut data = BTreeMap::new();
        if let Some(r) = record {
            data.insert(PLAN_KEY.to_string(), ByteString(r.to_vec()));
        }
        if let Some(t) = text {
            data.insert(PLAN_TEXT_KEY.to_string(), ByteString(t.as_bytes().to_vec()));
        }
        Secret {
            data: Some(data),
            ..Secret::default()
        }
    }

    fn record(hash: &str) -> Vec<u8> {
        serde_json::to_vec(&KeptPlan {
            hash: hash.into(),
            summary: PlanSummary {
                destroy: 1,
                ..Default::default()
            },
            changes: vec![PlannedChange {
                address: "aws_instance.a".into(),
                actions: vec!["delete".into()],
            }],
            more: 0,
            truncated: false,
            policy_warnings: vec![],
        })
        .unwrap_or_default()
    }

    #[test]
    fn the_kept_plan_is_shown_only_for_the_plan_that_waits() {
        let s = secret(Some(&record("3F2A")), Some("# aws_instance.a will be destroyed\n"));
        match kept(Some(&s), "3f2a") {
            Kept::This { plan, text } => {
                assert_eq!(plan.changes[0].address, "aws_instance.a");
                assert_eq!(text, "# aws_instance.a will be destroyed\n");
            }
            other => panic!("expected the kept plan, got {other:?}"),
        }
        assert_eq!(kept(Some(&s), "9999"), Kept::Other { hash: "3F2A".into() });
    }

    /// The attack: the module's code writes `plan.txt` (and the addresses of `plan.json`) with
    /// terminal escapes that would rewrite what the approver sees, or a list that shows a benign
    /// plan under the real hash. Escapes and bidirectional overrides never reach the terminal,
    /// and a list that does not add up to the counts the controller recorded is said to be
    /// unverifiable.
    #[test]
    fn a_kept_plan_is_printed_without_control_characters_and_checked_against_the_recorded_counts() {
        let text = "# aws_instance.a will be destroyed\n\u{1b}[1A\u{1b}[2K\r# nothing to do\u{202E}\t!\n";
        let s = secret(Some(&record("3f2a")), Some(text));
        let Kept::This { plan, text } = kept(Some(&s), "3f2a") else {
            panic!("expected the kept plan")
        };
        assert_eq!(text, "# aws_instance.a will be destroyed\n[1A[2K# nothing to do\t!\n");
        assert_eq!(printable("a\u{7}b\u{9b}c\u{2066}d"), "abcd");
        let recorded = |destroy: u32, add: u32| captf_shared::types::PendingPlan {
            hash: "3f2a".into(),
            destroy,
            add,
            ..Default::default()
        };
        assert!(matches_recorded(&plan, &recorded(1, 0)));
        assert!(
            !matches_recorded(&plan, &recorded(3, 0)),
            "the real plan destroys three"
        );
        assert!(!matches_recorded(&plan, &recorded(1, 2)));
        let question = crate::approve::approval_question(
            &recorded(3, 0),
            "TerraformCluster default/a",
            &Kept::This {
                plan: plan.clone(),
                text: String::new(),
            },
        );
        assert!(question.contains("cannot be verified"), "{question}");
        let question = crate::approve::approval_question(
            &recorded(1, 0),
            "TerraformCluster default/a",
            &Kept::This {
                plan,
                text: String::new(),
            },
        );
        assert!(!question.contains("cannot be verified"), "{question}");
    }

    #[test]
    fn no_secret_no_record_or_a_bad_record_is_said_as_such() {
        assert_eq!(kept(None, "h"), Kept::Nothing);
        assert_eq!(kept(Some(&secret(None, Some("text"))), "h"), Kept::Nothing);
        assert!(
            matches!(kept(Some(&secret(Some(b"{not json"), None)), "h"), Kept::Unreadable(w) if w.contains("plan.json"))
        );
    }
}
