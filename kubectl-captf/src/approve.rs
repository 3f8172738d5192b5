//! `approve`: approve exactly the plan waiting for approval, after asking when no hash is given.

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use captf_core::explain::explain_snapshot;
use captf_shared::keys;

use crate::annotate::{annotate_all, stored, whoami};
use crate::conn::{Confirm, Conn};
use crate::errors::PluginError;
use crate::kept;
use crate::live_read::{explanation, read};
use crate::printed::{Printed, pretty};
use crate::rules;
use crate::target::Target;
use crate::words;

/// Ask a person on the terminal; `None` when there is no terminal to ask on.
fn ask_terminal(question: &str) -> Option<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return None;
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question} [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).ok()?;
    Some(matches!(line.trim(), "y" | "Y" | "yes" | "Yes" | "YES"))
}

/// What `approve` shows before it asks: the plan's counts and its resource changes.
pub fn approval_question(p: &captf_shared::types::PendingPlan, what: &str, kept: &kept::Kept) -> String {
    let mut q = format!(
        "Plan {} on {what}: {} to add, {} to change, {} to destroy, {} to replace (planned by Job {}).\n",
        p.hash, p.add, p.change, p.destroy, p.replace, p.job
    );
    if let kept::Kept::This { plan, .. } = kept {
        if !kept::matches_recorded(plan, p) {
            q.push_str(
                "  The kept list below does not add up to these counts, which the controller recorded with the hash: \
                 it cannot be verified (the runner's pod wrote it); read the full plan before approving.\n",
            );
        }
        for c in plan.changes.iter().take(50) {
            q.push_str(&format!("  {:<8} {}\n", c.action(), c.address));
        }
        let more = plan.changes.len().saturating_sub(50) + plan.more;
        if more > 0 {
            q.push_str(&format!("  … and {more} more (kubectl captf plan shows them all)\n"));
        }
    }
    q.push_str(&format!("Approve plan {}?", p.hash));
    q
}

pub(crate) async fn approve(
    conn: &Conn,
    t: &Target,
    typed: &str,
    hash: Option<&str>,
    yes: bool,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    let what = r.id.what();
    let (p, written, by, after) = match rules::approval(&e.plan.booked, hash, now) {
        Ok(rules::Approval::Write(p)) => {
            if hash.is_none() && !yes {
                let (_, kept) = kept::read(&conn.client, r.id.kind, &r.id.namespace, &r.id.name, &p.hash).await;
                let question = approval_question(&p, &what, &kept);
                let answer = match conn.confirm {
                    Confirm::Answer(a) => Some(a),
                    Confirm::Terminal => ask_terminal(&question),
                };
                match answer {
                    Some(true) => {}
                    Some(false) => {
                        return Err(PluginError::Refused(format!(
                            "plan {} on {what} was not approved; nothing was written",
                            p.hash
                        )));
                    }
                    None => {
                        return Err(PluginError::Usage(format!(
                            "no terminal to ask on: review the plan with `kubectl captf plan {typed}`, then approve it with `kubectl captf approve {typed} --hash <hash>` (or --yes)"
                        )));
                    }
                }
            }
            let by = whoami(conn).await;
            let written = annotate_all(
                conn,
                &r,
                &[
                    (keys::ANNOTATION_APPROVE_PLAN, p.hash.as_str()),
                    (keys::ANNOTATION_APPROVED_BY, by.as_str()),
                ],
            )
            .await?;
            // The webhook records the user the API server authenticated, and every approver.
            let by = stored(&written, keys::ANNOTATION_APPROVED_BY, by);
            let mut after = r.snap.clone();
            after.approve_plan = Some(p.hash.clone());
            after.approved_by = Some(by.clone());
            after.approvers = captf_shared::approvals::parse_approvers(
                written
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(keys::ANNOTATION_APPROVERS))
                    .map(String::as_str),
            );
            (p, true, Some(by), after)
        }
        Ok(rules::Approval::Already(p)) => (p, false, r.snap.approved_by.clone(), r.snap.clone()),
        Err(refusal) => return Err(PluginError::Refused(refusal.to_string())),
    };
    // What the controller does with the approval: the same plan with the annotations as written.
    let mut with = after;
    with.approve_plan = Some(p.hash.clone());
    let approvals = words::approvals_words(&with);
    let after = explain_snapshot(&with, &r.active_check, 0, now);
    let next = words::next_sentence(&after.decision, &after.plan.booked, now);
    if json {
        return Ok(Printed::out(pretty(&json!({
            "object": what, "approved": p.hash, "written": written, "approvedBy": by,
            "approvals": approvals,
            "annotation": {keys::ANNOTATION_APPROVE_PLAN: p.hash}, "next": next,
        }))));
    }
    let by = by.map(|b| format!(" as {b}")).unwrap_or_default();
    let head = if written {
        format!("Approved plan {} on {what}{by}", p.hash)
    } else {
        format!("Plan {} on {what} was already approved{by}; nothing written", p.hash)
    };
    let approvals = approvals
        .filter(|_| with.approvals_required.is_some())
        .map(|a| format!("Approvals: {a}.\n"))
        .unwrap_or_default();
    Ok(Printed::out(format!(
        "{head} ({} to add, {} to change, {} to destroy, {} to replace; Job {}).\n{approvals}Next: {next}\nFollow it with `kubectl captf explain {typed}`.\n",
        p.add, p.change, p.destroy, p.replace, p.job
    )))
}
