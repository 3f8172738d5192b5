//! `plan`: the destructive plan waiting for approval, its counts and resource changes.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};
use serde_json::{Value, json};

use captf_core::snapshot::pods_by_job;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::kept;
use crate::live_read::{explanation, read};
use crate::printed::{Printed, pretty};
use crate::target::Target;
use crate::words;

/// One resource change Terraform's plan output names.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub action: &'static str,
    pub address: String,
}

/// The resource changes in a plan's text output (`# aws_instance.a will be destroyed`).
pub fn plan_changes(log: &str) -> Vec<Change> {
    const ENDINGS: [(&str, &str); 6] = [
        (" will be created", "create"),
        (" will be destroyed", "destroy"),
        (" will be updated in-place", "update"),
        (" is tainted, so must be replaced", "replace"),
        (" must be replaced", "replace"),
        (" will be read during apply", "read"),
    ];
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.trim_start().strip_prefix("# ") else {
            continue;
        };
        if let Some((address, action)) = ENDINGS
            .iter()
            .find_map(|(end, action)| rest.trim_end().strip_suffix(end).map(|a| (a, *action)))
            && !address.is_empty()
            && !address.starts_with('(')
        {
            out.push(Change {
                action,
                address: address.to_string(),
            });
        }
    }
    out
}

/// The resource changes the runner's log of `pod` names, or why there are none.
async fn log_changes(conn: &Conn, ns: &str, pod: Option<&str>, job: &str) -> (Vec<Change>, String) {
    let Some(pod) = pod else {
        return (vec![], format!("the pod of Job {job} is gone, and its log with it"));
    };
    let api: Api<Pod> = Api::namespaced(conn.client.clone(), ns);
    let lp = LogParams {
        container: Some("runner".into()),
        ..Default::default()
    };
    match api.logs(pod, &lp).await {
        Ok(log) => {
            let changes = plan_changes(&log);
            let note = if changes.is_empty() {
                "the runner's log names no resource changes".to_string()
            } else {
                String::new()
            };
            (changes, note)
        }
        Err(err) => (
            vec![],
            format!(
                "cannot read the runner's log: {}",
                from_kube(err, "read the log", ("get", "pods/log", ""), Some(ns))
            ),
        ),
    }
}

pub(crate) async fn plan(
    conn: &Conn,
    t: &Target,
    typed: &str,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    let s = &e.plan.booked;
    let what = format!("{} {}/{}", s.kind, s.namespace, s.name);
    let Some(p) = s.status.pending_plan.clone().filter(|p| !p.hash.is_empty()) else {
        let next = words::next_sentence(&e.decision, s, now);
        if json {
            return Ok(Printed::out(pretty(&json!({
                "object": what, "pendingPlan": Value::Null, "next": next,
            }))));
        }
        return Ok(Printed::out(format!("No plan waits for approval on {what}; {next}\n")));
    };
    let names_it = s.approve_plan.as_deref() == Some(p.hash.as_str());
    let approved = names_it && captf_core::decide::approvals(s).enough();
    let approvals = names_it.then(|| words::approvals_words(s)).flatten();
    let (secret, kept) = kept::read(&conn.client, r.id.kind, &s.namespace, &s.name, &p.hash).await;
    let by_job = pods_by_job(&r.pods);
    let pod = by_job.get(p.job.as_str()).and_then(|p| p.metadata.name.clone());
    let kept_where = format!("Secret {}/{secret}", s.namespace);
    let (changes, source, note) = match &kept {
        kept::Kept::This { plan, .. } => {
            let changes = plan
                .changes
                .iter()
                .map(|c| Change {
                    action: c.action(),
                    address: c.address.clone(),
                })
                .collect();
            let mut note = if plan.more > 0 {
                format!("{} more changes are not listed; the full plan is below", plan.more)
            } else {
                String::new()
            };
            if !kept::matches_recorded(plan, &p) {
                let unverified = "the kept list does not add up to the counts the controller recorded with the hash, \
                                  so it cannot be verified (the runner's pod wrote it)";
                note = [note.as_str(), unverified]
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
            }
            (changes, format!("kept in {kept_where}"), note)
        }
        other => {
            let why = match other {
                kept::Kept::Other { hash } => format!("{kept_where} keeps plan {hash}, not this one"),
                kept::Kept::Unreadable(why) => why.clone(),
                _ => format!("{kept_where} keeps no plan"),
            };
            let (changes, log_note) = log_changes(conn, &s.namespace, pod.as_deref(), &p.job).await;
            let note = [why, log_note]
                .into_iter()
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            (changes, "from the runner's log".to_string(), note)
        }
    };
    let full = match &pod {
        Some(pod) => format!("kubectl logs -n {} {pod} -c runner", s.namespace),
        None => format!("kubectl captf logs {typed} --op apply"),
    };
    let approve = format!("kubectl captf approve {typed} --hash {}", p.hash);
    let kept_text = match &kept {
        kept::Kept::This { plan, text } => Some((plan.truncated, text.as_str())),
        _ => None,
    };
    if json {
        return Ok(Printed::out(pretty(&json!({
            "object": what,
            "pendingPlan": {"hash": p.hash, "add": p.add, "change": p.change, "destroy": p.destroy,
                            "replace": p.replace, "job": p.job, "pod": pod},
            "approved": approved,
            "approvals": approvals,
            "policyWarnings": match &kept {
                kept::Kept::This { plan, .. } => plan.policy_warnings.clone(),
                _ => Vec::new(),
            },
            "resources": changes,
            "resourcesFrom": source,
            "keptIn": kept_where,
            "planText": kept_text.map(|(_, t)| t),
            "planTextTruncated": kept_text.map(|(cut, _)| cut),
            "logNote": if note.is_empty() { Value::Null } else { Value::String(note.clone()) },
            "fullPlan": full,
            "approve": approve,
        }))));
    }
    let mut out = format!(
        "Plan {} {} on {what}\n  {} to add, {} to change, {} to destroy, {} to replace\n  planned by Job {}\n",
        p.hash,
        if approved {
            "is approved and waits for the next apply"
        } else if names_it {
            "waits for more approvals"
        } else {
            "waits for approval"
        },
        p.add,
        p.change,
        p.destroy,
        p.replace,
        p.job
    );
    if let Some(a) = &approvals {
        out.push_str(&format!("  {a}\n"));
    }
    if let kept::Kept::This { plan, .. } = &kept
        && !plan.policy_warnings.is_empty()
    {
        out.push_str("\nPolicy warnings (the plan's policies let it through with these):\n");
        for w in &plan.policy_warnings {
            out.push_str(&format!("  {w}\n"));
        }
    }
    if !changes.is_empty() {
        out.push_str(&format!("\nResource changes ({source}):\n"));
        let rows: Vec<Vec<String>> = changes
            .iter()
            .map(|c| vec![format!("  {}", c.action), c.address.clone()])
            .collect();
        out.push_str(&words::table(&["  ACTION", "ADDRESS"], &rows));
    }
    if !note.is_empty() {
        out.push_str(&format!("\nNote: {note}.\n"));
    }
    match kept_text {
        Some((cut, text)) => {
            out.push_str(&format!("\nThe plan, as the runner printed it ({kept_where}):\n\n"));
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
            if cut {
                out.push_str(&format!("[the plan was longer than what is kept; all of it: {full}]\n"));
            }
            out.push('\n');
        }
        None => out.push_str(&format!("\nThe full plan: {full}\n")),
    }
    if !approved {
        out.push_str(&format!("Approve exactly this plan: {approve}\n"));
    }
    Ok(Printed::out(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_text_names_each_resource_change_terraform_prints() {
        let log = "\
captf-runner: plan abc: 1 to add, 1 to change, 1 to destroy, 1 to replace
Terraform will perform the following actions:

  # aws_instance.web will be destroyed
  # (because aws_instance.web is not in configuration)
  - resource \"aws_instance\" \"web\" {
  # aws_s3_bucket.logs must be replaced
  # module.net.aws_vpc.main will be updated in-place
  # null_resource.new[\"a\"] will be created
  # aws_instance.old is tainted, so must be replaced
";
        let got: Vec<String> = plan_changes(log)
            .iter()
            .map(|c| format!("{} {}", c.action, c.address))
            .collect();
        assert_eq!(
            got,
            [
                "destroy aws_instance.web",
                "replace aws_s3_bucket.logs",
                "update module.net.aws_vpc.main",
                "create null_resource.new[\"a\"]",
                "replace aws_instance.old",
            ]
        );
    }
}
