//! Who may approve: an approval, or a guard that lets destructive plans through, is authorized by
//! the API server for the custom verb `approve`, not by write access to the object.
//!
//! Anyone who may patch an object may write its annotations and its spec. Approving a destructive
//! plan (`captf.io/approve-plan`) and turning the guard off (`spec.guard.destructive: Allow`) are
//! decisions RBAC must be able to give to fewer people than editing, so the validating webhook asks
//! the API server, with a SubjectAccessReview, whether the requesting user may `approve` the
//! object (`infrastructure.cluster.x-k8s.io`, the kind's plural, its namespace and name). The
//! chart ships a ClusterRole granting it (docs/operating.md, "Granting approvers").
//!
//! [`needs_approve`] is the pure decision (old and new object in, the reasons to ask out);
//! [`Authorizer`] is the question, behind a trait so tests answer it without an API server;
//! [`KubeAuthorizer`] asks the API server; [`enforce`] turns the answer into a refusal or none.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use captf_shared::keys;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};

/// The custom verb checked.
pub const APPROVE_VERB: &str = "approve";
/// How long the webhook waits for the API server's answer before it refuses the request: less
/// than the 5 s the API server gives the webhook (the chart's `timeoutSeconds`), so the user reads
/// this refusal rather than a timeout.
pub const DEFAULT_AUTHORIZE_TIMEOUT: Duration = Duration::from_secs(3);
/// The approver ClusterRole the chart ships, by default (`<release>-approver`), named in refusals.
pub const DEFAULT_APPROVER_ROLE: &str = "captf-approver";

/// Why a request must be authorized for `approve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `captf.io/approve-plan` set to a new value (the plan hash it approves).
    Approval { plan: String },
    /// `spec.guard` set to let every plan through (`approval: Never`, or `destructive: Allow`
    /// without an `approval`), where it did not.
    GuardAllow,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Approval { plan } => write!(f, "approve plan {} ({})", quote(plan), keys::ANNOTATION_APPROVE_PLAN),
            Reason::GuardAllow => {
                f.write_str("set spec.guard to let every plan through (approval Never, or destructive Allow)")
            }
        }
    }
}

/// What the webhook reads of one side (old or new) of a request to decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Side<'a> {
    /// The value of `captf.io/approve-plan` (an empty value is no approval).
    pub approve_plan: Option<&'a str>,
    /// The value of `captf.io/approved-by` (after the mutating webhook: the user of the newest
    /// approval).
    pub approved_by: Option<&'a str>,
    /// Whether `spec.guard.destructive` (of a template: `spec.template.spec.guard.destructive`)
    /// is `Allow`.
    pub guard_allows: bool,
}

/// The object the question is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The kind's plural (`terraformclusters`).
    pub resource: String,
    pub namespace: String,
    /// Empty on a create with `generateName` (the question is then about any name).
    pub name: String,
}

impl Target {
    /// The kind's API group.
    pub fn group(&self) -> &'static str {
        GROUP
    }
}

const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// A request that may only be admitted if its user may `approve` the target.
#[derive(Clone, Debug, PartialEq)]
pub struct ApproveCheck {
    pub target: Target,
    /// The requesting user, as the API server sent it in the review.
    pub user: UserInfo,
    pub reasons: Vec<Reason>,
}

/// The plural of a served kind (the resource RBAC names), `None` for any other kind.
pub use captf_shared::types::plural;

/// Why a CREATE (`old` is `None`) or UPDATE needs the `approve` verb: it sets
/// approves a plan ([`approval_act`]), or turns the guard to let every plan through where it did
/// not. Removing or keeping an approval, and setting the guard back, need nothing. PURE.
pub fn reasons(old: Option<Side<'_>>, new: Side<'_>) -> Vec<Reason> {
    let mut out = Vec::new();
    fn nonempty(s: Option<&str>) -> Option<&str> {
        s.filter(|s| !s.is_empty())
    }
    let old = old.unwrap_or_default();
    if let Some(plan) = approval_act(
        nonempty(old.approve_plan),
        nonempty(old.approved_by),
        nonempty(new.approve_plan),
        nonempty(new.approved_by),
    ) {
        out.push(Reason::Approval { plan: plan.to_string() });
    }
    if new.guard_allows && !old.guard_allows {
        out.push(Reason::GuardAllow);
    }
    out
}

/// Whether a request approves a plan (docs/rules.md, "Approvals"), and which: it sets
/// `captf.io/approve-plan` to a value the object did not hold, or keeps it and writes another
/// approver than the one recorded (leaving `captf.io/approved-by` out is not writing one) (`kubectl captf approve` by a second person writes that
/// person's name; the mutating webhook then records the user the API server authenticated, so
/// writing a name is approving as oneself). Removing or keeping an approval approves nothing.
/// Empty values are read as absent by the caller. PURE.
pub fn approval_act<'n>(
    old_plan: Option<&str>,
    old_by: Option<&str>,
    new_plan: Option<&'n str>,
    new_by: Option<&str>,
) -> Option<&'n str> {
    let plan = new_plan?;
    (old_plan != Some(plan) || (new_by.is_some() && new_by != old_by)).then_some(plan)
}

/// The check a request needs, if any (see [`reasons`]). PURE.
pub fn needs_approve(
    kind: &str,
    namespace: &str,
    name: &str,
    old: Option<Side<'_>>,
    new: Side<'_>,
    user: impl FnOnce() -> UserInfo,
) -> Option<ApproveCheck> {
    let resource = plural(kind)?;
    let reasons = reasons(old, new);
    if reasons.is_empty() {
        return None;
    }
    Some(ApproveCheck {
        target: Target {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        user: user(),
        reasons,
    })
}

/// The SubjectAccessReview that asks the question.
pub fn access_review(check: &ApproveCheck) -> SubjectAccessReview {
    let u = &check.user;
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: u.username.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone().filter(|e: &BTreeMap<_, _>| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.to_string()),
                resource: Some(check.target.resource.clone()),
                verb: Some(APPROVE_VERB.to_string()),
                namespace: Some(check.target.namespace.clone()).filter(|n| !n.is_empty()),
                name: Some(check.target.name.clone()).filter(|n| !n.is_empty()),
                ..ResourceAttributes::default()
            }),
            non_resource_attributes: None,
        },
        ..SubjectAccessReview::default()
    }
}

/// The API server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The authorizer's reason, if it gave one.
    pub reason: Option<String>,
}

impl From<&SubjectAccessReviewStatus> for Verdict {
    fn from(s: &SubjectAccessReviewStatus) -> Self {
        let reason = s
            .reason
            .clone()
            .filter(|r| !r.is_empty())
            .or_else(|| s.evaluation_error.clone().filter(|e| !e.is_empty()));
        Verdict {
            // `denied` wins: an authorizer that denies outright is not overruled.
            allowed: s.allowed && s.denied != Some(true),
            reason,
        }
    }
}

/// The question could not be asked or answered.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizeError {
    #[error("the SubjectAccessReview failed: {0}")]
    Api(String),
    #[error("the SubjectAccessReview was not answered within {0:?}")]
    Timeout(Duration),
    #[error("the SubjectAccessReview came back without a status")]
    NoStatus,
}

/// The future an [`Authorizer`] answers with.
pub type AuthorizeFuture<'a> = Pin<Box<dyn Future<Output = Result<Verdict, AuthorizeError>> + Send + 'a>>;

/// Asks whether a user may `approve` an object.
pub trait Authorizer: fmt::Debug + Send + Sync {
    fn authorize<'a>(&'a self, check: &'a ApproveCheck) -> AuthorizeFuture<'a>;
}

/// The API server answers: a SubjectAccessReview created with the webhook's own account (which
/// needs `create` on `subjectaccessreviews`).
#[derive(Clone)]
pub struct KubeAuthorizer {
    client: kube::Client,
    timeout: Duration,
}

impl fmt::Debug for KubeAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeAuthorizer")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl KubeAuthorizer {
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        KubeAuthorizer { client, timeout }
    }
}

impl Authorizer for KubeAuthorizer {
    fn authorize<'a>(&'a self, check: &'a ApproveCheck) -> AuthorizeFuture<'a> {
        Box::pin(async move {
            let api = kube::Api::<SubjectAccessReview>::all(self.client.clone());
            let review = access_review(check);
            let created = tokio::time::timeout(self.timeout, api.create(&Default::default(), &review))
                .await
                .map_err(|_| AuthorizeError::Timeout(self.timeout))?
                .map_err(|e| AuthorizeError::Api(e.to_string()))?;
            created
                .status
                .as_ref()
                .map(Verdict::from)
                .ok_or(AuthorizeError::NoStatus)
        })
    }
}

/// How approvals are authorized.
#[derive(Clone, Debug)]
pub struct Approvals {
    /// `None`: not checked (any user who may write the object may approve).
    pub authorizer: Option<std::sync::Arc<dyn Authorizer>>,
    /// The ClusterRole refusals tell people to be bound to.
    pub approver_role: String,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            authorizer: None,
            approver_role: DEFAULT_APPROVER_ROLE.to_string(),
        }
    }
}

/// Why a review that needs `check` is refused: `None` when the check is off or the user may
/// approve; the refusal when the user may not, or when the API server could not say (the caller
/// answers 403 with it).
pub async fn enforce(check: &ApproveCheck, approvals: &Approvals) -> Option<String> {
    let authorizer = approvals.authorizer.as_deref()?;
    match authorizer.authorize(check).await {
        Ok(v) if v.allowed => None,
        Ok(v) => Some(refusal(check, &v, &approvals.approver_role)),
        Err(e) => Some(unavailable(check, &e)),
    }
}

fn user_name(check: &ApproveCheck) -> String {
    quote(check.user.username.as_deref().unwrap_or_default())
}

fn what(check: &ApproveCheck) -> String {
    check
        .reasons
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ")
}

fn object(check: &ApproveCheck) -> String {
    let t = &check.target;
    let name = if t.name.is_empty() {
        String::new()
    } else {
        format!(" {}", quote(&t.name))
    };
    format!("{}.{GROUP}{name} in namespace {}", t.resource, quote(&t.namespace))
}

/// The message of a refused request: who, what, the verb and resource, and what to grant.
pub fn refusal(check: &ApproveCheck, verdict: &Verdict, approver_role: &str) -> String {
    let t = &check.target;
    let why = verdict
        .reason
        .as_deref()
        .map(|r| format!(" (the authorizer said: {r})"))
        .unwrap_or_default();
    format!(
        "user {} may not {what}: that needs the {APPROVE_VERB:?} verb on {object}, which writing the object \
         does not give{why}. Grant it by binding the user to the ClusterRole {role} with a RoleBinding in \
         namespace {ns} (or a Role granting verb {APPROVE_VERB:?} on resource {res:?} in API group {GROUP:?})",
        user_name(check),
        what = what(check),
        object = object(check),
        role = quote(approver_role),
        ns = quote(&t.namespace),
        res = t.resource,
    )
}

/// The message of a request refused because the API server could not be asked (fail closed).
pub fn unavailable(check: &ApproveCheck, error: &AuthorizeError) -> String {
    format!(
        "cannot check whether user {} may {}: {error}. Refused, since the {APPROVE_VERB:?} verb on {} could \
         not be checked; retry, and if it persists check the webhook's access to the API server (it needs \
         create on subjectaccessreviews.authorization.k8s.io)",
        user_name(check),
        what(check),
        object(check),
    )
}

/// A string as a message quotes it: JSON-quoted, control characters replaced, cut to 253 chars.
fn quote(s: &str) -> String {
    let cut: String = s.chars().take(253).collect();
    serde_json::to_string(&cut)
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn approving(plan: &str) -> Side<'_> {
        Side {
            approve_plan: Some(plan),
            approved_by: None,
            guard_allows: false,
        }
    }

    const ALLOW: Side<'static> = Side {
        approve_plan: None,
        approved_by: None,
        guard_allows: true,
    };

    #[test]
    fn an_editor_who_may_patch_cannot_approve_without_the_approve_verb() {
        // Writing the annotation is what an editor can do; the decision asks for the verb.
        assert_eq!(
            reasons(Some(Side::default()), approving("h1")),
            [Reason::Approval { plan: "h1".into() }]
        );
        // Replacing somebody's approval with another plan's hash is a new approval.
        assert_eq!(
            reasons(Some(approving("h1")), approving("h2")),
            [Reason::Approval { plan: "h2".into() }]
        );
        // So is creating an object that carries one.
        assert_eq!(reasons(None, approving("h1")), [Reason::Approval { plan: "h1".into() }]);
        let check = needs_approve("TerraformCluster", "team-a", "c1", None, approving("h1"), || UserInfo {
            username: Some("eve".into()),
            groups: Some(vec!["editors".into(), "system:authenticated".into()]),
            uid: Some("u-1".into()),
            extra: Some([("scopes".to_string(), vec!["x".to_string()])].into()),
        })
        .unwrap();
        let sar = access_review(&check);
        let attrs = sar.spec.resource_attributes.clone().unwrap();
        assert_eq!(attrs.verb.as_deref(), Some("approve"));
        assert_eq!(attrs.group.as_deref(), Some("infrastructure.cluster.x-k8s.io"));
        assert_eq!(attrs.resource.as_deref(), Some("terraformclusters"));
        assert_eq!(attrs.namespace.as_deref(), Some("team-a"));
        assert_eq!(attrs.name.as_deref(), Some("c1"));
        assert_eq!(sar.spec.user.as_deref(), Some("eve"));
        assert_eq!(sar.spec.uid.as_deref(), Some("u-1"));
        assert_eq!(sar.spec.groups.as_ref().unwrap().len(), 2);
        assert_eq!(sar.spec.extra.as_ref().unwrap()["scopes"], ["x"]);
        let denied = refusal(
            &check,
            &Verdict {
                allowed: false,
                reason: None,
            },
            "captf-approver",
        );
        for part in [
            "\"eve\"",
            "\"approve\" verb",
            "terraformclusters.infrastructure.cluster.x-k8s.io \"c1\"",
            "\"captf-approver\"",
            "namespace \"team-a\"",
        ] {
            assert!(denied.contains(part), "{part} not in {denied}");
        }
    }

    #[test]
    fn setting_the_guard_to_allow_needs_the_approve_verb() {
        assert_eq!(reasons(Some(Side::default()), ALLOW), [Reason::GuardAllow]);
        assert_eq!(reasons(None, ALLOW), [Reason::GuardAllow]);
        // A template carries the guard its machines get.
        let check = needs_approve("TerraformMachineTemplate", "ns", "t", None, ALLOW, UserInfo::default).unwrap();
        assert_eq!(check.target.resource, "terraformmachinetemplates");
        // Already Allow (approved before): other edits need nothing; back to Block needs nothing.
        assert!(reasons(Some(ALLOW), ALLOW).is_empty());
        assert!(reasons(Some(ALLOW), Side::default()).is_empty());
        // Both at once: both reasons, one question.
        let both = Side {
            approve_plan: Some("h"),
            approved_by: None,
            guard_allows: true,
        };
        assert_eq!(
            reasons(Some(Side::default()), both),
            [Reason::Approval { plan: "h".into() }, Reason::GuardAllow]
        );
    }

    #[test]
    fn a_second_approver_of_the_same_plan_approves_and_needs_the_verb() {
        let by = |plan, by| Side {
            approve_plan: Some(plan),
            approved_by: Some(by),
            guard_allows: false,
        };
        assert_eq!(
            reasons(Some(by("h1", "alice")), by("h1", "bob")),
            [Reason::Approval { plan: "h1".into() }]
        );
        // The same approver again changes nothing.
        assert!(reasons(Some(by("h1", "alice")), by("h1", "alice")).is_empty());
        assert_eq!(
            approval_act(Some("h1"), Some("alice"), Some("h1"), Some("bob")),
            Some("h1")
        );
        assert_eq!(approval_act(Some("h1"), Some("alice"), None, Some("bob")), None);
        assert_eq!(approval_act(None, None, Some("h1"), None), Some("h1"));
        assert_eq!(approval_act(Some("h1"), Some("alice"), Some("h1"), None), None);
    }

    #[test]
    fn removing_an_approval_needs_no_check() {
        assert!(reasons(Some(approving("h1")), Side::default()).is_empty());
        assert!(reasons(Some(approving("h1")), approving("")).is_empty());
        // Keeping it through another edit needs nothing either.
        assert!(reasons(Some(approving("h1")), approving("h1")).is_empty());
        assert!(
            needs_approve(
                "TerraformCluster",
                "ns",
                "c",
                Some(approving("h1")),
                Side::default(),
                || { unreachable!("no user is read when no check is needed") }
            )
            .is_none()
        );
    }

    #[test]
    fn a_kind_captf_does_not_serve_is_never_checked() {
        assert!(needs_approve("Secret", "ns", "s", None, approving("h"), UserInfo::default).is_none());
    }

    #[test]
    fn an_authorizer_that_denies_outright_is_not_overruled() {
        let status = SubjectAccessReviewStatus {
            allowed: true,
            denied: Some(true),
            reason: Some("no".into()),
            evaluation_error: None,
        };
        assert!(!Verdict::from(&status).allowed);
    }
}
