//! The pure part of the webhook: an AdmissionReview body in, an AdmissionReview response out.
//!
//! A thin adapter (STYLE.md lesson 3): it parses the review with kube's types, hands the object to
//! `captf-shared` (`apply_defaults`, `validate_create`, `validate_update`) and builds the response
//! from the request, so `request.uid` is always echoed. It has no side effects at all, so
//! `dryRun: true` and `dryRun: false` are answered identically (and a test checks that).

use std::borrow::Cow;

use base64::Engine as _;
use captf_shared::types::{CaptfObject, SERVED_KINDS, TerraformCluster};
use captf_shared::validation::{Report, parse_object, validate_create, validate_update};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicResourceScope, Status, TypeMeta};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// The only AdmissionReview version served.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `status.code` of a denied review.
pub const INVALID_CODE: u16 = 422;
/// `status.reason` of a denied review.
pub const INVALID_REASON: &str = "Invalid";

/// Which webhook was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    Mutate,
    Validate,
}

/// The kind label of a request (bounded: anything CAPTF does not serve is `Other`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindLabel {
    TerraformCluster,
    TerraformMachinePool,
    TerraformMachine,
    TerraformMachineTemplate,
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
        }
    }
}

impl KindLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            KindLabel::TerraformCluster => "TerraformCluster",
            KindLabel::TerraformMachinePool => "TerraformMachinePool",
            KindLabel::TerraformMachine => "TerraformMachine",
            KindLabel::TerraformMachineTemplate => "TerraformMachineTemplate",
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
}

/// The answer before serialization.
struct Decision {
    response: AdmissionResponse,
    patch: Option<json_patch::Patch>,
    result: ResultLabel,
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

/// One of the request's objects, kept raw: it is parsed once, straight into CAPTF's types (and
/// the patch is computed against the raw spec, so unknown fields survive). kube's
/// `AdmissionRequest` needs a `Resource`; this is one that holds the JSON text.
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

type Request = AdmissionRequest<RawObject>;

/// A whole review in one pass (the common case: a well-formed review).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FastReview {
    api_version: String,
    kind: String,
    request: Request,
}

/// Why a body is not a review, found step by step (only when the one-pass parse failed).
fn diagnose(body: &[u8], fast: serde_json::Error) -> ReviewError {
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
    match serde_json::from_str::<Request>(raw.get()) {
        Err(e) => ReviewError::BadRequest(e),
        Ok(_) => ReviewError::BadRequest(fast),
    }
}

/// Answer one AdmissionReview body. Pure: the same body always gives the same answer.
pub fn review(route: Route, body: &[u8]) -> Result<Reviewed, ReviewError> {
    let fast: FastReview = serde_json::from_slice(body).map_err(|e| diagnose(body, e))?;
    if fast.api_version != ADMISSION_API_VERSION || fast.kind != "AdmissionReview" {
        return Err(ReviewError::NotAdmissionReview {
            api_version: fast.api_version,
            kind: fast.kind,
        });
    }
    let mut request = fast.request;
    request.types = TypeMeta {
        api_version: fast.api_version,
        kind: fast.kind,
    };
    let object = request.object.take().map(|o| o.raw);
    let old_object = request.old_object.take().map(|o| o.raw);

    let kind = kind_label(&request);
    let operation = operation_label(&request.operation);
    let decision = decide(route, &request, object.as_deref(), old_object.as_deref())?;
    let message = (!decision.response.allowed).then(|| decision.response.result.message.clone());
    Ok(Reviewed {
        body: serialize(decision.response, decision.patch.as_ref()),
        kind,
        operation,
        result: decision.result,
        uid: request.uid,
        namespace: request.namespace.unwrap_or_default(),
        name: request.name,
        message,
    })
}

fn captf_group() -> Cow<'static, str> {
    TerraformCluster::group(&())
}

/// The served kind of the request, if CAPTF serves it (by group and kind).
fn served_kind(request: &Request) -> Option<&'static str> {
    if request.kind.group != captf_group() {
        return None;
    }
    SERVED_KINDS.into_iter().find(|k| *k == request.kind.kind)
}

fn kind_label(request: &Request) -> KindLabel {
    match served_kind(request) {
        Some("TerraformCluster") => KindLabel::TerraformCluster,
        Some("TerraformMachinePool") => KindLabel::TerraformMachinePool,
        Some("TerraformMachine") => KindLabel::TerraformMachine,
        Some("TerraformMachineTemplate") => KindLabel::TerraformMachineTemplate,
        _ => KindLabel::Other,
    }
}

fn operation_label(op: &Operation) -> OperationLabel {
    match op {
        Operation::Create => OperationLabel::Create,
        Operation::Update => OperationLabel::Update,
        Operation::Delete => OperationLabel::Delete,
        Operation::Connect => OperationLabel::Connect,
    }
}

fn allowed(request: &Request, result: ResultLabel) -> Decision {
    Decision {
        response: AdmissionResponse::from(request),
        patch: None,
        result,
    }
}

fn decide(
    route: Route,
    request: &Request,
    object: Option<&RawValue>,
    old_object: Option<&RawValue>,
) -> Result<Decision, ReviewError> {
    // `request.dryRun` needs nothing: answering has no side effects either way.
    let Some(kind) = served_kind(request) else {
        let mut d = allowed(request, ResultLabel::Unhandled);
        d.response.warnings = Some(vec![format!(
            "captf-webhook does not handle {}/{} {}: allowed unchanged",
            request.kind.group, request.kind.version, request.kind.kind
        )]);
        return Ok(d);
    };
    if request.sub_resource.is_some() {
        // Status and other subresources carry no spec to default or validate.
        return Ok(allowed(request, ResultLabel::Allowed));
    }
    let is_update = match request.operation {
        Operation::Create => false,
        Operation::Update => true,
        Operation::Delete | Operation::Connect => return Ok(allowed(request, ResultLabel::Allowed)),
    };
    let object = object.ok_or(ReviewError::NoObject {
        operation: operation_label(&request.operation).as_str(),
    })?;
    Ok(match route {
        Route::Mutate => mutate(request, kind, object),
        Route::Validate => validate(request, kind, object, old_object.filter(|_| is_update)),
    })
}

fn mutate(request: &Request, kind: &str, object: &RawValue) -> Decision {
    // An object that does not parse is not defaulted; the validating webhook denies it.
    let Ok(parsed) = parse_raw(kind, object) else {
        return allowed(request, ResultLabel::Allowed);
    };
    let Ok(SpecOnly { spec }) = serde_json::from_str::<SpecOnly>(object.get()) else {
        return allowed(request, ResultLabel::Allowed);
    };
    let patch = crate::patch::defaults_patch(&spec, parsed);
    if patch.0.is_empty() {
        return allowed(request, ResultLabel::Allowed);
    }
    Decision {
        response: AdmissionResponse::from(request),
        patch: Some(patch),
        result: ResultLabel::Patched,
    }
}

fn validate(request: &Request, kind: &str, object: &RawValue, old_object: Option<&RawValue>) -> Decision {
    let new = match parse_raw(kind, object) {
        Ok(new) => new,
        Err(report) => return deny(request, &report),
    };
    let mut extra_warnings = Vec::new();
    let report = match old_object {
        // Ratcheting, as Kubernetes does for CRD schemas: an update that leaves the spec as it was
        // (labels, finalizers, annotations) is never blocked, so a finalizer can always be removed
        // from an object stored before a rule was tightened.
        Some(old) => match parse_raw(kind, old) {
            Ok(old) if same_spec(&old, &new) => return allowed(request, ResultLabel::Allowed),
            Ok(old) => validate_update(&old, &new),
            Err(_) => {
                extra_warnings.push(format!(
                    "the stored {kind} does not parse, so immutable fields were not compared"
                ));
                validate_create(&new)
            }
        },
        None => validate_create(&new),
    };
    let mut d = if report.is_valid() {
        allowed(request, ResultLabel::Allowed)
    } else {
        deny(request, &report)
    };
    let warnings: Vec<String> = report.warnings.into_iter().chain(extra_warnings).collect();
    if !warnings.is_empty() {
        d.response.warnings = Some(warnings);
    }
    d
}

/// The object's `spec`, raw (absent: `null`).
#[derive(Deserialize)]
struct SpecOnly {
    #[serde(default)]
    spec: Value,
}

/// What the fast path reads of an object: its name, namespace and spec. The API server has
/// validated the metadata already, and CAPTF's rules are about the spec.
#[derive(Deserialize)]
struct SpecOf<S> {
    #[serde(default)]
    metadata: NameOnly,
    spec: S,
}

#[derive(Default, Deserialize)]
struct NameOnly {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

fn with_meta<K: Resource<DynamicType = ()>>(mut obj: K, meta: NameOnly) -> K {
    let m = obj.meta_mut();
    m.name = meta.name;
    m.namespace = meta.namespace;
    obj
}

/// Parse a raw object of a served kind straight into its type; when that fails, parse it again
/// through `captf-shared`'s `parse_object` for a report that names the fields.
fn parse_raw(kind: &str, raw: &RawValue) -> Result<CaptfObject, Report> {
    use captf_shared::types::{TerraformMachine, TerraformMachinePool, TerraformMachineTemplate};
    let text = raw.get();
    let fast = match kind {
        "TerraformCluster" => serde_json::from_str(text)
            .map(|o: SpecOf<_>| CaptfObject::Cluster(with_meta(TerraformCluster::new("", o.spec), o.metadata))),
        "TerraformMachinePool" => serde_json::from_str(text)
            .map(|o: SpecOf<_>| CaptfObject::MachinePool(with_meta(TerraformMachinePool::new("", o.spec), o.metadata))),
        "TerraformMachine" => serde_json::from_str(text)
            .map(|o: SpecOf<_>| CaptfObject::Machine(with_meta(TerraformMachine::new("", o.spec), o.metadata))),
        "TerraformMachineTemplate" => serde_json::from_str(text).map(|o: SpecOf<_>| {
            CaptfObject::MachineTemplate(with_meta(TerraformMachineTemplate::new("", o.spec), o.metadata))
        }),
        _ => return parse_object(kind, &Value::Null),
    };
    fast.or_else(|_| {
        let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        parse_object(kind, &value)
    })
}

/// Whether two objects of a kind have the same spec (metadata and status aside).
fn same_spec(a: &CaptfObject, b: &CaptfObject) -> bool {
    match (a, b) {
        (CaptfObject::Cluster(a), CaptfObject::Cluster(b)) => a.spec == b.spec,
        (CaptfObject::MachinePool(a), CaptfObject::MachinePool(b)) => a.spec == b.spec,
        (CaptfObject::Machine(a), CaptfObject::Machine(b)) => a.spec == b.spec,
        (CaptfObject::MachineTemplate(a), CaptfObject::MachineTemplate(b)) => a.spec == b.spec,
        _ => false,
    }
}

fn deny(request: &Request, report: &Report) -> Decision {
    let message = report.message();
    let mut response = AdmissionResponse::from(request).deny(&message);
    response.result = Status::failure(&message, INVALID_REASON).with_code(INVALID_CODE);
    Decision {
        response,
        patch: None,
        result: ResultLabel::Denied,
    }
}

/// The response review as bytes. kube's `with_patch` is tied to json-patch 4 and writes the patch
/// as a JSON array of numbers; the API server's `[]byte` is base64, so the patch is set here.
fn serialize(response: AdmissionResponse, patch: Option<&json_patch::Patch>) -> Vec<u8> {
    let review = response.into_review();
    let mut value = serde_json::to_value(&review).unwrap_or(Value::Null);
    if let (Some(patch), Some(resp)) = (patch, value.get_mut("response").and_then(Value::as_object_mut)) {
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        resp.insert(
            "patch".into(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
        resp.insert("patchType".into(), Value::String("JSONPatch".into()));
    }
    serde_json::to_vec(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fixture_object(name: &str) -> (String, Value) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
        let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
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
            let raw = RawValue::from_string(serde_json::to_string(&object).unwrap()).unwrap();
            let fast_ok = match kind.as_str() {
                "TerraformCluster" => {
                    serde_json::from_str::<SpecOf<captf_shared::types::TerraformClusterSpec>>(raw.get()).is_ok()
                }
                "TerraformMachinePool" => {
                    serde_json::from_str::<SpecOf<captf_shared::types::TerraformMachinePoolSpec>>(raw.get()).is_ok()
                }
                "TerraformMachine" => {
                    serde_json::from_str::<SpecOf<captf_shared::types::TerraformMachineSpec>>(raw.get()).is_ok()
                }
                _ => {
                    serde_json::from_str::<SpecOf<captf_shared::types::TerraformMachineTemplateSpec>>(raw.get()).is_ok()
                }
            };
            assert!(fast_ok, "{name}: the fast path must not fall back");
            let fast = parse_raw(&kind, &raw).unwrap();
            let full = parse_object(&kind, &object).unwrap();
            assert!(same_spec(&fast, &full), "{name}");
            assert_eq!(fast.metadata().name, full.metadata().name, "{name}");
            assert_eq!(fast.metadata().namespace, full.metadata().namespace, "{name}");
        }
    }

    #[test]
    fn a_spec_that_does_not_parse_gets_shared_parse_objects_field_path_report() {
        let (kind, mut object) = fixture_object("cluster-create-accepted");
        object["spec"]["jobs"] = serde_json::json!({"activeDeadlineSeconds": "1h"});
        let raw = RawValue::from_string(serde_json::to_string(&object).unwrap()).unwrap();
        assert_eq!(
            parse_raw(&kind, &raw).unwrap_err(),
            parse_object(&kind, &object).unwrap_err()
        );
    }
}
