//! The pure part of the webhook: an AdmissionReview body in, an AdmissionReview response out.
//!
//! A thin adapter (docs/conventions.md): it parses the review with kube's types, hands the object to
//! `captf-shared` (`apply_defaults`, `validate_create`, `validate_update`) and builds the response
//! from the request, so `request.uid` is always echoed. It has no side effects at all, so
//! `dryRun: true` and `dryRun: false` are answered identically (and a test checks that).

use std::borrow::Cow;

use base64::Engine as _;
use captf_shared::approvals;
use captf_shared::defaults::apply_defaults;
use captf_shared::keys;
use captf_shared::policy::{self, TenantPolicy, Violation};
use captf_shared::references::{self, ForbiddenReference};
use captf_shared::types::{ApprovalMode, CaptfObject, DestructiveGuard, SERVED_KINDS, TerraformCluster};
use captf_shared::validation::{Report, parse_object, validate_create, validate_update_request};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicResourceScope, Status};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::approval::{self, ApproveCheck};
use crate::watched::Watched;

/// The only AdmissionReview version served.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `status.code` of a denied review.
pub const INVALID_CODE: u16 = 422;
/// `status.reason` of a denied review.
pub const INVALID_REASON: &str = "Invalid";
/// A denial lists at most this many violations (the first ones by field path), then `and K more`.
pub const MAX_LISTED_VIOLATIONS: usize = 20;
/// A denial's message is at most this many bytes (plus the `and K more` tail).
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// At most this many warnings are returned; past it the last one says how many were left out.
pub const MAX_WARNINGS: usize = 10;
/// Each warning is at most this many bytes, control characters replaced by spaces.
pub const MAX_WARNING_BYTES: usize = 512;
/// A raw `spec` longer than this is denied before it is parsed. What a Job runs goes into the inputs
/// Secret, which holds at most 1 MiB; a spec that does not fit in it cannot be run, and refusing it
/// unparsed keeps the memory a review costs bounded (a JSON tree is many times its text).
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;
/// A raw `spec` holding more JSON values than this is denied before it is parsed (the rule is
/// `captf-shared`'s, which the controller applies too).
pub use captf_shared::validation::MAX_SPEC_VALUES;
/// A body the fast path refuses is read again with kube's types (for their exact error) only up to
/// this size; kube's types build every string and list, which can cost many times the body.
pub const MAX_SLOW_PATH_BYTES: usize = 1024 * 1024;
/// Served group, version and kind are quoted in a warning and cut to this many characters.
const MAX_ECHOED_CHARS: usize = 64;

/// Which webhook was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    Mutate,
    Validate,
    /// The CRDs' conversion webhook (`crate::convert`).
    Convert,
}

/// The kind label of a request (bounded: anything CAPTF does not serve is `Other`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindLabel {
    TerraformCluster,
    TerraformMachinePool,
    TerraformMachine,
    TerraformMachineTemplate,
    TerraformClusterTemplate,
    TerraformMachinePoolTemplate,
    Other,
    /// The body was not a review, so there is no kind.
    None,
}

/// The operation label of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperationLabel {
    Create,
    Update,
    Delete,
    Connect,
    None,
}

/// What the webhook answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultLabel {
    /// Allowed, no patch.
    Allowed,
    /// Allowed with a JSON patch of defaults.
    Patched,
    /// Denied (validation failed).
    Denied,
    /// Allowed unchanged because CAPTF does not handle the kind (with a warning).
    Unhandled,
    /// The HTTP request was rejected (4xx) before any review.
    Rejected,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Mutate => "mutate",
            Route::Validate => "validate",
            Route::Convert => "convert",
        }
    }
}

impl KindLabel {
    /// The label of a kind as it appears in `kind`.
    pub fn of(kind: &str) -> KindLabel {
        match kind {
            "TerraformCluster" => KindLabel::TerraformCluster,
            "TerraformMachinePool" => KindLabel::TerraformMachinePool,
            "TerraformMachine" => KindLabel::TerraformMachine,
            "TerraformMachineTemplate" => KindLabel::TerraformMachineTemplate,
            "TerraformClusterTemplate" => KindLabel::TerraformClusterTemplate,
            "TerraformMachinePoolTemplate" => KindLabel::TerraformMachinePoolTemplate,
            _ => KindLabel::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KindLabel::TerraformCluster => "TerraformCluster",
            KindLabel::TerraformMachinePool => "TerraformMachinePool",
            KindLabel::TerraformMachine => "TerraformMachine",
            KindLabel::TerraformMachineTemplate => "TerraformMachineTemplate",
            KindLabel::TerraformClusterTemplate => "TerraformClusterTemplate",
            KindLabel::TerraformMachinePoolTemplate => "TerraformMachinePoolTemplate",
            KindLabel::Other => "other",
            KindLabel::None => "",
        }
    }
}

impl OperationLabel {
    /// As Kubernetes spells it (`CREATE`).
    pub fn as_str(self) -> &'static str {
        match self {
            OperationLabel::Create => "CREATE",
            OperationLabel::Update => "UPDATE",
            OperationLabel::Delete => "DELETE",
            OperationLabel::Connect => "CONNECT",
            OperationLabel::None => "",
        }
    }
}

impl ResultLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            ResultLabel::Allowed => "allowed",
            ResultLabel::Patched => "patched",
            ResultLabel::Denied => "denied",
            ResultLabel::Unhandled => "unhandled",
            ResultLabel::Rejected => "rejected",
        }
    }
}

macro_rules! label_value_as_str {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    )*};
}
label_value_as_str!(Route, KindLabel, OperationLabel, ResultLabel);

/// A body that is not an AdmissionReview this webhook can answer: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("request body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error(
        "request body is not an {ADMISSION_API_VERSION} AdmissionReview (got apiVersion {api_version:?}, kind {kind:?})"
    )]
    NotAdmissionReview { api_version: String, kind: String },
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request does not parse: {0}")]
    BadRequest(#[source] serde_json::Error),
    #[error("AdmissionReview request for {operation} has no object")]
    NoObject { operation: &'static str },
    #[error("AdmissionReview request for UPDATE has no oldObject (the API server always sends it)")]
    NoOldObject,
    #[error("request body does not parse as an AdmissionReview: {0}")]
    TooLargeToDiagnose(#[source] serde_json::Error),
    #[error("request body is not an apiextensions.k8s.io/v1 ConversionReview: {0}")]
    NotConversionReview(#[source] serde_json::Error),
    #[error(
        "request body is not an apiextensions.k8s.io/v1 ConversionReview (got apiVersion {api_version:?}, kind {kind:?})"
    )]
    WrongConversionReview { api_version: String, kind: String },
    #[error("ConversionReview has no request")]
    NoConversionRequest,
}

/// The answer to one review.
#[derive(Clone, Debug)]
pub struct Reviewed {
    /// The response AdmissionReview, serialized.
    pub body: Vec<u8>,
    pub kind: KindLabel,
    pub operation: OperationLabel,
    pub result: ResultLabel,
    /// For logs: the request's uid, namespace and name, and the denial message if denied.
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub message: Option<String>,
    /// Set on an allowed validation that approves a plan or turns the guard to `Allow`: admitted
    /// only if the user may `approve` the object ([`crate::approval::enforce`] asks).
    pub approve: Option<ApproveCheck>,
}

impl Reviewed {
    /// The same review refused (403 `Forbidden`) with this message, as a denial of the webhook's own.
    pub fn refused(&self, message: &str) -> Reviewed {
        let message = captf_shared::validation::cut_to_bytes(message, MAX_MESSAGE_BYTES);
        let decision = Decision {
            allowed: false,
            status: Status::failure(&message, "Forbidden").with_code(403),
            warnings: Vec::new(),
            patch: None,
            result: ResultLabel::Denied,
        };
        Reviewed {
            body: serialize(&self.uid, &decision),
            kind: self.kind,
            operation: self.operation,
            result: ResultLabel::Denied,
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message: Some(message.into_owned()),
            approve: None,
        }
    }
}

/// The answer before serialization.
struct Decision {
    allowed: bool,
    /// `response.status`: empty when allowed, `Failure`/422/`Invalid` with the message when denied.
    status: Status,
    warnings: Vec<String>,
    patch: Option<json_patch::Patch>,
    result: ResultLabel,
}

impl Decision {
    fn allowed(result: ResultLabel) -> Self {
        Decision {
            allowed: true,
            status: Status::default(),
            warnings: Vec::new(),
            patch: None,
            result,
        }
    }
}

/// A string read from the body, borrowed unless it holds escapes.
#[derive(Debug, Default, Deserialize)]
#[serde(transparent)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

/// The request's `kind`, as kube's `GroupVersionKind` reads it (every field required).
#[derive(Deserialize)]
struct Gvk<'a> {
    #[serde(borrow)]
    group: Str<'a>,
    #[serde(borrow)]
    version: Str<'a>,
    #[serde(borrow)]
    kind: Str<'a>,
}

/// The request's `resource`, as kube's `GroupVersionResource` reads it (read, not used).
#[derive(Deserialize)]
#[allow(dead_code)]
struct Gvr<'a> {
    #[serde(borrow)]
    group: Str<'a>,
    #[serde(borrow)]
    version: Str<'a>,
    #[serde(borrow)]
    resource: Str<'a>,
    #[serde(borrow, default, rename = "api_version")]
    api_version: Str<'a>,
}

/// What CAPTF reads of one of the request's objects, in the same pass as the review: its name and
/// namespace, and its `spec` kept raw (parsed into the kind's type afterwards). The rest
/// (`managedFields`, annotations, status) is skipped without being built.
#[derive(Deserialize)]
struct ObjectParts<'a> {
    #[serde(borrow, default)]
    metadata: NameOnly<'a>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

#[derive(Default, Deserialize)]
struct NameOnly<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    /// Only the annotations the webhook acts on; the rest is skipped.
    #[serde(borrow, default)]
    annotations: Option<Marks<'a>>,
}

/// A person's request on an object and the annotation that records who made it (written by
/// this webhook from the request's user).
const STAMPED: [(&str, &str); 2] = [
    (keys::ANNOTATION_APPROVE_PLAN, keys::ANNOTATION_APPROVED_BY),
    (keys::ANNOTATION_RECONCILE_NOW, keys::ANNOTATION_RECONCILE_NOW_BY),
];

/// Of an annotations map, only whether [`keys::ANNOTATION_TOPOLOGY_DRY_RUN`] is there and the
/// values of the [`STAMPED`] requests and their `-by` annotations: keys are read one by one and
/// other values skipped, so no other annotation is kept.
#[derive(Default)]
struct Marks<'a> {
    topology_dry_run: bool,
    /// Per [`STAMPED`] pair: the request's value and who made it.
    stamped: [(Option<Str<'a>>, Option<Str<'a>>); 2],
    /// `captf.io/approvers`, `captf.io/spec-changed-by`, `captf.io/approvals-required`.
    approvers: Option<Str<'a>>,
    spec_changed_by: Option<Str<'a>>,
    approvals_required: Option<Str<'a>>,
}

impl Marks<'_> {
    fn approve_plan(&self) -> Option<&str> {
        self.stamped[0]
            .0
            .as_ref()
            .map(|s| s.0.as_ref())
            .filter(|s| !s.is_empty())
    }

    fn approved_by(&self) -> Option<&str> {
        self.stamped[0]
            .1
            .as_ref()
            .map(|s| s.0.as_ref())
            .filter(|s| !s.is_empty())
    }

    fn text<'s>(v: &'s Option<Str<'_>>) -> Option<&'s str> {
        v.as_ref().map(|s| s.0.as_ref())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Marks<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Marks<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Marks<'a>, A::Error> {
                let mut marks = Marks::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    let key = key.0.as_ref();
                    if let Some(i) = STAMPED.iter().position(|(request, _)| *request == key) {
                        marks.stamped[i].0 = map.next_value::<Option<Str<'a>>>()?;
                    } else if let Some(i) = STAMPED.iter().position(|(_, by)| *by == key) {
                        marks.stamped[i].1 = map.next_value::<Option<Str<'a>>>()?;
                    } else if key == keys::ANNOTATION_APPROVERS {
                        marks.approvers = map.next_value::<Option<Str<'a>>>()?;
                    } else if key == keys::ANNOTATION_SPEC_CHANGED_BY {
                        marks.spec_changed_by = map.next_value::<Option<Str<'a>>>()?;
                    } else if key == keys::ANNOTATION_APPROVALS_REQUIRED {
                        marks.approvals_required = map.next_value::<Option<Str<'a>>>()?;
                    } else {
                        marks.topology_dry_run |= key == keys::ANNOTATION_TOPOLOGY_DRY_RUN;
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(marks)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A review in one pass, borrowing from the body: the fast path. It accepts no body kube's
/// `AdmissionReview` would refuse (every field kube requires is required here with the same JSON
/// type; `userInfo` is kube's own type); a body it refuses goes the slow way (kube's types), so
/// the fast path changes what is answered for no body, only what it costs.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanReview<'a> {
    #[serde(borrow)]
    api_version: Str<'a>,
    #[serde(borrow)]
    kind: Str<'a>,
    #[serde(borrow)]
    request: LeanRequest<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct LeanRequest<'a> {
    #[serde(borrow)]
    uid: Str<'a>,
    #[serde(borrow)]
    kind: Gvk<'a>,
    #[serde(borrow)]
    resource: Gvr<'a>,
    #[serde(borrow, default)]
    sub_resource: Option<Str<'a>>,
    #[serde(borrow, default)]
    request_kind: Option<Gvk<'a>>,
    #[serde(borrow, default)]
    request_resource: Option<Gvr<'a>>,
    #[serde(borrow, default)]
    request_sub_resource: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Str<'a>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    operation: Operation,
    #[serde(borrow)]
    user_info: CheckedUserInfo<'a>,
    #[serde(borrow)]
    object: Option<ObjectParts<'a>>,
    #[serde(borrow)]
    old_object: Option<ObjectParts<'a>>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<IgnoredAny>,
}

/// `userInfo`, checked as kube's `UserInfo` (k8s-openapi) reads it, but not kept: a body can
/// hold millions of group names, and a `String` for each costs eight times its JSON. An object
/// whose `extra` is a map of string lists, `groups` a string list and `uid`, `username` strings
/// (each may be `null`); other fields are skipped; a repeated field is read again. Only the
/// username is kept (who approved a plan).
struct CheckedUserInfo<'a> {
    username: Option<Str<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for CheckedUserInfo<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = CheckedUserInfo<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("struct UserInfo")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CheckedUserInfo<'a>, A::Error> {
                let mut username = None;
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    match key.0.as_ref() {
                        "extra" => {
                            map.next_value::<Option<CheckedExtra>>()?;
                        }
                        "groups" => {
                            map.next_value::<Option<CheckedStrings>>()?;
                        }
                        "uid" => {
                            map.next_value::<Option<Str<'de>>>()?;
                        }
                        "username" => {
                            username = map.next_value::<Option<Str<'a>>>()?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(CheckedUserInfo { username })
            }
        }
        d.deserialize_struct(
            "UserInfo",
            &["extra", "groups", "uid", "username"],
            V(std::marker::PhantomData),
        )
    }
}

/// A list of strings, checked and dropped one by one.
struct CheckedStrings;

impl<'de> Deserialize<'de> for CheckedStrings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CheckedStrings;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<CheckedStrings, A::Error> {
                while seq.next_element::<Str<'de>>()?.is_some() {}
                Ok(CheckedStrings)
            }
        }
        d.deserialize_seq(V)
    }
}

/// A map of string lists, checked and dropped entry by entry.
struct CheckedExtra;

impl<'de> Deserialize<'de> for CheckedExtra {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CheckedExtra;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CheckedExtra, A::Error> {
                while map.next_key::<Str<'de>>()?.is_some() {
                    map.next_value::<CheckedStrings>()?;
                }
                Ok(CheckedExtra)
            }
        }
        d.deserialize_map(V)
    }
}

/// The outside of a review: read without building the request or the objects.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
}

/// One of the request's objects on the slow path, kept raw. kube's `AdmissionRequest` needs a
/// `Resource`; this is one that holds the JSON text.
#[derive(Clone, Debug)]
pub struct RawObject {
    raw: Box<RawValue>,
    meta: ObjectMeta,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RawObject {
            raw: Box::<RawValue>::deserialize(d)?,
            meta: ObjectMeta::default(),
        })
    }
}

impl Resource for RawObject {
    type DynamicType = ();
    type Scope = DynamicResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

type KubeRequest = AdmissionRequest<RawObject>;

/// A whole review with kube's types (the slow path).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeReview {
    api_version: String,
    kind: String,
    request: KubeRequest,
}

/// Why a body is not a review, found step by step (only when kube's parse failed).
fn diagnose(body: &[u8], whole: serde_json::Error) -> ReviewError {
    let envelope: Envelope<'_> = match serde_json::from_slice(body) {
        Ok(e) => e,
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return ReviewError::NotAdmissionReview {
                api_version: String::new(),
                kind: String::new(),
            };
        }
        Err(e) => return ReviewError::NotJson(e),
    };
    let (api_version, kind) = (
        envelope.api_version.unwrap_or_default(),
        envelope.kind.unwrap_or_default(),
    );
    if api_version != ADMISSION_API_VERSION || kind != "AdmissionReview" {
        return ReviewError::NotAdmissionReview { api_version, kind };
    }
    let Some(raw) = envelope.request else {
        return ReviewError::NoRequest;
    };
    match serde_json::from_str::<KubeRequest>(raw.get()) {
        Err(e) => ReviewError::BadRequest(e),
        Ok(_) => ReviewError::BadRequest(whole),
    }
}

/// Which of the request's objects.
#[derive(Clone, Copy, Debug)]
enum Which {
    Object,
    OldObject,
}

impl Which {
    fn key(self) -> &'static str {
        match self {
            Which::Object => "object",
            Which::OldObject => "oldObject",
        }
    }
}

/// One of the request's objects: read by the fast path, or not (then only the slow report).
// Two live on the stack per review; boxing the read one would add an allocation to every review
// to save a few hundred bytes of stack.
#[allow(clippy::large_enum_variant)]
enum Obj<'a> {
    Parts(ObjectParts<'a>),
    Unread,
}

/// The request as the decision reads it, from either path.
struct View<'a> {
    body: &'a [u8],
    uid: &'a str,
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    has_sub_resource: bool,
    operation: Operation,
    name: &'a str,
    namespace: &'a str,
    object: Option<Obj<'a>>,
    old_object: Option<Obj<'a>>,
    /// `request.dryRun`: nothing the request writes is stored.
    dry_run: bool,
    policy: &'a TenantPolicy,
    watched: &'a Watched,
    /// `request.userInfo.username`.
    username: Option<&'a str>,
}

/// Answer one AdmissionReview body with no tenant policy. Pure: the same body always gives the
/// same answer.
pub fn review(route: Route, body: &[u8]) -> Result<Reviewed, ReviewError> {
    review_with(route, body, &TenantPolicy::unrestricted())
}

/// Answer one AdmissionReview body, denying a spec outside the tenant policy (on create, and on
/// an update that changes the spec), with every namespace watched. Pure.
pub fn review_with(route: Route, body: &[u8], policy: &TenantPolicy) -> Result<Reviewed, ReviewError> {
    review_in(route, body, policy, &Watched::all())
}

/// [`review_with`], and a create of an object no controller will act on, in a namespace outside
/// `watched`, admitted with a warning ([`Watched::warning`]). Pure.
pub fn review_in(route: Route, body: &[u8], policy: &TenantPolicy, watched: &Watched) -> Result<Reviewed, ReviewError> {
    // The body's UTF-8 is checked once, up front (a word at a time while it is ASCII), so the
    // parse does not check every string again, skipped ones included. A body that is not UTF-8
    // goes the slow way, which reports it as before.
    let lean = std::str::from_utf8(body)
        .ok()
        .map(serde_json::from_str::<LeanReview<'_>>);
    match lean {
        Some(Ok(lean)) => {
            check_types(&lean.api_version.0, &lean.kind.0)?;
            let r = lean.request;
            let view = View {
                body,
                uid: &r.uid.0,
                group: &r.kind.group.0,
                version: &r.kind.version.0,
                kind: &r.kind.kind.0,
                has_sub_resource: r.sub_resource.is_some(),
                operation: r.operation,
                name: &r.name.0,
                namespace: r.namespace.as_ref().map_or("", |n| &n.0),
                object: r.object.map(Obj::Parts),
                old_object: r.old_object.map(Obj::Parts),
                dry_run: r.dry_run,
                policy,
                watched,
                username: None,
            };
            let username = r.user_info.username.as_ref().map(|u| u.0.as_ref());
            answer(route, View { username, ..view })
        }
        Some(Err(e)) if body.len() > MAX_SLOW_PATH_BYTES => Err(ReviewError::TooLargeToDiagnose(e)),
        Some(Err(_)) | None => review_slowly(route, body, policy, watched),
    }
}

fn check_types(api_version: &str, kind: &str) -> Result<(), ReviewError> {
    if api_version != ADMISSION_API_VERSION || kind != "AdmissionReview" {
        return Err(ReviewError::NotAdmissionReview {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    Ok(())
}

/// The slow path: kube's types, then each object read as the fast path reads it where it can be.
fn review_slowly(route: Route, body: &[u8], policy: &TenantPolicy, watched: &Watched) -> Result<Reviewed, ReviewError> {
    let whole: KubeReview = serde_json::from_slice(body).map_err(|e| diagnose(body, e))?;
    check_types(&whole.api_version, &whole.kind)?;
    let r = whole.request;
    fn read(o: &Option<RawObject>) -> Option<Obj<'_>> {
        o.as_ref()
            .map(|o| match serde_json::from_str::<ObjectParts<'_>>(o.raw.get()) {
                Ok(parts) => Obj::Parts(parts),
                Err(_) => Obj::Unread,
            })
    }
    let view = View {
        body,
        uid: &r.uid,
        group: &r.kind.group,
        version: &r.kind.version,
        kind: &r.kind.kind,
        has_sub_resource: r.sub_resource.is_some(),
        operation: r.operation.clone(),
        name: &r.name,
        namespace: r.namespace.as_deref().unwrap_or_default(),
        object: read(&r.object),
        old_object: read(&r.old_object),
        dry_run: r.dry_run,
        policy,
        watched,
        username: r.user_info.username.as_deref(),
    };
    answer(route, view)
}

fn answer(route: Route, view: View<'_>) -> Result<Reviewed, ReviewError> {
    let kind = kind_label(&view);
    let operation = operation_label(&view.operation);
    let decision = decide(route, &view)?;
    let message = (!decision.allowed).then(|| decision.status.message.clone());
    let approve = match route {
        Route::Validate if decision.allowed => approve_check(&view),
        _ => None,
    };
    Ok(Reviewed {
        body: serialize(view.uid, &decision),
        kind,
        operation,
        result: decision.result,
        uid: view.uid.to_string(),
        namespace: view.namespace.to_string(),
        name: view.name.to_string(),
        message,
        approve,
    })
}

/// Whether an admitted CREATE or UPDATE of a served kind needs the `approve` verb
/// ([`approval::needs_approve`]): it sets `captf.io/approve-plan` to a new value, or turns
/// `spec.guard.destructive` to `Allow`. An old object that cannot be read counts as neither.
fn approve_check(view: &View<'_>) -> Option<ApproveCheck> {
    let kind = served_kind(view)?;
    if view.has_sub_resource {
        return None;
    }
    let new = side(kind, view.object.as_ref()?);
    let old = match view.operation {
        Operation::Create => None,
        Operation::Update => Some(view.old_object.as_ref().map(|o| side(kind, o)).unwrap_or_default()),
        Operation::Delete | Operation::Connect => return None,
    };
    approval::needs_approve(kind, view.namespace, view.name, old, new, || {
        user_info(view.body, view.username)
    })
}

/// What the approval decision reads of one of the request's objects.
fn side<'o>(kind: &str, object: &'o Obj<'_>) -> approval::Side<'o> {
    let approve_plan = marks(object).and_then(Marks::approve_plan);
    let approved_by = marks(object).and_then(Marks::approved_by);
    let guard_allows = match object {
        Obj::Parts(ObjectParts { spec: Some(spec), .. }) if spec.get().len() <= MAX_SPEC_BYTES => {
            guard_allows(kind, spec.get())
        }
        _ => false,
    };
    approval::Side {
        approve_plan,
        approved_by,
        guard_allows,
    }
}

/// `spec.guard` as the approval decision reads it (other fields skipped).
#[derive(Default, Deserialize)]
struct GuardParts<'a> {
    #[serde(borrow, default)]
    guard: Option<DestructiveOnly<'a>>,
}

#[derive(Default, Deserialize)]
struct DestructiveOnly<'a> {
    #[serde(borrow, default)]
    destructive: Option<Str<'a>>,
    #[serde(borrow, default)]
    approval: Option<Str<'a>>,
}

/// A template's `spec.template.spec.guard`.
#[derive(Default, Deserialize)]
struct TemplateGuardParts<'a> {
    #[serde(borrow, default)]
    template: Option<TemplateSpecGuard<'a>>,
}

#[derive(Default, Deserialize)]
struct TemplateSpecGuard<'a> {
    #[serde(borrow, default)]
    spec: Option<GuardParts<'a>>,
}

/// Whether a raw spec of the kind lets every plan through (`approval: Never`, or
/// `destructive: Allow` without an `approval`).
fn guard_allows(kind: &str, spec: &str) -> bool {
    let guard = if kind.ends_with("Template") {
        serde_json::from_str::<TemplateGuardParts<'_>>(spec)
            .ok()
            .and_then(|t| t.template)
            .and_then(|t| t.spec)
    } else {
        serde_json::from_str::<GuardParts<'_>>(spec).ok()
    };
    // The mode as `GuardSpec::mode` reads it: `approval` when set, else `destructive`.
    guard.and_then(|g| g.guard).is_some_and(|g| match g.approval {
        Some(a) => a.0 == ApprovalMode::Never.as_str(),
        None => g.destructive.is_some_and(|d| d.0 == DestructiveGuard::Allow.as_str()),
    })
}

/// The requesting user as the SubjectAccessReview needs it (name, uid, groups, extra), read from
/// the body again: the review itself keeps only the name. Read only when a check is needed.
fn user_info(body: &[u8], username: Option<&str>) -> UserInfo {
    #[derive(Deserialize)]
    struct Outer {
        request: Inner,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Inner {
        #[serde(default)]
        user_info: Option<UserInfo>,
    }
    serde_json::from_slice::<Outer>(body)
        .ok()
        .and_then(|o| o.request.user_info)
        .unwrap_or_else(|| UserInfo {
            username: username.map(str::to_string),
            ..UserInfo::default()
        })
}

/// The served kind of the request, if CAPTF serves it (by group and kind).
fn served_kind(view: &View<'_>) -> Option<&'static str> {
    if view.group != TerraformCluster::group(&()) {
        return None;
    }
    SERVED_KINDS.into_iter().find(|k| *k == view.kind)
}

fn kind_label(view: &View<'_>) -> KindLabel {
    served_kind(view).map_or(KindLabel::Other, KindLabel::of)
}

fn operation_label(op: &Operation) -> OperationLabel {
    match op {
        Operation::Create => OperationLabel::Create,
        Operation::Update => OperationLabel::Update,
        Operation::Delete => OperationLabel::Delete,
        Operation::Connect => OperationLabel::Connect,
    }
}

fn decide(route: Route, view: &View<'_>) -> Result<Decision, ReviewError> {
    // Answering has no side effects either way; `request.dryRun` only lets Cluster API's
    // topology dry run of a template through template immutability (validate_update_request).
    let Some(kind) = served_kind(view) else {
        let mut d = Decision::allowed(ResultLabel::Unhandled);
        d.warnings.push(format!(
            "captf-webhook does not handle {}/{} {}: allowed unchanged",
            echo(view.group),
            echo(view.version),
            echo(view.kind)
        ));
        return Ok(d);
    };
    if view.has_sub_resource {
        // Status and other subresources carry no spec to default or validate.
        return Ok(Decision::allowed(ResultLabel::Allowed));
    }
    let is_update = match view.operation {
        Operation::Create => false,
        Operation::Update => true,
        Operation::Delete | Operation::Connect => return Ok(Decision::allowed(ResultLabel::Allowed)),
    };
    let object = view.object.as_ref().ok_or(ReviewError::NoObject {
        operation: operation_label(&view.operation).as_str(),
    })?;
    let old_object = match (is_update, view.old_object.as_ref()) {
        (true, None) => return Err(ReviewError::NoOldObject),
        (true, Some(old)) => Some(old),
        (false, _) => None,
    };
    let mut decision = match route {
        Route::Mutate => {
            let (mut d, parsed) = mutate(view.body, kind, object, old_object);
            let stamps = match object {
                // An object that does not parse is denied by the validating webhook: nothing to record.
                Obj::Parts(parts) if parsed => request_stamps(
                    parts.metadata.annotations.as_ref(),
                    old_object.and_then(marks),
                    view.username,
                    spec_changed(object, old_object),
                ),
                _ => Vec::new(),
            };
            if !stamps.is_empty() {
                d.patch
                    .get_or_insert_with(|| json_patch::Patch(Vec::new()))
                    .0
                    .extend(stamps);
                d.result = ResultLabel::Patched;
            }
            d
        }
        Route::Validate => {
            let mut d = validate(view.body, kind, object, old_object, view.dry_run, view.policy);
            if d.allowed
                && let Some(message) = approval_refusal(object, old_object, view.username, view.policy)
            {
                d = forbidden(&message);
            }
            // Only the validating answer warns, so kubectl prints the warning once.
            if d.allowed
                && old_object.is_none()
                && let Some(w) = view.watched.warning(kind, view.namespace)
            {
                d.warnings.push(w);
            }
            d
        }
        // Conversion is `crate::convert`'s (the router sends `/convert` there): an admission
        // review asked to answer as it is left unhandled.
        Route::Convert => Decision::allowed(ResultLabel::Unhandled),
    };
    decision.warnings = bounded_warnings(std::mem::take(&mut decision.warnings), 0);
    Ok(decision)
}

/// A request's string as a warning may quote it: JSON-quoted (so no control character or
/// newline gets through) and cut to a few dozen characters.
fn echo(s: &str) -> String {
    let cut: String = s.chars().take(MAX_ECHOED_CHARS).collect();
    // JSON escapes the C0 controls but not DEL and the C1 controls.
    let quoted: String = serde_json::to_string(&cut)
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if cut.len() < s.len() {
        format!("{quoted}…")
    } else {
        quoted
    }
}

/// One warning as returned: control characters replaced by spaces, cut to [`MAX_WARNING_BYTES`].
pub fn sanitize_warning(w: &str) -> String {
    let clean: String = w.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    captf_shared::validation::cut_to_bytes(&clean, MAX_WARNING_BYTES).into_owned()
}

/// At most [`MAX_WARNINGS`] sanitized warnings; the last says how many more there were
/// (`omitted` counts warnings dropped before they reached this list).
pub fn bounded_warnings(warnings: Vec<String>, omitted: usize) -> Vec<String> {
    let total = warnings.len() + omitted;
    if total <= MAX_WARNINGS {
        return warnings.iter().map(|w| sanitize_warning(w)).collect();
    }
    let mut out: Vec<String> = warnings
        .iter()
        .take(MAX_WARNINGS - 1)
        .map(|w| sanitize_warning(w))
        .collect();
    out.push(format!("and {} more warnings", total - out.len()));
    out
}

/// The request object's spec as JSON, when it is one the webhook would parse at all (not over the
/// size bound).
fn raw_spec(object: &Obj<'_>) -> Option<Value> {
    match object {
        Obj::Parts(ObjectParts { spec: Some(spec), .. }) if spec.get().len() <= MAX_SPEC_BYTES => {
            serde_json::from_str(spec.get()).ok()
        }
        _ => None,
    }
}

/// The annotations the webhook acts on, of an object it could read.
fn marks<'o, 'a>(object: &'o Obj<'a>) -> Option<&'o Marks<'a>> {
    match object {
        Obj::Parts(parts) => parts.metadata.annotations.as_ref(),
        Obj::Unread => None,
    }
}

/// What the webhook records about who did what (docs/rules.md, "Approvals"), whatever the request
/// wrote in these annotations (nobody can write another name beside somebody else's request):
/// - `captf.io/approved-by`: the user of the newest approval ([`approval::approval_act`]), else
///   the old value;
/// - `captf.io/approvers`: everyone who approved the plan `captf.io/approve-plan` names, the
///   user of this request added when it approves; removed with the approval;
/// - `captf.io/reconcile-now-by`: the user who set `captf.io/reconcile-now` to a new value;
/// - `captf.io/spec-changed-by`: the user of a request that creates the object or changes its
///   spec, else the old value.
///
/// `new` is the request object's annotations (`None`: it has none); `spec_changed`: the request
/// creates the object or changes its spec. PURE.
fn request_stamps(
    new: Option<&Marks<'_>>,
    old: Option<&Marks<'_>>,
    username: Option<&str>,
    spec_changed: bool,
) -> Vec<PatchOperation> {
    let user = username.filter(|u| !u.is_empty()).unwrap_or("unknown user");
    let old_author = old
        .and_then(|o| Marks::text(&o.spec_changed_by))
        .filter(|a| !a.is_empty());
    // The author is kept where approvals are required (or were: it stays current): elsewhere no
    // rule reads it, and a create or an edit gets no patch beyond its defaults. An object that
    // starts requiring approvals without a recorded author records the user who asked for them.
    let requires = new.is_some_and(|n| n.approvals_required.is_some());
    let author = match (requires || old_author.is_some(), spec_changed, old_author) {
        (false, _, _) => None,
        (true, true, _) | (true, false, None) => Some(user),
        (true, false, Some(a)) => Some(a),
    };
    let Some(new) = new else {
        // No annotations map: the only stamp that can be due is the author's, and it adds the map.
        return author
            .map(|a| {
                vec![PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations"]),
                    value: serde_json::json!({ keys::ANNOTATION_SPEC_CHANGED_BY: a }),
                })]
            })
            .unwrap_or_default();
    };
    let mut ops = Vec::new();
    let mut set = |key: &str, want: Option<&str>, written: Option<&str>| {
        if want == written {
            return;
        }
        let path = PointerBuf::from_tokens(["metadata", "annotations", key]);
        ops.push(match want {
            Some(v) => PatchOperation::Add(AddOperation {
                path,
                value: Value::String(v.to_string()),
            }),
            None => PatchOperation::Remove(RemoveOperation { path }),
        });
    };
    // The approval: who approved, and everyone who approved the same plan.
    let plan = new.approve_plan();
    let old_plan = old.and_then(Marks::approve_plan);
    let old_by = old.and_then(Marks::approved_by);
    let act = approval::approval_act(old_plan, old_by, plan, new.approved_by());
    if plan.is_some() {
        let by = if act.is_some() { Some(user) } else { old_by };
        set(keys::ANNOTATION_APPROVED_BY, by, new.approved_by());
    }
    let old_list = || {
        let list = approvals::parse_approvers(old.and_then(|o| Marks::text(&o.approvers)));
        // An approval recorded before the list was kept: its approver stands for it.
        match (list.is_empty(), old_by) {
            (true, Some(by)) => vec![by.to_string()],
            _ => list,
        }
    };
    let approvers = match (act, plan) {
        (Some(plan), _) => Some(approvals::approvers_value(&approvals::after_approval(
            old_plan,
            &old_list(),
            plan,
            user,
        ))),
        (None, Some(_)) => Some(approvals::approvers_value(&old_list())),
        (None, None) => None,
    };
    set(
        keys::ANNOTATION_APPROVERS,
        approvers.as_deref(),
        Marks::text(&new.approvers),
    );
    // A reconcile request: who asked, when it is new.
    fn value<'s>(s: Option<&'s Str<'_>>) -> Option<&'s str> {
        s.map(|s| s.0.as_ref()).filter(|s| !s.is_empty())
    }
    if let Some(request) = value(new.stamped[1].0.as_ref()) {
        let old_request = old.and_then(|o| value(o.stamped[1].0.as_ref()));
        let want = if old_request == Some(request) {
            old.and_then(|o| value(o.stamped[1].1.as_ref()))
        } else {
            Some(user)
        };
        set(STAMPED[1].1, want, value(new.stamped[1].1.as_ref()));
    }
    if author.is_some() {
        set(
            keys::ANNOTATION_SPEC_CHANGED_BY,
            author,
            Marks::text(&new.spec_changed_by),
        );
    }
    ops
}

/// Why the approval rules refuse a request (docs/rules.md, "Approvals"), if they do:
/// `captf.io/approvals-required` set to a value that is not a number from 1 to the policy's
/// `--max-approvals-required` (only when the request changes it, so a lowered cap never locks an
/// object), or an approval by the user who last changed the spec while approvals are required.
/// Reads the object as the mutating webhook left it. PURE.
fn approval_refusal(
    object: &Obj<'_>,
    old_object: Option<&Obj<'_>>,
    username: Option<&str>,
    policy: &TenantPolicy,
) -> Option<String> {
    let new = marks(object)?;
    let old = old_object.and_then(marks);
    let text = Marks::text(&new.approvals_required);
    let required = match approvals::approvals_required(text, policy.max_approvals_required) {
        Err(e) if text != old.and_then(|o| Marks::text(&o.approvals_required)) => return Some(e),
        Err(_) => approvals::approvals_required_or_strictest(text),
        Ok(r) => r,
    }?;
    let plan = approval::approval_act(
        old.and_then(Marks::approve_plan),
        old.and_then(Marks::approved_by),
        new.approve_plan(),
        new.approved_by(),
    )?;
    let user = username.filter(|u| !u.is_empty())?;
    let author = Marks::text(&new.spec_changed_by)?;
    (author == user).then(|| {
        format!(
            "metadata.annotations[{}]: {} last changed this object's spec, and {} asks for {required} approver(s) \
             other than whoever changed it: somebody else must approve plan {}",
            keys::ANNOTATION_APPROVE_PLAN,
            echo(user),
            keys::ANNOTATION_APPROVALS_REQUIRED,
            echo(plan)
        )
    })
}

/// A refusal of the webhook's own: 403 with the message, bounded.
fn forbidden(message: &str) -> Decision {
    let message = captf_shared::validation::cut_to_bytes(message, MAX_MESSAGE_BYTES);
    Decision {
        allowed: false,
        status: Status::failure(&message, "Forbidden").with_code(403),
        warnings: Vec::new(),
        patch: None,
        result: ResultLabel::Denied,
    }
}

/// Whether a request creates the object or changes its spec: compared as the API server sent
/// both (it writes them with one encoder, so the same spec is the same text); an object either
/// side of which could not be read counts as changed.
fn spec_changed(object: &Obj<'_>, old_object: Option<&Obj<'_>>) -> bool {
    match (object, old_object) {
        (_, None) => true,
        (Obj::Parts(new), Some(Obj::Parts(old))) => new.spec.map(RawValue::get) != old.spec.map(RawValue::get),
        _ => true,
    }
}

/// The defaults, and on an update the lock timeout nobody chose following a lowered deadline
/// (`captf_shared::defaults::rederived_lock_timeout`), said in a warning.
/// The second value: whether the object parsed (one that does not is neither defaulted nor
/// stamped; the validating webhook denies it).
fn mutate(body: &[u8], kind: &str, object: &Obj<'_>, old_object: Option<&Obj<'_>>) -> (Decision, bool) {
    let Ok(parsed) = parse_obj(body, kind, object, Which::Object) else {
        return (Decision::allowed(ResultLabel::Allowed), false);
    };
    let jobs = |o: &CaptfObject| o.terraform_spec().jobs.clone().unwrap_or_default();
    let rederived = old_object
        .filter(|_| parsed.spec_path() == "spec")
        .and_then(|old| parse_obj(body, kind, old, Which::OldObject).ok())
        .and_then(|old| captf_shared::defaults::rederived_lock_timeout(&jobs(&old), &jobs(&parsed)));
    let mut d = defaults_decision(object, parsed);
    if let Some((was, now)) = rederived {
        d.patch
            .get_or_insert_with(|| json_patch::Patch(Vec::new()))
            .0
            .push(json_patch::PatchOperation::Replace(json_patch::ReplaceOperation {
                path: json_patch::jsonptr::PointerBuf::from_tokens(["spec", "jobs", "lockTimeoutSeconds"]),
                value: Value::from(now),
            }));
        d.result = ResultLabel::Patched;
        d.warnings.push(format!(
            "spec.jobs.lockTimeoutSeconds: {was} was the default for the old activeDeadlineSeconds and must stay below the new one, so it follows it to {now} (the default, min(300, activeDeadlineSeconds / 2)); set it yourself to choose another value"
        ));
    }
    (d, true)
}

/// The defaults of `parsed` (the request's `object`, parsed) as a JSON patch of its raw spec.
fn defaults_decision(object: &Obj<'_>, parsed: CaptfObject) -> Decision {
    // The defaults never change `variables` (they only add an empty map where there is none), so
    // they are emptied before the copy: the largest part of a spec is not held twice.
    let mut parsed = parsed;
    if let Some(vars) = parsed.terraform_spec_mut().variables.as_mut() {
        vars.clear();
    }
    let mut defaulted = parsed.clone();
    apply_defaults(&mut defaulted);
    // Defaults that change nothing typed add nothing to the raw spec either (every field the
    // typed spec holds came from it), so the raw spec is not even read.
    if same_spec(&parsed, &defaulted) {
        return Decision::allowed(ResultLabel::Allowed);
    }
    let Obj::Parts(ObjectParts { spec: Some(spec), .. }) = object else {
        return Decision::allowed(ResultLabel::Allowed);
    };
    let Ok(raw_spec) = crate::patch::skeleton(spec.get()) else {
        return Decision::allowed(ResultLabel::Allowed);
    };
    let patch = crate::patch::patch_to_defaulted(&raw_spec, &defaulted);
    if patch.0.is_empty() {
        return Decision::allowed(ResultLabel::Allowed);
    }
    Decision {
        patch: Some(patch),
        ..Decision::allowed(ResultLabel::Patched)
    }
}

fn validate(
    body: &[u8],
    kind: &str,
    object: &Obj<'_>,
    old_object: Option<&Obj<'_>>,
    dry_run: bool,
    policy: &TenantPolicy,
) -> Decision {
    let new = match parse_obj(body, kind, object, Which::Object) {
        Ok(new) => new,
        Err(mut report) => {
            // The update rules that need no parsed object are still checked, so that one answer
            // lists every violation.
            if let Some(old) = old_object.and_then(|o| parse_obj(body, kind, o, Which::OldObject).ok())
                && let Some(new_spec) = raw_spec(object)
            {
                let topology_dry_run = dry_run && marks(object).is_some_and(|m| m.topology_dry_run);
                report.merge(captf_shared::validation::update_rules_of_an_unparsed_spec(
                    &old,
                    &new_spec,
                    topology_dry_run,
                ));
            }
            return deny(&report);
        }
    };
    let mut extra_warnings = Vec::new();
    let report = match old_object {
        // Ratcheting, as Kubernetes does for CRD schemas: an update that leaves the spec as it was
        // (labels, finalizers, annotations) is never blocked, so a finalizer can always be removed
        // from an object stored before a rule was tightened.
        Some(old) => match parse_obj(body, kind, old, Which::OldObject) {
            Ok(old) if same_spec(&old, &new) => return Decision::allowed(ResultLabel::Allowed),
            Ok(old) => validate_update_request(&old, &new, dry_run),
            Err(_) => {
                extra_warnings.push(format!(
                    "the stored {kind} does not parse, so immutable fields were not compared"
                ));
                validate_create(&new)
            }
        },
        None => validate_create(&new),
    };
    let violations = policy.check(&new);
    // The webhook reads no Secrets: it refuses CAPTF's Secrets by name; the controller checks
    // what the named Secrets carry before every Job.
    let forbidden = references::forbidden_references(new.terraform_spec(), new.spec_path(), |_| None);
    let mut d = if !report.is_valid() {
        deny(&report)
    } else if !forbidden.is_empty() {
        deny_forbidden(&forbidden)
    } else if !violations.is_empty() {
        deny_by_policy(&violations)
    } else {
        Decision::allowed(ResultLabel::Allowed)
    };
    let omitted = report.omitted_warnings;
    d.warnings = bounded_warnings(report.warnings.into_iter().chain(extra_warnings).collect(), omitted);
    d
}

fn with_meta<K: Resource<DynamicType = ()>>(mut obj: K, meta: &NameOnly<'_>) -> K {
    let m = obj.meta_mut();
    m.name = meta.name.as_ref().map(|n| n.0.to_string());
    m.namespace = meta.namespace.as_ref().map(|n| n.0.to_string());
    if meta.annotations.as_ref().is_some_and(|a| a.topology_dry_run) {
        m.annotations = Some([(keys::ANNOTATION_TOPOLOGY_DRY_RUN.to_string(), String::new())].into());
    }
    obj
}

/// An object of a served kind, its raw spec parsed straight into the kind's type; when that
/// fails, the whole object parsed again (from the body) through `captf-shared`'s `parse_object`
/// for a report that names the fields.
fn parse_obj(body: &[u8], kind: &str, obj: &Obj<'_>, which: Which) -> Result<CaptfObject, Report> {
    if let Obj::Parts(parts) = obj {
        if let Some(spec) = parts.spec {
            let text = spec.get();
            if text.len() > MAX_SPEC_BYTES {
                return Err(spec_too_large(text.len()));
            }
            // Every value takes at least two bytes (`0,`), so only a long spec can hold too many.
            if text.len() > 2 * MAX_SPEC_VALUES
                && captf_shared::validation::count_json_values(text, MAX_SPEC_VALUES).is_none()
            {
                let mut report = Report::default();
                captf_shared::validation::too_many_values(
                    &mut report,
                    &captf_shared::validation::FieldPath::new("spec"),
                );
                return Err(report);
            }
        }
        if let Some(obj) = parse_spec(kind, parts) {
            return Ok(obj);
        }
    }
    let value = fallback_object(body, which)?;
    parse_object(kind, &value)
}

fn spec_too_large(len: usize) -> Report {
    let mut report = Report::default();
    report.violation(
        &captf_shared::validation::FieldPath::new("spec"),
        format!(
            "must be at most {MAX_SPEC_BYTES} bytes of JSON: what a Job runs must fit in its inputs Secret (1 MiB); \
             the value is the spec's size"
        ),
        &len,
    );
    report
}

/// The parts of an object `parse_object` reports on, kept raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawParts<'a> {
    #[serde(borrow, default)]
    api_version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawObjects<'a> {
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    old_object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawReview<'a> {
    #[serde(borrow, default)]
    request: Option<RawObjects<'a>>,
}

/// One of the request's objects as JSON for `parse_object`'s field-path report, built from its
/// `apiVersion`, `kind`, `metadata` and `spec` only (the rest, status included, is not looked at),
/// and only when those are small enough to build.
fn fallback_object(body: &[u8], which: Which) -> Result<Value, Report> {
    let Ok(review) = serde_json::from_slice::<RawReview<'_>>(body) else {
        return Ok(Value::Null);
    };
    let Some(objects) = review.request else {
        return Ok(Value::Null);
    };
    let found = match which {
        Which::Object => objects.object,
        Which::OldObject => objects.old_object,
    };
    let Some(raw) = found else {
        return Ok(Value::Null);
    };
    let Ok(parts) = serde_json::from_str::<RawParts<'_>>(raw.get()) else {
        // Not an object: only its JSON type is reported, so its value is not built.
        return Ok(match raw.get().as_bytes().first() {
            Some(b'[') => Value::Array(Vec::new()),
            Some(b'"') => Value::String(String::new()),
            Some(b'n') => Value::Null,
            Some(b't' | b'f') => Value::Bool(false),
            _ => Value::from(0),
        });
    };
    let fields = [
        ("apiVersion", parts.api_version),
        ("kind", parts.kind),
        ("metadata", parts.metadata),
        ("spec", parts.spec),
    ];
    let size: usize = fields.iter().filter_map(|(_, raw)| raw.map(|r| r.get().len())).sum();
    if size > MAX_SPEC_BYTES {
        let mut report = Report::default();
        report.violation(
            &captf_shared::validation::FieldPath::new(which.key()),
            format!(
                "does not parse, and its metadata and spec are too large to report field by field \
                 (more than {MAX_SPEC_BYTES} bytes); the value is their size"
            ),
            &size,
        );
        return Err(report);
    }
    let mut map = serde_json::Map::new();
    for (key, raw) in fields {
        if let Some(raw) = raw {
            map.insert(key.to_string(), serde_json::from_str(raw.get()).unwrap_or(Value::Null));
        }
    }
    Ok(Value::Object(map))
}

fn parse_spec(kind: &str, parts: &ObjectParts<'_>) -> Option<CaptfObject> {
    use captf_shared::types::{
        TerraformClusterTemplate, TerraformMachine, TerraformMachinePool, TerraformMachinePoolTemplate,
        TerraformMachineTemplate,
    };
    let text = parts.spec?.get();
    let meta = &parts.metadata;
    let obj = match kind {
        "TerraformCluster" => CaptfObject::Cluster(with_meta(
            TerraformCluster::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        "TerraformMachinePool" => CaptfObject::MachinePool(with_meta(
            TerraformMachinePool::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        "TerraformMachine" => CaptfObject::Machine(with_meta(
            TerraformMachine::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        "TerraformMachineTemplate" => CaptfObject::MachineTemplate(with_meta(
            TerraformMachineTemplate::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        "TerraformClusterTemplate" => CaptfObject::ClusterTemplate(with_meta(
            TerraformClusterTemplate::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        "TerraformMachinePoolTemplate" => CaptfObject::MachinePoolTemplate(with_meta(
            TerraformMachinePoolTemplate::new("", serde_json::from_str(text).ok()?),
            meta,
        )),
        _ => return None,
    };
    Some(obj)
}

/// Whether two objects of a kind have the same spec (metadata and status aside).
fn same_spec(a: &CaptfObject, b: &CaptfObject) -> bool {
    match (a, b) {
        (CaptfObject::Cluster(a), CaptfObject::Cluster(b)) => a.spec == b.spec,
        (CaptfObject::MachinePool(a), CaptfObject::MachinePool(b)) => a.spec == b.spec,
        (CaptfObject::Machine(a), CaptfObject::Machine(b)) => a.spec == b.spec,
        (CaptfObject::MachineTemplate(a), CaptfObject::MachineTemplate(b)) => a.spec == b.spec,
        (CaptfObject::ClusterTemplate(a), CaptfObject::ClusterTemplate(b)) => a.spec == b.spec,
        (CaptfObject::MachinePoolTemplate(a), CaptfObject::MachinePoolTemplate(b)) => a.spec == b.spec,
        _ => false,
    }
}

/// A spec outside the platform team's tenant policy: 403, naming each field and the policy
/// (bounded like every other denial).
fn deny_by_policy(violations: &[Violation]) -> Decision {
    forbidden(&format!("outside the tenant policy: {}", policy::message(violations)))
}

/// A spec that names CAPTF's own Secrets: 403, naming each field and Secret (bounded).
fn deny_forbidden(refs: &[ForbiddenReference]) -> Decision {
    forbidden(&format!("names CAPTF's own Secrets: {}", references::message(refs)))
}

fn deny(report: &Report) -> Decision {
    let message = report.bounded_message(MAX_LISTED_VIOLATIONS, MAX_MESSAGE_BYTES);
    Decision {
        allowed: false,
        status: Status::failure(&message, INVALID_REASON).with_code(INVALID_CODE),
        warnings: Vec::new(),
        patch: None,
        result: ResultLabel::Denied,
    }
}

/// The response review, written straight from the decision: what kube's `AdmissionResponse`
/// serializes to (uid, allowed, status, warnings), with the patch as the API server's `[]byte`
/// wants it (base64; kube's `with_patch` is tied to json-patch 4 and writes an array of numbers).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

fn serialize(uid: &str, decision: &Decision) -> Vec<u8> {
    let patch = decision.patch.as_ref().map(|p| {
        let bytes = serde_json::to_vec(p).unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    });
    let out = ReviewOut {
        api_version: ADMISSION_API_VERSION,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid,
            allowed: decision.allowed,
            status: &decision.status,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: &decision.warnings,
        },
    };
    // Plain data with string keys: serializing cannot fail.
    serde_json::to_vec(&out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::core::admission::AdmissionResponse;

    fn fixture(name: &str) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn fixture_object(name: &str) -> (String, Value) {
        let v = fixture(name);
        let kind = v["request"]["kind"]["kind"].as_str().unwrap().to_string();
        (kind, v["request"]["object"].clone())
    }

    #[test]
    fn the_spec_only_fast_parse_agrees_with_shared_parse_object_on_every_accepted_fixture() {
        for name in [
            "cluster-create-accepted",
            "machinepool-update-accepted",
            "machine-create-accepted",
            "machinetemplate-update-accepted",
        ] {
            let (kind, object) = fixture_object(name);
            let text = serde_json::to_string(&object).unwrap();
            let parts: ObjectParts<'_> = serde_json::from_str(&text).unwrap();
            let fast = parse_spec(&kind, &parts).expect("the fast path must not fall back");
            let full = parse_object(&kind, &object).unwrap();
            assert!(same_spec(&fast, &full), "{name}");
            assert_eq!(fast.metadata().name, full.metadata().name, "{name}");
            assert_eq!(fast.metadata().namespace, full.metadata().namespace, "{name}");
        }
    }

    #[test]
    fn a_spec_that_does_not_parse_gets_shared_parse_objects_field_path_report() {
        let mut review = fixture("cluster-create-accepted");
        review["request"]["object"]["spec"]["jobs"] = serde_json::json!({"activeDeadlineSeconds": "1h"});
        let object = review["request"]["object"].clone();
        let body = serde_json::to_vec(&review).unwrap();
        let text = serde_json::to_string(&object).unwrap();
        let parts: ObjectParts<'_> = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parse_obj(&body, "TerraformCluster", &Obj::Parts(parts), Which::Object).unwrap_err(),
            parse_object("TerraformCluster", &object).unwrap_err()
        );
    }

    #[test]
    fn every_fixture_takes_the_fast_path_and_kubes_types_read_it_too() {
        for name in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")).unwrap()
        {
            let path = name.unwrap().path();
            let body = std::fs::read(&path).unwrap();
            assert!(
                serde_json::from_slice::<LeanReview<'_>>(&body).is_ok(),
                "{}",
                path.display()
            );
            assert!(
                serde_json::from_slice::<KubeReview>(&body).is_ok(),
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn user_info_is_accepted_and_refused_exactly_as_kubes_user_info() {
        use serde_json::json;
        for user_info in [
            json!({}),
            json!({"extra": {"a": ["x", "y"]}, "groups": ["g"], "uid": "u", "username": "n", "other": [1]}),
            json!({"extra": null, "groups": null, "uid": null, "username": null}),
            json!({"extra": {"a": null}}),
            json!({"extra": {"a": [1]}}),
            json!({"extra": []}),
            json!({"groups": [null]}),
            json!({"groups": "g"}),
            json!({"groups": ["a\u{41}"], "username": "\u{e9}"}),
            json!({"uid": 1}),
            json!(["n", ["g"]]),
            json!(null),
            json!("x"),
        ] {
            let kubes =
                serde_json::from_value::<k8s_openapi::api::authentication::v1::UserInfo>(user_info.clone()).is_ok();
            let text = user_info.to_string();
            let ours = serde_json::from_str::<CheckedUserInfo>(&text).is_ok();
            assert_eq!(ours, kubes, "{text}");
        }
        let escaped = r#"{"groups": ["a\u0041\n"], "username": "\u00e9"}"#;
        assert!(serde_json::from_str::<CheckedUserInfo>(escaped).is_ok());
    }

    /// The answer to the changed-template update fixture, as a dry run or not, with Cluster API's
    /// topology dry-run annotation or not, and with the spec's `jobs` replaced when given.
    fn changed_template_review(dry_run: bool, annotated: bool, jobs: Option<Value>) -> Reviewed {
        let mut review = fixture("machinetemplate-update-rejected");
        review["request"]["dryRun"] = Value::Bool(dry_run);
        if annotated {
            review["request"]["object"]["metadata"]["annotations"][keys::ANNOTATION_TOPOLOGY_DRY_RUN] =
                Value::String(String::new());
        }
        // A change that breaks no other rule: the old template's jobs, a new variable value.
        let spec = &mut review["request"]["object"]["spec"]["template"]["spec"];
        spec["jobs"] = jobs.unwrap_or(serde_json::json!({"activeDeadlineSeconds": 3600, "lockTimeoutSeconds": 300}));
        spec["variables"]["size"] = Value::String("large".into());
        super::review(Route::Validate, &serde_json::to_vec(&review).unwrap()).unwrap()
    }

    #[test]
    fn a_topology_dry_run_of_a_changed_template_passes_template_immutability() {
        let stored = changed_template_review(false, false, None);
        assert_eq!(stored.result, ResultLabel::Denied);
        assert!(
            stored.message.as_deref().unwrap_or_default().contains("is immutable"),
            "{:?}",
            stored.message
        );
        // What Cluster API's topology controller sends: a dry run of the annotated template.
        let dry = changed_template_review(true, true, None);
        assert_eq!(dry.result, ResultLabel::Allowed, "{:?}", dry.message);
        // Either half alone is a real change of a template, refused.
        assert_eq!(changed_template_review(true, false, None).result, ResultLabel::Denied);
        assert_eq!(changed_template_review(false, true, None).result, ResultLabel::Denied);
    }

    #[test]
    fn a_topology_dry_run_of_a_template_is_still_held_to_every_other_rule() {
        let bad = serde_json::json!({"failedJobsHistoryLimit": -1});
        let answer = changed_template_review(true, true, Some(bad));
        assert_eq!(answer.result, ResultLabel::Denied);
        assert!(
            answer
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("failedJobsHistoryLimit"),
            "{:?}",
            answer.message
        );
    }

    /// The JSON patch ops of a mutate answer.
    fn patch_ops(body: &[u8]) -> Vec<Value> {
        let answer: Value = serde_json::from_slice(&super::review(Route::Mutate, body).unwrap().body).unwrap();
        match answer["response"]["patch"].as_str() {
            Some(b64) => {
                serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap()
            }
            None => vec![],
        }
    }

    fn approver_ops(ops: &[Value]) -> Vec<Value> {
        ops.iter()
            .filter(|op| op["path"] == "/metadata/annotations/captf.io~1approved-by")
            .cloned()
            .collect()
    }

    fn annotation_op<'o>(ops: &'o [Value], key: &str) -> Option<&'o Value> {
        let path = format!("/metadata/annotations/{}", key.replace('/', "~1"));
        ops.iter().find(|op| op["path"] == path.as_str())
    }

    fn with_annotations(review: &mut Value, which: &str, pairs: &[(&str, &str)]) {
        let a = &mut review["request"][which]["metadata"]["annotations"];
        *a = serde_json::json!({});
        for (k, v) in pairs {
            a[*k] = Value::String(v.to_string());
        }
    }

    #[test]
    fn every_approver_of_the_same_plan_is_recorded_once_and_a_new_plan_starts_a_new_list() {
        let mut review = fixture("cluster-update-accepted");
        review["request"]["userInfo"] = serde_json::json!({"username": "carol"});
        let old = [
            (keys::ANNOTATION_APPROVE_PLAN, "h1"),
            (keys::ANNOTATION_APPROVED_BY, "bob"),
            (keys::ANNOTATION_APPROVERS, r#"["alice","bob"]"#),
        ];
        with_annotations(&mut review, "oldObject", &old);
        // carol approves the same plan (kubectl captf approve writes her name).
        with_annotations(
            &mut review,
            "object",
            &[
                (keys::ANNOTATION_APPROVE_PLAN, "h1"),
                (keys::ANNOTATION_APPROVED_BY, "carol"),
                (keys::ANNOTATION_APPROVERS, r#"["alice","bob"]"#),
            ],
        );
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_APPROVERS).unwrap()["value"],
            r#"["alice","bob","carol"]"#
        );
        // A forged list is put back.
        with_annotations(
            &mut review,
            "object",
            &[
                (keys::ANNOTATION_APPROVE_PLAN, "h1"),
                (keys::ANNOTATION_APPROVED_BY, "bob"),
                (keys::ANNOTATION_APPROVERS, r#"["x","y","z"]"#),
            ],
        );
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_APPROVERS).unwrap()["value"],
            r#"["alice","bob"]"#
        );
        // Another plan: a new list.
        with_annotations(&mut review, "object", &[(keys::ANNOTATION_APPROVE_PLAN, "h2")]);
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_APPROVERS).unwrap()["value"],
            r#"["carol"]"#
        );
        // The approval removed: the list goes with it.
        with_annotations(
            &mut review,
            "object",
            &[(keys::ANNOTATION_APPROVERS, r#"["alice","bob"]"#)],
        );
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(annotation_op(&ops, keys::ANNOTATION_APPROVERS).unwrap()["op"], "remove");
    }

    #[test]
    fn the_author_is_whoever_created_the_object_or_last_changed_its_spec() {
        let mut review = fixture("cluster-update-accepted");
        review["request"]["userInfo"] = serde_json::json!({"username": "carol"});
        with_annotations(&mut review, "oldObject", &[(keys::ANNOTATION_SPEC_CHANGED_BY, "alice")]);
        // A metadata-only change, even one that writes another author: alice stays.
        with_annotations(&mut review, "object", &[(keys::ANNOTATION_SPEC_CHANGED_BY, "mallory")]);
        review["request"]["object"]["spec"] = review["request"]["oldObject"]["spec"].clone();
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_SPEC_CHANGED_BY).unwrap()["value"],
            "alice"
        );
        // A spec change: carol.
        review["request"]["object"]["spec"]["paused"] = Value::Bool(true);
        review["request"]["oldObject"]["spec"]["paused"] = Value::Bool(false);
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_SPEC_CHANGED_BY).unwrap()["value"],
            "carol"
        );
        // A create that asks for approvals: its creator. One that does not records nobody (no rule
        // reads it, and the create gets no patch beyond its defaults).
        let mut create = fixture("cluster-create-accepted");
        create["request"]["userInfo"] = serde_json::json!({"username": "dave"});
        with_annotations(&mut create, "object", &[(keys::ANNOTATION_APPROVALS_REQUIRED, "2")]);
        let ops = patch_ops(&serde_json::to_vec(&create).unwrap());
        assert_eq!(
            annotation_op(&ops, keys::ANNOTATION_SPEC_CHANGED_BY).unwrap()["value"],
            "dave"
        );
        with_annotations(&mut create, "object", &[]);
        let ops = patch_ops(&serde_json::to_vec(&create).unwrap());
        assert!(
            annotation_op(&ops, keys::ANNOTATION_SPEC_CHANGED_BY).is_none(),
            "{ops:?}"
        );
        // Annotations removed altogether from an object whose author is kept: the map comes back.
        create["request"]["operation"] = Value::String("UPDATE".into());
        create["request"]["oldObject"] = create["request"]["object"].clone();
        with_annotations(&mut create, "oldObject", &[(keys::ANNOTATION_SPEC_CHANGED_BY, "alice")]);
        create["request"]["object"]["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        let ops = patch_ops(&serde_json::to_vec(&create).unwrap());
        let add = ops.iter().find(|op| op["path"] == "/metadata/annotations").unwrap();
        assert_eq!(add["value"][keys::ANNOTATION_SPEC_CHANGED_BY], "alice");
    }

    #[test]
    fn the_author_of_the_spec_may_not_approve_its_plan_when_approvals_are_required() {
        let mut review = fixture("cluster-update-accepted");
        review["request"]["userInfo"] = serde_json::json!({"username": "alice"});
        review["request"]["object"]["spec"] = review["request"]["oldObject"]["spec"].clone();
        with_annotations(
            &mut review,
            "oldObject",
            &[
                (keys::ANNOTATION_SPEC_CHANGED_BY, "alice"),
                (keys::ANNOTATION_APPROVALS_REQUIRED, "2"),
            ],
        );
        let approving = |by: &str| {
            vec![
                (keys::ANNOTATION_SPEC_CHANGED_BY, "alice".to_string()),
                (keys::ANNOTATION_APPROVALS_REQUIRED, "2".to_string()),
                (keys::ANNOTATION_APPROVE_PLAN, "h1".to_string()),
                (keys::ANNOTATION_APPROVED_BY, by.to_string()),
            ]
        };
        let set = |review: &mut Value, pairs: Vec<(&str, String)>| {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            with_annotations(review, "object", &pairs);
        };
        set(&mut review, approving("alice"));
        let answer = super::review(Route::Validate, &serde_json::to_vec(&review).unwrap()).unwrap();
        assert_eq!(answer.result, ResultLabel::Denied);
        let m = answer.message.unwrap();
        assert!(m.contains("\"alice\" last changed this object's spec"), "{m}");
        assert!(m.contains("captf.io/approvals-required asks for 2 approver(s)"), "{m}");
        // Somebody else may.
        review["request"]["userInfo"] = serde_json::json!({"username": "bob"});
        set(&mut review, approving("bob"));
        let answer = super::review(Route::Validate, &serde_json::to_vec(&review).unwrap()).unwrap();
        assert_ne!(answer.result, ResultLabel::Denied, "{:?}", answer.message);
        // Without approvals-required the author may approve, as always.
        review["request"]["userInfo"] = serde_json::json!({"username": "alice"});
        with_annotations(&mut review, "oldObject", &[(keys::ANNOTATION_SPEC_CHANGED_BY, "alice")]);
        let mut pairs = approving("alice");
        pairs.retain(|(k, _)| *k != keys::ANNOTATION_APPROVALS_REQUIRED);
        set(&mut review, pairs);
        let answer = super::review(Route::Validate, &serde_json::to_vec(&review).unwrap()).unwrap();
        assert_ne!(answer.result, ResultLabel::Denied, "{:?}", answer.message);
    }

    #[test]
    fn approvals_required_above_the_cap_is_refused_naming_the_annotation() {
        let mut review = fixture("cluster-update-accepted");
        for (value, refused) in [("0", true), ("4", true), ("x", true), ("1", false), ("3", false)] {
            with_annotations(&mut review, "object", &[(keys::ANNOTATION_APPROVALS_REQUIRED, value)]);
            let body = serde_json::to_vec(&review).unwrap();
            let policy = TenantPolicy::only_defaults("img", "");
            let answer = review_with(Route::Validate, &body, &policy).unwrap();
            assert_eq!(
                answer.result == ResultLabel::Denied,
                refused,
                "{value}: {:?}",
                answer.message
            );
            if refused {
                let m = answer.message.unwrap();
                assert!(
                    m.contains("metadata.annotations[captf.io/approvals-required]: must be a whole number from 1 to 3"),
                    "{m}"
                );
            }
        }
        // A value that was already there (the cap lowered since) does not lock the object.
        with_annotations(&mut review, "oldObject", &[(keys::ANNOTATION_APPROVALS_REQUIRED, "5")]);
        with_annotations(&mut review, "object", &[(keys::ANNOTATION_APPROVALS_REQUIRED, "5")]);
        let body = serde_json::to_vec(&review).unwrap();
        let answer = review_with(Route::Validate, &body, &TenantPolicy::only_defaults("img", "")).unwrap();
        assert_ne!(answer.result, ResultLabel::Denied, "{:?}", answer.message);
    }

    #[test]
    fn who_approved_a_plan_or_asked_to_reconcile_is_the_user_who_set_it_whatever_the_request_wrote() {
        let mut review = fixture("cluster-update-accepted");
        review["request"]["userInfo"] = serde_json::json!({"username": "alice@example.com", "groups": ["team-a"]});
        let annotate = |review: &mut Value, which: &str, pairs: &[(&str, &str)]| {
            let a = &mut review["request"][which]["metadata"]["annotations"];
            *a = serde_json::json!({});
            for (k, v) in pairs {
                a[*k] = Value::String(v.to_string());
            }
        };
        // A new approval: the requesting user is recorded, over a name the request wrote itself.
        annotate(&mut review, "oldObject", &[]);
        annotate(
            &mut review,
            "object",
            &[
                (keys::ANNOTATION_APPROVE_PLAN, "h1"),
                (keys::ANNOTATION_APPROVED_BY, "mallory"),
            ],
        );
        let body = serde_json::to_vec(&review).unwrap();
        let stamp = serde_json::json!([{"op": "add", "path": "/metadata/annotations/captf.io~1approved-by", "value": "alice@example.com"}]);
        assert_eq!(approver_ops(&patch_ops(&body)), stamp.as_array().unwrap().clone());
        // The slow path (kube's types) stamps the same.
        let slow = review_slowly(Route::Mutate, &body, &TenantPolicy::unrestricted(), &Watched::all()).unwrap();
        let slow: Value = serde_json::from_slice(&slow.body).unwrap();
        let slow_ops: Vec<Value> = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(slow["response"]["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(approver_ops(&slow_ops), stamp.as_array().unwrap().clone());

        // The same plan with another approver written: an approval by the requesting user, never
        // a name of the request's choosing.
        annotate(
            &mut review,
            "oldObject",
            &[
                (keys::ANNOTATION_APPROVE_PLAN, "h1"),
                (keys::ANNOTATION_APPROVED_BY, "bob"),
            ],
        );
        let body = serde_json::to_vec(&review).unwrap();
        assert_eq!(
            approver_ops(&patch_ops(&body)),
            [
                serde_json::json!({"op": "add", "path": "/metadata/annotations/captf.io~1approved-by", "value": "alice@example.com"})
            ]
        );
        // The same approval, approved-by left as it was: the recorded approver stays.
        annotate(&mut review, "object", &[(keys::ANNOTATION_APPROVE_PLAN, "h1")]);
        assert_eq!(
            approver_ops(&patch_ops(&serde_json::to_vec(&review).unwrap())),
            [serde_json::json!({"op": "add", "path": "/metadata/annotations/captf.io~1approved-by", "value": "bob"})]
        );
        annotate(
            &mut review,
            "object",
            &[
                (keys::ANNOTATION_APPROVE_PLAN, "h1"),
                (keys::ANNOTATION_APPROVED_BY, "bob"),
            ],
        );
        assert!(
            approver_ops(&patch_ops(&serde_json::to_vec(&review).unwrap())).is_empty(),
            "nothing to change"
        );
        // No approval: nothing about approvers is written.
        annotate(&mut review, "object", &[]);
        assert!(approver_ops(&patch_ops(&serde_json::to_vec(&review).unwrap())).is_empty());
        // A reconcile request is stamped the same way, in its own annotation.
        annotate(
            &mut review,
            "object",
            &[(keys::ANNOTATION_RECONCILE_NOW, "2026-01-01T00:01:00Z")],
        );
        let ops = patch_ops(&serde_json::to_vec(&review).unwrap());
        assert!(
            ops.contains(&serde_json::json!({"op": "add", "path": "/metadata/annotations/captf.io~1reconcile-now-by", "value": "alice@example.com"})),
            "{ops:?}"
        );
    }

    #[test]
    fn a_body_the_fast_path_refuses_is_answered_by_the_slow_path_alike() {
        // An object that is not a JSON object: kube's types take it, the fast path does not.
        let mut review = fixture("cluster-create-accepted");
        review["request"]["object"] = serde_json::json!(["not", "an", "object"]);
        let body = serde_json::to_vec(&review).unwrap();
        assert!(serde_json::from_slice::<LeanReview<'_>>(&body).is_err());
        let answer = super::review(Route::Validate, &body).unwrap();
        assert_eq!(answer.result, ResultLabel::Denied);
        assert_eq!(answer.uid, review["request"]["uid"].as_str().unwrap());
        let mutate = super::review(Route::Mutate, &body).unwrap();
        assert_eq!(mutate.result, ResultLabel::Allowed);
    }

    #[test]
    fn a_body_with_invalid_utf8_in_a_skipped_string_is_not_json_as_before() {
        let review = fixture("cluster-create-accepted");
        let mut body = serde_json::to_vec(&review).unwrap();
        // Inside the managedFields manager name, a string the fast path would skip.
        let at = body.windows(7).position(|w| w == b"kubectl").unwrap();
        body[at] = 0xff;
        let err = super::review(Route::Validate, &body).unwrap_err();
        assert!(matches!(err, ReviewError::NotJson(_)), "{err}");
        assert!(serde_json::from_slice::<Value>(&body).is_err());
    }

    /// The response as kube's `AdmissionResponse` serializes it, with the base64 patch set by hand
    /// (how the webhook wrote it before it wrote the response directly).
    fn through_kube(uid: &str, d: &Decision) -> Value {
        let request: KubeRequest =
            serde_json::from_value(fixture("cluster-create-accepted")["request"].clone()).unwrap();
        let mut request = request;
        request.uid = uid.to_string();
        request.types = kube::core::TypeMeta {
            api_version: ADMISSION_API_VERSION.into(),
            kind: "AdmissionReview".into(),
        };
        let mut response = AdmissionResponse::from(&request);
        response.allowed = d.allowed;
        response.result = d.status.clone();
        if !d.warnings.is_empty() {
            response.warnings = Some(d.warnings.clone());
        }
        let mut value = serde_json::to_value(response.into_review()).unwrap();
        if let Some(p) = &d.patch {
            let resp = value["response"].as_object_mut().unwrap();
            let b64 = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(p).unwrap());
            resp.insert("patch".into(), Value::String(b64));
            resp.insert("patchType".into(), Value::String("JSONPatch".into()));
        }
        value
    }

    #[test]
    fn the_response_is_written_exactly_as_kubes_admission_response_serializes() {
        let mut report = Report::default();
        report.violation(
            &captf_shared::validation::FieldPath::new("spec.jobs.lockTimeoutSeconds"),
            "must be less than spec.jobs.activeDeadlineSeconds (3600)",
            &4000,
        );
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "add", "path": "/spec/paused", "value": false}])).unwrap();
        let mut warned = Decision::allowed(ResultLabel::Unhandled);
        warned.warnings = vec!["a warning".into(), "another \"quoted\"".into()];
        let mut denied_warned = deny(&report);
        denied_warned.warnings = vec!["w".into()];
        for d in [
            Decision::allowed(ResultLabel::Allowed),
            Decision {
                patch: Some(patch),
                ..Decision::allowed(ResultLabel::Patched)
            },
            deny(&report),
            denied_warned,
            warned,
        ] {
            let ours: Value = serde_json::from_slice(&serialize("uid-\u{e9}\"1", &d)).unwrap();
            assert_eq!(ours, through_kube("uid-\u{e9}\"1", &d));
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            ".{0,8}".prop_map(Value::String),
            prop_oneof![
                Just("TerraformCluster"),
                Just("CREATE"),
                Just("UPDATE"),
                Just("x.y"),
                Just("30m")
            ]
            .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        "[a-z]{1,6}",
                        Just("name".to_string()),
                        Just("spec".to_string()),
                        Just("group".to_string()),
                        Just("version".to_string()),
                        Just("kind".to_string()),
                        Just("resource".to_string()),
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The fast path is only a cheaper way to the same answer: wherever something is planted
        /// in a review, it answers byte for byte what kube's types (the slow path) answer.
        #[test]
        fn the_fast_path_answers_exactly_what_the_slow_path_answers(
            name in proptest::prop_oneof![
                proptest::strategy::Just("cluster-create-accepted"),
                proptest::strategy::Just("cluster-update-rejected"),
                proptest::strategy::Just("machine-update-accepted"),
                proptest::strategy::Just("machinetemplate-create-rejected"),
            ],
            place in proptest::prop_oneof![
                proptest::strategy::Just("/request/uid"),
                proptest::strategy::Just("/request/kind"),
                proptest::strategy::Just("/request/kind/group"),
                proptest::strategy::Just("/request/resource"),
                proptest::strategy::Just("/request/requestKind"),
                proptest::strategy::Just("/request/requestResource"),
                proptest::strategy::Just("/request/subResource"),
                proptest::strategy::Just("/request/name"),
                proptest::strategy::Just("/request/namespace"),
                proptest::strategy::Just("/request/operation"),
                proptest::strategy::Just("/request/userInfo"),
                proptest::strategy::Just("/request/userInfo/groups"),
                proptest::strategy::Just("/request/userInfo/groups/0"),
                proptest::strategy::Just("/request/userInfo/username"),
                proptest::strategy::Just("/request/userInfo/uid"),
                proptest::strategy::Just("/request/userInfo/extra"),
                proptest::strategy::Just("/request/object"),
                proptest::strategy::Just("/request/object/metadata"),
                proptest::strategy::Just("/request/object/metadata/name"),
                proptest::strategy::Just("/request/object/spec"),
                proptest::strategy::Just("/request/object/spec/jobs"),
                proptest::strategy::Just("/request/oldObject"),
                proptest::strategy::Just("/request/oldObject/spec"),
                proptest::strategy::Just("/request/dryRun"),
                proptest::strategy::Just("/request/options"),
            ],
            planted in any_json(),
        ) {
            let mut req = fixture(name);
            if let Some(slot) = req.pointer_mut(place) {
                *slot = planted;
            }
            let body = serde_json::to_vec(&req).unwrap();
            for route in [Route::Mutate, Route::Validate] {
                match (super::review(route, &body), review_slowly(route, &body, &TenantPolicy::unrestricted(), &Watched::all())) {
                    (Ok(fast), Ok(slow)) => {
                        proptest::prop_assert_eq!(&fast.body, &slow.body);
                        proptest::prop_assert_eq!(
                            (fast.kind, fast.operation, fast.result, &fast.uid, &fast.name, &fast.namespace),
                            (slow.kind, slow.operation, slow.result, &slow.uid, &slow.name, &slow.namespace)
                        );
                    }
                    (Err(fast), Err(slow)) => proptest::prop_assert_eq!(fast.to_string(), slow.to_string()),
                    (fast, slow) => proptest::prop_assert!(false, "fast {:?} but slow {:?}", fast.map(|r| r.result), slow.map(|r| r.result)),
                }
            }
        }
    }
}
