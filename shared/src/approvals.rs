//! Who approved a plan, and whether that is enough (docs/rules.md, "Approvals"). PURE: the
//! admission webhook records approvers with these rules, the controller counts them before an
//! apply may carry the approval, and `kubectl captf` shows the count.
//!
//! Without `captf.io/approvals-required` one approval by anyone allowed to `approve` is enough,
//! as it always was. With it, the plan needs that many distinct approvers, and the user who last
//! changed the spec is not one of them: a change and its approval come from different people.

use crate::keys::{ANNOTATION_APPROVALS_REQUIRED, MAX_APPROVALS_REQUIRED};

/// The longest user name kept in the approvers list; a longer one is cut (Kubernetes user names
/// are short; the bound keeps the annotation small whatever an authenticator sends).
pub const MAX_APPROVER_NAME_BYTES: usize = 256;
/// The most approvers the list keeps: every approver any policy can ask for, and the author.
pub const MAX_APPROVERS_KEPT: usize = MAX_APPROVALS_REQUIRED as usize + 1;

/// `captf.io/approvals-required` read against a cap (the policy's `--max-approvals-required`).
/// `Ok(None)`: not set. An error says what is wrong, naming the annotation.
pub fn approvals_required(value: Option<&str>, cap: u32) -> Result<Option<u32>, String> {
    let Some(v) = value else {
        return Ok(None);
    };
    let cap = cap.clamp(1, MAX_APPROVALS_REQUIRED);
    match v.trim().parse::<u32>() {
        Ok(n) if (1..=cap).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "metadata.annotations[{ANNOTATION_APPROVALS_REQUIRED}]: must be a whole number from 1 to {cap} (the \
             approval policy's --max-approvals-required), got {:?}",
            crate::validation::cut_to_bytes(v, 64)
        )),
    }
}

/// What the controller counts when the annotation does not read (the webhook refuses such a
/// value, but it may have been written while the webhook was away): the most any policy asks,
/// so a value nobody can read never lets a plan through with fewer approvals than meant.
pub fn approvals_required_or_strictest(value: Option<&str>) -> Option<u32> {
    approvals_required(value, MAX_APPROVALS_REQUIRED).unwrap_or(Some(MAX_APPROVALS_REQUIRED))
}

/// The approvers list as the annotation holds it (a JSON list of names). A value that does not
/// read is an empty list: only the webhook writes it.
pub fn parse_approvers(value: Option<&str>) -> Vec<String> {
    value
        .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.is_empty())
        .take(MAX_APPROVERS_KEPT)
        .collect()
}

/// The annotation's value for a list.
pub fn approvers_value(approvers: &[String]) -> String {
    serde_json::to_string(approvers).unwrap_or_else(|_| "[]".to_string())
}

/// The approvers after `user` approved `hash`: the old list when it was for the same hash, with
/// `user` added once; a new plan starts a new list. Bounded by [`MAX_APPROVERS_KEPT`] (a full
/// list already holds more approvers than any policy can ask for).
pub fn after_approval(old_hash: Option<&str>, old: &[String], hash: &str, user: &str) -> Vec<String> {
    let user = crate::validation::cut_to_bytes(user, MAX_APPROVER_NAME_BYTES).into_owned();
    let mut list: Vec<String> = if old_hash == Some(hash) {
        old.iter().take(MAX_APPROVERS_KEPT).cloned().collect()
    } else {
        Vec::new()
    };
    if !list.contains(&user) && list.len() < MAX_APPROVERS_KEPT {
        list.push(user);
    }
    list
}

/// The approvals of a plan, counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    /// How many are needed: `None` without `captf.io/approvals-required`, where the approval
    /// itself is enough, whoever wrote it (recorded or not, as before approvers were counted).
    pub required: Option<u32>,
    /// The approvers that count, in order.
    pub counted: Vec<String>,
    /// The author's own approval, which does not count (only with `approvals-required`).
    pub author_refused: Option<String>,
}

impl Tally {
    /// Enough to apply the approved plan (the caller checks that an approval names it).
    pub fn enough(&self) -> bool {
        self.missing() == 0
    }

    /// How many more approvals the plan needs.
    pub fn missing(&self) -> u32 {
        self.required.map_or(0, |r| {
            r.saturating_sub(u32::try_from(self.counted.len()).unwrap_or(u32::MAX))
        })
    }
}

/// Count the approvals of a plan: `required` (read by [`approvals_required`]), the approvers
/// list, the newest approver (`captf.io/approved-by`, which alone stands for the list on objects
/// approved before the list was kept) and the spec's author.
pub fn tally(required: Option<u32>, approvers: &[String], approved_by: Option<&str>, author: Option<&str>) -> Tally {
    let mut list: Vec<String> = approvers.to_vec();
    if list.is_empty()
        && let Some(by) = approved_by.filter(|b| !b.is_empty())
    {
        list.push(by.to_string());
    }
    let mut seen = Vec::new();
    let mut author_refused = None;
    for a in list {
        if seen.contains(&a) {
            continue;
        }
        if required.is_some() && author == Some(a.as_str()) {
            author_refused = Some(a);
            continue;
        }
        seen.push(a);
    }
    Tally {
        required,
        counted: seen,
        author_refused,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn approvals_required_is_a_number_from_one_to_the_cap() {
        assert_eq!(approvals_required(None, 3), Ok(None));
        assert_eq!(approvals_required(Some("2"), 3), Ok(Some(2)));
        assert_eq!(approvals_required(Some(" 3 "), 3), Ok(Some(3)));
        for bad in ["0", "4", "-1", "two", "", "99999999999"] {
            let e = approvals_required(Some(bad), 3).unwrap_err();
            assert!(
                e.starts_with("metadata.annotations[captf.io/approvals-required]: must be a whole number from 1 to 3"),
                "{e}"
            );
        }
        // No policy can raise the cap past the hard maximum.
        assert!(approvals_required(Some("11"), 50).is_err());
        assert_eq!(approvals_required(Some("10"), 50), Ok(Some(10)));
    }

    #[test]
    fn a_required_count_that_does_not_read_counts_as_the_strictest() {
        assert_eq!(
            approvals_required_or_strictest(Some("lots")),
            Some(MAX_APPROVALS_REQUIRED)
        );
        assert_eq!(approvals_required_or_strictest(Some("2")), Some(2));
        assert_eq!(approvals_required_or_strictest(None), None);
    }

    #[test]
    fn without_approvals_required_one_approval_by_anyone_is_enough() {
        let t = tally(None, &names(&["alice"]), Some("alice"), Some("alice"));
        assert!(t.enough(), "the author may approve their own change, as before");
        assert!(
            tally(None, &[], None, None).enough(),
            "an approval nobody recorded (no webhook) is enough, as before"
        );
        // An object approved before the list was kept: approved-by stands for it.
        assert!(tally(None, &[], Some("bob"), None).enough());
    }

    #[test]
    fn approvals_required_needs_that_many_distinct_approvers_none_of_them_the_author() {
        let t = tally(Some(2), &names(&["alice", "bob"]), Some("bob"), Some("alice"));
        assert!(!t.enough());
        assert_eq!(t.counted, ["bob"]);
        assert_eq!(t.author_refused.as_deref(), Some("alice"));
        assert_eq!(t.missing(), 1);
        let t = tally(
            Some(2),
            &names(&["alice", "bob", "carol"]),
            Some("carol"),
            Some("alice"),
        );
        assert!(t.enough());
        assert_eq!(t.counted, ["bob", "carol"]);
        let t = tally(Some(2), &names(&["bob", "bob"]), Some("bob"), None);
        assert!(!t.enough(), "one person twice is one approval");
    }

    #[test]
    fn an_approval_adds_to_the_list_of_the_same_plan_and_a_new_plan_starts_a_new_list() {
        let l = after_approval(None, &[], "h1", "alice");
        assert_eq!(l, ["alice"]);
        let l = after_approval(Some("h1"), &l, "h1", "bob");
        assert_eq!(l, ["alice", "bob"]);
        assert_eq!(after_approval(Some("h1"), &l, "h1", "alice"), ["alice", "bob"]);
        assert_eq!(after_approval(Some("h1"), &l, "h2", "carol"), ["carol"]);
    }

    #[test]
    fn the_approvers_annotation_reads_back_what_was_written_and_nothing_else() {
        let l = names(&["alice", "system:serviceaccount:ns:ci,\"x\""]);
        assert_eq!(parse_approvers(Some(&approvers_value(&l))), l);
        assert!(parse_approvers(Some("alice,bob")).is_empty());
        assert!(parse_approvers(None).is_empty());
    }

    proptest! {
        #[test]
        fn the_approvers_list_stays_bounded(users in prop::collection::vec("[a-z]{1,3}|[ -~]{300,400}", 0..40)) {
            let mut l: Vec<String> = vec![];
            for u in &users {
                l = after_approval(Some("h"), &l, "h", u);
                prop_assert!(l.len() <= MAX_APPROVERS_KEPT);
                prop_assert!(l.iter().all(|n| n.len() <= MAX_APPROVER_NAME_BYTES));
            }
            let t = tally(Some(MAX_APPROVALS_REQUIRED), &l, None, None);
            prop_assert!(t.counted.len() <= MAX_APPROVERS_KEPT);
        }

        #[test]
        fn the_author_never_counts_when_approvals_are_required(
            approvers in prop::collection::vec("[a-d]", 0..8),
            author in "[a-d]",
            required in 1u32..4,
        ) {
            let t = tally(Some(required), &approvers, None, Some(&author));
            prop_assert!(!t.counted.contains(&author));
            let distinct: std::collections::BTreeSet<_> = approvers.iter().filter(|a| **a != author).collect();
            prop_assert_eq!(t.counted.len(), distinct.len());
            prop_assert_eq!(t.enough(), distinct.len() >= required as usize);
        }
    }
}
