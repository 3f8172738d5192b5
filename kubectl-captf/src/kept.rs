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
    let plan: KeptPlan = match serde_json::from_slice(&record.0) {
        Ok(p) => p,
        Err(e) => return Kept::Unreadable(format!("{PLAN_KEY} is not a plan record: {e}")),
    };
    if !plan.hash.eq_ignore_ascii_case(hash) {
        return Kept::Other { hash: plan.hash };
    }
    let text = data
        .and_then(|d| d.get(PLAN_TEXT_KEY))
        .map(|t| String::from_utf8_lossy(&t.0).into_owned())
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

    #[test]
    fn no_secret_no_record_or_a_bad_record_is_said_as_such() {
        assert_eq!(kept(None, "h"), Kept::Nothing);
        assert_eq!(kept(Some(&secret(None, Some("text"))), "h"), Kept::Nothing);
        assert!(
            matches!(kept(Some(&secret(Some(b"{not json"), None)), "h"), Kept::Unreadable(w) if w.contains("plan.json"))
        );
    }
}
