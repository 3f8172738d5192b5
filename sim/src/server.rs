//! The HTTP face of the simulator: Kubernetes REST paths, discovery, watch streams and the
//! simulator's own `/sim/v1/...` endpoints (the clock).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::activity::WatchProgress;
use crate::admission::{Attributes, Services, admit};
use crate::error::ApiError;
use crate::faults::{Faults, Verb};
use crate::pruning::{FieldValidation, UnknownFields};
use crate::resources::ResourceDef;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, Propagation, Sub, WatchEvent, World, child, set};

/// Everything the request handlers share.
pub struct Shared {
    pub world: Mutex<World>,
    pub faults: Faults,
    pub services: Services,
    pub activity: crate::activity::Activity,
    pub auth: Arc<crate::auth::Auth>,
}

impl Shared {
    pub fn lock(&self) -> Result<MutexGuard<'_, World>, ApiError> {
        self.world
            .lock()
            .map_err(|_| ApiError::internal("simulator state poisoned"))
    }
}

/// The router: one handler for every path.
pub fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(shared)
}

fn json_response(code: u16, v: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.status());
    if e.code == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    r
}

/// A parsed resource path.
struct Target {
    def: ResourceDef,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

async fn handle(State(sh): State<Arc<Shared>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let _in_flight = sh.activity.request();
    let query: HashMap<String, String> = form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let mut query = query;
    let mut segs: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let mut body = body;
    // events.k8s.io/v1 Events are served from the core/v1 Events, converted both ways.
    let events_view = segs.len() > 3 && segs[..3] == ["apis", "events.k8s.io", "v1"];
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if events_view {
        segs = ["api", "v1"].into_iter().chain(segs[3..].iter().copied()).collect();
        if let Some(fs) = query.get("fieldSelector").cloned() {
            query.insert("fieldSelector".into(), crate::events::field_selector_to_core(&fs));
        }
        body = events_body_to_core(&headers, body);
    }
    let (verb, kind) = crate::activity::request_kind(method.as_str(), &segs, watching);
    sh.activity.count(verb, &kind);
    let caller = match sh.auth.authenticate(&headers) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let (result, warnings) = crate::admission::WARNINGS
        .scope(std::cell::RefCell::new(Vec::new()), async {
            let result = handle_inner(&sh, &caller, &method, &segs, &query, &headers, body, events_view).await;
            (result, crate::admission::WARNINGS.with(|w| w.take()))
        })
        .await;
    let mut response = match result {
        Ok(r) if events_view && !watching => {
            tracing::debug!(%method, %uri, status = r.status().as_u16(), "sim request");
            events_response_to_v1(r).await
        }
        Ok(r) => {
            tracing::debug!(%method, %uri, status = r.status().as_u16(), "sim request");
            r
        }
        Err(e) => {
            tracing::debug!(%method, %uri, status = e.code, reason = %e.reason, message = %e.message, "sim request failed");
            error_response(&e)
        }
    };
    for w in warning_texts(warnings) {
        if let Ok(v) = axum::http::HeaderValue::from_str(&warning_header(&w)) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// A `Warning` header value as kube-apiserver writes one: code 299, no agent, the text quoted
/// (backslashes and quotes escaped).
fn warning_header(text: &str) -> String {
    format!("299 - \"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// At most this many `Warning` headers: a kube-rs client over HTTP/1.1 (hyper) refuses a
/// response with more than 100 headers, which kube-apiserver's 4 KiB could pass.
const MAX_WARNINGS: usize = 64;

/// The warnings a response carries: those kube-apiserver's recorder would write
/// ([`recorded_warnings`]), at most [`MAX_WARNINGS`], the last then counting the others.
fn warning_texts(texts: Vec<String>) -> Vec<String> {
    let mut out = recorded_warnings(texts);
    if out.len() > MAX_WARNINGS {
        let more = out.len() - (MAX_WARNINGS - 1);
        out.truncate(MAX_WARNINGS - 1);
        out.push(format!("and {more} more warnings"));
    }
    out
}

/// kube-apiserver's warning recorder: each text once, in order, as long as all of them come to
/// at most 4096 characters; past that every text is cut to 256 characters and no more are added
/// once 4096 are written.
fn recorded_warnings(texts: Vec<String>) -> Vec<String> {
    const TOTAL: usize = 4096;
    const ITEM: usize = 256;
    let cut = |t: &str| -> String { t.chars().take(ITEM).collect() };
    let mut seen = std::collections::HashSet::new();
    let mut recorded: Vec<String> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let (mut written, mut truncating) = (0usize, false);
    for text in texts {
        if truncating && written >= TOTAL {
            break;
        }
        if text.is_empty() || !seen.insert(text.clone()) {
            continue;
        }
        recorded.push(text.clone());
        let text = if truncating { cut(&text) } else { text };
        let n = text.chars().count();
        if truncating || written + n <= TOTAL {
            written += n;
            out.push(text);
            continue;
        }
        // Over the limit: start again with every text so far cut.
        truncating = true;
        out = recorded.iter().map(|t| cut(t)).collect();
        written = out.iter().map(|t| t.chars().count()).sum();
    }
    out
}

fn events_body_to_core(headers: &HeaderMap, body: Bytes) -> Bytes {
    if body.is_empty() {
        return body;
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let parsed: Option<Value> = if ct.contains("yaml") {
        serde_yaml_ng::from_slice(&body).ok()
    } else {
        serde_json::from_slice(&body).ok()
    };
    match parsed {
        Some(v @ Value::Array(_)) => Bytes::from(crate::events::json_patch_to_core(&v).to_string()),
        Some(v) => Bytes::from(crate::events::to_core(&v).to_string()),
        None => body,
    }
}

async fn events_response_to_v1(r: Response) -> Response {
    let (parts, body) = r.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let out = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => Bytes::from(crate::events::response_to_events_v1(&v).to_string()),
        Err(_) => bytes,
    };
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

#[allow(clippy::too_many_arguments)]
async fn handle_inner(
    sh: &Arc<Shared>,
    caller: &crate::auth::Caller,
    method: &Method,
    segs: &[&str],
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
    events_view: bool,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::new(404, "NotFound", "the server could not find the requested resource");
    let (group, version, rest): (&str, &str, &[&str]) = match segs {
        ["version"] => {
            return Ok(json_response(
                200,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-captf-sim", "gitCommit": "",
                        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24",
                        "compiler": "gc", "platform": "linux/amd64"}),
            ));
        }
        ["healthz" | "readyz" | "livez", ..] => return Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => {
            return Ok(json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
            ));
        }
        ["apis"] => return Ok(json_response(200, &sh.lock()?.registry.group_list())),
        ["apis", g] => {
            return sh
                .lock()?
                .registry
                .group(g)
                .map(|v| json_response(200, &v))
                .ok_or_else(not_found);
        }
        ["sim", "v1", rest @ ..] => return sim_endpoint(sh, method, rest, query).await,
        ["openapi", "v3"] => return Ok(json_response(200, &sh.lock()?.registry.openapi_v3_index())),
        ["openapi", "v3", "api", v] => {
            return sh
                .lock()?
                .registry
                .openapi_v3_doc("", v)
                .map(|d| json_response(200, &d))
                .ok_or_else(not_found);
        }
        ["openapi", "v3", "apis", g, v] => {
            return sh
                .lock()?
                .registry
                .openapi_v3_doc(g, v)
                .map(|d| json_response(200, &d))
                .ok_or_else(not_found);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found()),
    };
    if rest.is_empty() {
        return sh
            .lock()?
            .registry
            .resource_list(group, version)
            .map(|v| json_response(200, &v))
            .ok_or_else(not_found);
    }
    let (ns, plural, name, sub) = match rest {
        ["namespaces", ns, res, tail @ ..] if !(tail.is_empty() && (*res == "status" || *res == "finalize")) => {
            (Some(ns.to_string()), *res, tail.first().copied(), tail.get(1).copied())
        }
        [res, tail @ ..] => (None, *res, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(not_found()),
    };
    let def = sh
        .lock()?
        .registry
        .find(group, version, plural)
        .cloned()
        .ok_or_else(not_found)?;
    if sub.is_some_and(|s| {
        !((s == "status" && def.has_status)
            || ((s == "eviction" || s == "log") && def.id() == "/pods")
            || (s == "token" && def.id() == "/serviceaccounts"))
    }) {
        return Err(not_found());
    }
    let t = Target {
        def,
        ns,
        name: name.map(String::from),
        sub: sub.map(String::from),
    };
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (method, &t.name, watch) {
        (&Method::GET, Some(_), _) => Verb::Get,
        (&Method::GET, None, true) => Verb::Watch,
        (&Method::GET, None, false) => Verb::List,
        (&Method::POST, _, _) => Verb::Create,
        (&Method::PUT, Some(_), _) => Verb::Update,
        (&Method::PATCH, Some(_), _) => Verb::Patch,
        (&Method::DELETE, _, _) => Verb::Delete,
        _ => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    {
        // What RBAC sees: DELETE of a collection is deletecollection; a list or watch names an
        // object only through a `metadata.name` field selector.
        let rbac_verb = match (verb, &t.name) {
            (Verb::Delete, None) => "deletecollection",
            (Verb::Delete, Some(_)) => "delete",
            (Verb::Get, _) => "get",
            (Verb::List, _) => "list",
            (Verb::Watch, _) => "watch",
            (Verb::Create, _) => "create",
            (Verb::Update, _) => "update",
            (Verb::Patch, _) => "patch",
        };
        let rbac_name = match verb {
            Verb::Create if t.sub.is_none() => None,
            Verb::List | Verb::Watch => query
                .get("fieldSelector")
                .and_then(|f| crate::rbac::name_from_field_selector(f)),
            _ => t.name.clone(),
        };
        let req = crate::rbac::Request::Resource {
            verb: rbac_verb.into(),
            group: if events_view {
                "events.k8s.io".into()
            } else {
                t.def.group.clone()
            },
            resource: t.def.plural.clone(),
            subresource: t.sub.clone(),
            namespace: t.ns.clone(),
            name: rbac_name,
        };
        sh.auth.authorize(&*sh.lock()?, caller, &req)?;
    }
    let latency = sh.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let fault_res = match &t.sub {
        Some(s) => format!("{}/{s}", t.def.plural),
        None => t.def.plural.clone(),
    };
    // A create names its object in the body.
    let body_name = match (verb, &t.name) {
        (Verb::Create, None) => serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.pointer("/metadata/name").and_then(Value::as_str).map(String::from)),
        _ => None,
    };
    sh.faults
        .wait_if_held(
            verb,
            &fault_res,
            t.ns.as_deref().unwrap_or(""),
            t.name.as_deref().or(body_name.as_deref()).unwrap_or(""),
        )
        .await;
    if let Some(e) = sh.faults.check(
        verb,
        &fault_res,
        t.ns.as_deref().unwrap_or(""),
        t.name.as_deref().or(body_name.as_deref()).unwrap_or(""),
    ) {
        return Err(e);
    }
    let ns = t.ns.clone().unwrap_or_default();
    match verb {
        Verb::Get => {
            let name = t.name.as_deref().unwrap_or_default();
            let w = sh.lock()?;
            let obj = w.get(&t.def, &ns, name)?;
            if t.sub.as_deref() == Some("log") {
                if query.get("follow").is_some_and(|f| f == "true") && query.get("previous").is_none_or(|p| p != "true")
                {
                    let live = w.tx.subscribe();
                    drop(w);
                    return Ok(pod_log_follow(sh, t.def.clone(), &ns, name, live));
                }
                return pod_log(&w, &ns, name, &obj, query);
            }
            if wants_table(headers) {
                return Ok(json_response(
                    200,
                    &crate::table::table(&t.def, &[obj], w.now(), w.resource_version()),
                ));
            }
            Ok(json_response(200, &obj))
        }
        Verb::List => list(sh, &t, query, wants_table(headers)),
        Verb::Watch => watch_stream(sh, &t, query, events_view, wants_table(headers)),
        Verb::Create => {
            if t.sub.as_deref() == Some("eviction") {
                let name = t.name.as_deref().unwrap_or_default();
                return evict(sh, &t.def, &ns, name);
            }
            if t.sub.as_deref() == Some("token") {
                let name = t.name.as_deref().unwrap_or_default();
                return token_request(sh, &t.def, &ns, name);
            }
            if t.def.namespaced && t.ns.is_none() {
                return Err(ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ));
            }
            let validation = FieldValidation::parse(query.get("fieldValidation").map(String::as_str), "CreateOptions")?;
            let mut obj = parse_body(&body, headers)?;
            prune_request(&t.def, &mut obj, validation, |u| cannot_be_handled(&t.def, u))?;
            if obj.pointer("/metadata/namespace").is_none() && t.def.namespaced {
                set(child(&mut obj, "metadata"), "namespace", json!(ns));
            }
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let uid = sh.lock()?.rng.uuid();
            let attrs = Attributes {
                def: &t.def,
                subresource: None,
                operation: "CREATE",
                namespace: &ns,
                name: &name,
                object: Some(obj.clone()),
                old_object: None,
            };
            let mut obj = admit(&sh.world, &sh.services, attrs, uid).await?.unwrap_or(obj);
            prune_silently(&t.def, &mut obj);
            crate::auth::check_escalation(&*sh.lock()?, caller, &t.def, t.ns.as_deref(), &obj)?;
            if query.get("dryRun").is_some_and(|d| d == "All") {
                return Ok(json_response(201, &obj));
            }
            let created = sh.lock()?.create_collected(&t.def, &ns, obj)?;
            Ok(json_response(201, &created))
        }
        Verb::Update => {
            let name = t.name.clone().unwrap_or_default();
            let validation = FieldValidation::parse(query.get("fieldValidation").map(String::as_str), "UpdateOptions")?;
            let mut new = parse_body(&body, headers)?;
            prune_request(&t.def, &mut new, validation, |u| cannot_be_handled(&t.def, u))?;
            let sub = if t.sub.is_some() { Sub::Status } else { Sub::Main };
            let old = sh.lock()?.get(&t.def, &ns, &name)?;
            let new = admit_update(sh, &t, &ns, &name, new, old).await?;
            crate::auth::check_escalation(&*sh.lock()?, caller, &t.def, t.ns.as_deref(), &new)?;
            Ok(json_response(200, &sh.lock()?.update(&t.def, &ns, &name, new, sub)?))
        }
        Verb::Patch => patch(sh, caller, &t, &ns, query, headers, &body).await,
        Verb::Delete => {
            let opts = delete_opts(&body, query)?;
            match t.name.clone() {
                Some(name) => {
                    let old = sh.lock()?.get(&t.def, &ns, &name)?;
                    let uid = sh.lock()?.rng.uuid();
                    let attrs = Attributes {
                        def: &t.def,
                        subresource: None,
                        operation: "DELETE",
                        namespace: &ns,
                        name: &name,
                        object: None,
                        old_object: Some(old),
                    };
                    admit(&sh.world, &sh.services, attrs, uid).await?;
                    Ok(json_response(200, &sh.lock()?.delete(&t.def, &ns, &name, &opts)?))
                }
                None => {
                    // deletecollection
                    let (ls, fs) = selectors(query)?;
                    let mut w = sh.lock()?;
                    let items = w.list_where(&t.def, t.ns.as_deref(), |o| ls.matches(o) && fs.matches(o));
                    for o in &items {
                        let n = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                        let _ = w.delete(&t.def, &ns, n, &opts);
                    }
                    Ok(json_response(200, &list_body(&t.def, w.resource_version(), items)))
                }
            }
        }
    }
}

async fn admit_update(
    sh: &Arc<Shared>,
    t: &Target,
    ns: &str,
    name: &str,
    new: Value,
    old: Value,
) -> Result<Value, ApiError> {
    let uid = sh.lock()?.rng.uuid();
    let attrs = Attributes {
        def: &t.def,
        subresource: t.sub.as_deref(),
        operation: "UPDATE",
        namespace: ns,
        name,
        object: Some(new.clone()),
        old_object: Some(old),
    };
    let mut new = admit(&sh.world, &sh.services, attrs, uid).await?.unwrap_or(new);
    prune_silently(&t.def, &mut new);
    Ok(new)
}

/// A custom resource's request body pruned by its CRD's schema, its unknown fields reported as
/// the request asks: a warning each (`Warn`), or the write refused with `refusal` (`Strict`).
/// Other resources are left as they are (the simulator has no schemas of built-in kinds).
fn prune_request(
    def: &ResourceDef,
    obj: &mut Value,
    validation: FieldValidation,
    refusal: impl FnOnce(&UnknownFields) -> ApiError,
) -> Result<(), ApiError> {
    let Some(schema) = def.schema.as_deref() else {
        return Ok(());
    };
    let unknown = crate::pruning::prune(schema, obj);
    match validation {
        _ if unknown.is_empty() => Ok(()),
        FieldValidation::Strict => Err(refusal(&unknown)),
        FieldValidation::Warn => {
            crate::admission::warn(unknown.warnings());
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// What a mutating webhook added that the schema does not declare is dropped without a word, as
/// kube-apiserver drops it.
fn prune_silently(def: &ResourceDef, obj: &mut Value) {
    if let Some(schema) = def.schema.as_deref() {
        crate::pruning::prune(schema, obj);
    }
}

/// kube-apiserver's refusal of a create or update body with unknown fields under
/// `fieldValidation=Strict`: its decoder's 400.
fn cannot_be_handled(def: &ResourceDef, unknown: &UnknownFields) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: {}",
        unknown.strict_error(),
        kind = def.kind,
        version = def.version,
    ))
}

/// kube-apiserver's refusal of a patch whose result has unknown fields under
/// `fieldValidation=Strict`: a 422 on the field `patch`, showing the patched object.
fn patch_refused(patched: &str, unknown: &UnknownFields) -> ApiError {
    let cause = format!("Invalid value: {patched:?}: {}", unknown.strict_error());
    let mut e = ApiError::new(422, "Invalid", format!(" \"\" is invalid: patch: {cause}"));
    e.details = Some(json!({"causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "patch"}]}));
    e
}

fn parse_body(body: &Bytes, headers: &HeaderMap) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let v: Value = if ct.starts_with(crate::protobuf::MEDIA_TYPE) {
        crate::protobuf::decode(body).map_err(|e| ApiError::bad_request(e.to_string()))?
    } else if ct.contains("yaml") {
        serde_yaml_ng::from_slice(body).map_err(|e| ApiError::bad_request(format!("failed to parse YAML body: {e}")))?
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("failed to parse JSON body: {e}")))?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("the body of the request is not a JSON object"));
    }
    Ok(v)
}

fn delete_opts(body: &Bytes, query: &HashMap<String, String>) -> Result<DeleteOpts, ApiError> {
    let v: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("failed to parse DeleteOptions: {e}")))?
    };
    let policy = v
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| query.get("propagationPolicy").cloned());
    let propagation = match policy.as_deref() {
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => return Err(ApiError::bad_request(format!("unknown propagationPolicy {other:?}"))),
        None => match v.get("orphanDependents").and_then(Value::as_bool) {
            Some(true) => Some(Propagation::Orphan),
            Some(false) => Some(Propagation::Background),
            None => None,
        },
    };
    Ok(DeleteOpts {
        propagation,
        uid: v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        resource_version: v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

fn selectors(query: &HashMap<String, String>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    Ok((
        LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))?,
    ))
}

fn list_body(def: &ResourceDef, rv: u64, items: Vec<Value>) -> Value {
    json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(),
           "metadata": {"resourceVersion": rv.to_string()}, "items": items})
}

/// A page's `continue` and `remainingItemCount`, when more pages follow.
fn page_metadata(body: &mut Value, next: Option<String>, remaining: usize) {
    if let Some(next) = next {
        body["metadata"]["continue"] = json!(next);
        body["metadata"]["remainingItemCount"] = json!(remaining);
    }
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn list(sh: &Arc<Shared>, t: &Target, query: &HashMap<String, String>, table: bool) -> Result<Response, ApiError> {
    let (ls, fs) = selectors(query)?;
    let limit = crate::paging::limit(query.get("limit").map(String::as_str))?;
    // What the list is of: a continue token serves only the list it was issued for.
    let scope = format!(
        "{}|{}|{}|{}",
        t.def.id(),
        t.ns.as_deref().unwrap_or_default(),
        query.get("labelSelector").map(String::as_str).unwrap_or_default(),
        query.get("fieldSelector").map(String::as_str).unwrap_or_default()
    );
    // Copy only what matches, and serialize after the lock is released.
    let (page, now) = {
        let mut w = sh.lock()?;
        let page = match query.get("continue").filter(|c| !c.is_empty()) {
            Some(token) => {
                let compacted = w.compacted_rv();
                w.pages.next(&scope, token, limit, compacted)?
            }
            None => {
                let items = w.list_selected(&t.def, t.ns.as_deref(), &ls, &fs);
                let rv = w.resource_version();
                w.pages.first(scope, rv, items, limit)
            }
        };
        (page, w.now())
    };
    let mut body = if table {
        crate::table::table(&t.def, &page.items, now, page.rv)
    } else {
        list_body(&t.def, page.rv, page.items)
    };
    page_metadata(&mut body, page.next, page.remaining);
    Ok(json_response(200, &body))
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    line(&json!({"type": kind, "object": object}))
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    stream_response_counted(rx, None)
}

/// The receiving end of a watch body. When the connection goes, the watch is done and its
/// queued lines no longer wait to be written.
struct CountedRx {
    rx: mpsc::Receiver<Bytes>,
    progress: Option<Arc<WatchProgress>>,
}

impl Drop for CountedRx {
    fn drop(&mut self) {
        if let Some(p) = &self.progress {
            p.done.store(true, Ordering::SeqCst);
            p.written.store(p.queued.load(Ordering::SeqCst), Ordering::SeqCst);
        }
    }
}

/// A streamed body; with `progress`, each line handed to the body counts as written.
fn stream_response_counted(rx: mpsc::Receiver<Bytes>, progress: Option<Arc<WatchProgress>>) -> Response {
    let stream = futures::stream::unfold(CountedRx { rx, progress }, |mut c| async move {
        let b = c.rx.recv().await?;
        if let Some(p) = &c.progress {
            p.written.fetch_add(1, Ordering::SeqCst);
        }
        Some((Ok::<_, Infallible>(b), c))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn watch_stream(
    sh: &Arc<Shared>,
    t: &Target,
    query: &HashMap<String, String>,
    events_view: bool,
    table: bool,
) -> Result<Response, ApiError> {
    // Each object as the client asked for it: a one-row Table (kubectl get -w), the
    // events.k8s.io view, or as stored.
    let (table_def, clock) = (t.def.clone(), sh.lock()?.clock.subscribe());
    let event_line = move |kind: &str, object: &Value| {
        if kind == "ERROR" || kind == "BOOKMARK" {
            event_line(kind, object)
        } else if table {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            event_line(
                kind,
                &crate::table::table(&table_def, std::slice::from_ref(object), *clock.borrow(), rv),
            )
        } else if events_view {
            event_line(kind, &crate::events::to_events_v1(object))
        } else {
            event_line(kind, object)
        }
    };
    let (ls, fs) = selectors(query)?;
    let (ls0, fs0) = (ls.clone(), fs.clone());
    let res = t.def.id();
    let ns_filter = t.ns.clone();
    // As kube-apiserver's watch cache: a change that makes an object match is ADDED, one that
    // makes it stop matching is DELETED.
    let select = move |e: &WatchEvent| -> Option<&'static str> {
        if e.res != res || ns_filter.as_deref().is_some_and(|n| n != e.ns) {
            return None;
        }
        let now = ls.matches(&e.object) && fs.matches(&e.object);
        let before = e.old.as_ref().map(|o| ls.matches(o) && fs.matches(o));
        match (e.kind, before, now) {
            (crate::store::EventType::Modified, Some(false), true) => Some("ADDED"),
            (crate::store::EventType::Modified, Some(true), false) => Some("DELETED"),
            (_, _, true) => Some(e.kind.as_str()),
            _ => None,
        }
    };
    let rv_param = query.get("resourceVersion").filter(|r| !r.is_empty() && *r != "0");
    let initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = query.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let mut backlog: Vec<Bytes> = Vec::new();
    let (mut live, mut last_rv, progress);
    {
        let w = sh.lock()?;
        live = w.tx.subscribe();
        progress = sh.activity.watch(w.published);
        last_rv = w.resource_version();
        match rv_param {
            Some(rv) if !initial => {
                let from: u64 = rv
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?;
                match w.history_since(from) {
                    Some(events) => {
                        for e in &events {
                            if let Some(kind) = select(e) {
                                backlog.push(event_line(kind, &e.object));
                            }
                        }
                    }
                    None => {
                        let gone =
                            ApiError::gone(format!("too old resource version: {from} ({})", w.compacted_rv() + 1));
                        backlog.push(event_line("ERROR", &gone.status()));
                        drop(live);
                        let (tx2, rx2) = mpsc::channel(2);
                        let _ = tx2.try_send(backlog.remove(0));
                        return Ok(stream_response(rx2));
                    }
                }
            }
            _ => {
                // The initial ADDED events: only matching objects are copied (the namespace is
                // already the scan's bound).
                for o in w.scan_where(&t.def, t.ns.as_deref(), |o| ls0.matches(o) && fs0.matches(o)) {
                    backlog.push(event_line("ADDED", o));
                }
                if initial || bookmarks {
                    backlog.push(event_line(
                        "BOOKMARK",
                        &json!({"kind": t.def.kind, "apiVersion": t.def.api_version(),
                                "metadata": {"resourceVersion": last_rv.to_string(),
                                             "annotations": {"k8s.io/initial-events-end": "true"}}}),
                    ));
                }
            }
        }
    }
    let mut drops = sh.faults.drop_signal();
    drops.mark_unchanged();
    let body_progress = progress.clone();
    tokio::spawn(async move {
        // Queued before sent, so a line is never written before it counts as queued.
        let send = |tx: mpsc::Sender<Bytes>, b: Bytes, p: Arc<WatchProgress>| async move {
            p.queued.fetch_add(1, Ordering::SeqCst);
            let ok = tx.send(b).await.is_ok();
            if !ok {
                p.written.fetch_add(1, Ordering::SeqCst);
            }
            ok
        };
        let run = async {
            for b in backlog {
                if !send(tx.clone(), b, progress.clone()).await {
                    return;
                }
            }
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = drops.changed() => return,
                    ev = live.recv() => match ev {
                        Ok(e) => {
                            let line = (e.rv > last_rv || e.rv == 0).then(|| {
                                last_rv = e.rv;
                                select(&e).map(|kind| event_line(kind, &e.object))
                            }).flatten();
                            let ok = match line {
                                Some(line) => send(tx.clone(), line, progress.clone()).await,
                                None => true,
                            };
                            progress.taken.fetch_add(1, Ordering::SeqCst);
                            if !ok {
                                return;
                            }
                        }
                        Err(_) => return,
                    },
                }
            }
        };
        run.await;
        progress.done.store(true, Ordering::SeqCst);
    });
    Ok(stream_response_counted(rx, Some(body_progress)))
}

fn patch_touches_rv(body: &Bytes) -> bool {
    body.windows(b"resourceVersion".len()).any(|w| w == b"resourceVersion")
}

async fn patch(
    sh: &Arc<Shared>,
    caller: &crate::auth::Caller,
    t: &Target,
    ns: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let sub = if t.sub.is_some() { Sub::Status } else { Sub::Main };
    let validation = FieldValidation::parse(query.get("fieldValidation").map(String::as_str), "PatchOptions")?;
    let is_apply = ct == "application/apply-patch+yaml";
    if is_apply && query.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    if ct == "application/strategic-merge-patch+json" && t.def.custom {
        // kube-apiserver has no strategic merge patch for custom resources.
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let patch_value: Value = match ct.as_str() {
        "application/apply-patch+yaml" => serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("failed to parse apply patch: {e}")))?,
        "application/json-patch+json" | "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("failed to parse patch: {e}")))?
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
                ),
            ));
        }
    };
    if is_apply && let Some(schema) = t.def.schema.as_deref() {
        // The field manager types the patch by the schema before anything else: an undeclared
        // field is refused whatever `fieldValidation` says.
        let undeclared = crate::pruning::apply_errors(schema, &patch_value);
        if !undeclared.is_empty() {
            return Err(crate::pruning::apply_error(&t.def, &patch_value, &undeclared));
        }
    }
    for _ in 0..10 {
        let got = sh.lock()?.get(&t.def, ns, &name);
        let old = match got {
            Ok(o) => o,
            Err(e) if e.code == 404 && is_apply && sub == Sub::Main => {
                // Server-side apply of an absent object creates it.
                let mut obj = patch_value.clone();
                obj["metadata"]["name"] = json!(name);
                if t.def.namespaced {
                    set(child(&mut obj, "metadata"), "namespace", json!(ns));
                }
                let uid = sh.lock()?.rng.uuid();
                let attrs = Attributes {
                    def: &t.def,
                    subresource: None,
                    operation: "CREATE",
                    namespace: ns,
                    name: &name,
                    object: Some(obj.clone()),
                    old_object: None,
                };
                let mut obj = admit(&sh.world, &sh.services, attrs, uid).await?.unwrap_or(obj);
                prune_silently(&t.def, &mut obj);
                crate::auth::check_escalation(&*sh.lock()?, caller, &t.def, t.ns.as_deref(), &obj)?;
                return Ok(json_response(201, &sh.lock()?.create_collected(&t.def, ns, obj)?));
            }
            Err(e) => return Err(e),
        };
        let mut new = old.clone();
        if ct == "application/json-patch+json" {
            let p: json_patch::Patch = serde_json::from_value(patch_value.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut new, &p).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        } else {
            json_patch::merge(&mut new, &patch_value);
        }
        if is_apply {
            prune_silently(&t.def, &mut new);
        } else {
            // The patched object is decoded as a create's body is: unknown fields (the patch's:
            // the stored object has none) are dropped and reported.
            let shown = (validation == FieldValidation::Strict && t.def.schema.is_some()).then(|| new.to_string());
            prune_request(&t.def, &mut new, validation, |u| {
                patch_refused(shown.as_deref().unwrap_or_default(), u)
            })?;
        }
        let new = admit_update(sh, t, ns, &name, new, old).await?;
        crate::auth::check_escalation(&*sh.lock()?, caller, &t.def, t.ns.as_deref(), &new)?;
        match sh.lock()?.update(&t.def, ns, &name, new, sub) {
            Err(e) if e.code == 409 && e.reason == "Conflict" && !patch_touches_rv(body) => continue,
            r => return Ok(json_response(200, &r?)),
        }
    }
    Err(ApiError::conflict(&t.def, &name))
}

fn evict(sh: &Arc<Shared>, def: &ResourceDef, ns: &str, name: &str) -> Result<Response, ApiError> {
    let mut w = sh.lock()?;
    w.get(def, ns, name)?;
    if !w.evict(ns, name) {
        w.delete(def, ns, name, &DeleteOpts::default())?;
    }
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// `POST .../serviceaccounts/<name>/token`: a TokenRequest answered with a new token of the
/// ServiceAccount (which must exist).
fn token_request(sh: &Arc<Shared>, def: &ResourceDef, ns: &str, name: &str) -> Result<Response, ApiError> {
    let expires = {
        let w = sh.lock()?;
        w.get(def, ns, name)?;
        w.now()
            .checked_add(jiff::SignedDuration::from_hours(1))
            .unwrap_or(w.now())
    };
    let token = sh.auth.mint(ns, name);
    Ok(json_response(
        201,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"audiences": [], "expirationSeconds": 3600},
                "status": {"token": token, "expirationTimestamp": expires.to_string()}}),
    ))
}

fn clock_json(now: Timestamp) -> Value {
    json!({"now": now.to_string()})
}

async fn sim_endpoint(
    sh: &Arc<Shared>,
    method: &Method,
    rest: &[&str],
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    match (method, rest) {
        (&Method::GET, ["clock"]) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            // Tracked like an event watch (see `activity`): the simulator is not quiet until the
            // new time has been handed to every clock watch's connection.
            let (mut rx, progress) = {
                let w = sh.lock()?;
                (w.clock.subscribe(), sh.activity.clock_watch(w.clock_changes))
            };
            let mut drops = sh.faults.drop_signal();
            drops.mark_unchanged();
            let (tx, out) = mpsc::channel::<Bytes>(64);
            let body_progress = progress.clone();
            let sh = sh.clone();
            tokio::spawn(async move {
                let send = |now: Timestamp| {
                    progress.queued.fetch_add(1, Ordering::SeqCst);
                    let line = line(&clock_json(now));
                    let tx = tx.clone();
                    let progress = progress.clone();
                    async move {
                        let ok = tx.send(line).await.is_ok();
                        if !ok {
                            progress.written.fetch_add(1, Ordering::SeqCst);
                        }
                        ok
                    }
                };
                let first = *rx.borrow_and_update();
                let mut ok = send(first).await;
                while ok {
                    tokio::select! {
                        _ = drops.changed() => break,
                        changed = rx.changed() => {
                            if changed.is_err() {
                                break;
                            }
                            // Marked seen first, then the time and the count of changes read
                            // together: the count taken is never ahead of the time sent, and a
                            // change in between is seen again on the next turn.
                            rx.borrow_and_update();
                            let Ok((now, changes)) = sh.lock().map(|w| (w.now(), w.clock_changes)) else {
                                break;
                            };
                            ok = send(now).await;
                            progress.taken.fetch_max(changes, Ordering::SeqCst);
                        }
                    }
                }
                progress.done.store(true, Ordering::SeqCst);
            });
            Ok(stream_response_counted(out, Some(body_progress)))
        }
        (&Method::GET, ["clock"]) => Ok(json_response(200, &clock_json(sh.lock()?.now()))),
        (&Method::POST, ["clock", "advance"]) => {
            let by = query
                .get("by")
                .or_else(|| query.get("seconds"))
                .ok_or_else(|| ApiError::bad_request("advance needs ?by=<Go duration> or ?seconds=<n>"))?;
            let d = match by.parse::<u64>() {
                Ok(s) => Duration::from_secs(s),
                Err(_) => captf_shared::duration::parse(by).map_err(|e| ApiError::bad_request(e.to_string()))?,
            };
            let mut w = sh.lock()?;
            let target = crate::store::later_or_max(w.now(), d);
            w.advance_to(target);
            Ok(json_response(200, &clock_json(w.now())))
        }
        _ => Err(ApiError::new(404, "NotFound", "unknown simulator endpoint")),
    }
}

/// `GET pods/<name>/log?follow=true`: the log so far, then what is added to it, until the
/// container has terminated (or the pod is gone), as kube-apiserver streams it. A change of the
/// pod wakes it; a real runner's output, written without one, is looked at every 100 ms.
fn pod_log_follow(
    sh: &Arc<Shared>,
    def: ResourceDef,
    ns: &str,
    name: &str,
    mut live: tokio::sync::broadcast::Receiver<Arc<WatchEvent>>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let (sh, ns, name) = (sh.clone(), ns.to_string(), name.to_string());
    tokio::spawn(async move {
        let mut sent = 0usize;
        loop {
            let (text, done) = {
                let Ok(w) = sh.lock() else { return };
                match w.get(&def, &ns, &name) {
                    Ok(pod) => {
                        let given = w.kubelet.logs.get(&(ns.clone(), name.clone()));
                        let text = crate::kubelet::pod_log(given.map(String::as_str), &pod);
                        let done = pod.pointer("/status/containerStatuses/0/state/terminated").is_some();
                        (text, done)
                    }
                    Err(_) => (String::new(), true),
                }
            };
            if let Some(new) = text.get(sent..).filter(|n| !n.is_empty()) {
                if tx.send(Bytes::from(new.to_string())).await.is_err() {
                    return;
                }
                sent = text.len();
            }
            if done {
                return;
            }
            tokio::select! {
                ev = live.recv() => {
                    if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                        return;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let b = rx.recv().await?;
        Some((Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `GET pods/<name>/log`: the runner's log as plain text. The simulated containers never
/// restart, so `previous=true` is the API server's 400.
fn pod_log(
    w: &World,
    ns: &str,
    name: &str,
    pod: &Value,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let container = pod
        .pointer("/spec/containers/0/name")
        .and_then(Value::as_str)
        .unwrap_or("runner");
    if query.get("previous").is_some_and(|p| p == "true") {
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        )));
    }
    let given = w.kubelet.logs.get(&(ns.to_string(), name.to_string()));
    let text = crate::kubelet::pod_log(given.map(String::as_str), pod);
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(i: usize) -> String {
        format!("unknown field \"spec.bare.field{i:03}\"")
    }

    #[test]
    fn warnings_are_recorded_once_each_up_to_four_kibibytes_as_kube_apiserver_does() {
        let texts = vec!["a".to_string(), "b".into(), "a".into(), String::new(), "c".into()];
        assert_eq!(recorded_warnings(texts), ["a", "b", "c"]);
        // 300 warnings of 34 characters: kube-apiserver v1.36 sent the first 121.
        let many: Vec<String> = (0..300).map(unknown).collect();
        let recorded = recorded_warnings(many);
        assert_eq!(recorded.len(), 121);
        assert_eq!(recorded[120], unknown(120));
    }

    #[test]
    fn a_warning_past_the_limit_is_cut_to_256_characters() {
        let long = "x".repeat(10_000);
        assert_eq!(
            recorded_warnings(vec!["short".into(), long]),
            ["short".to_string(), "x".repeat(256)]
        );
        let wide = "é".repeat(5000);
        assert_eq!(recorded_warnings(vec![wide])[0].chars().count(), 256);
    }

    #[test]
    fn a_response_carries_at_most_64_warnings_the_last_counting_the_others() {
        let texts = warning_texts((0..300).map(unknown).collect());
        assert_eq!(texts.len(), MAX_WARNINGS);
        assert_eq!(texts[MAX_WARNINGS - 2], unknown(62));
        assert_eq!(texts[MAX_WARNINGS - 1], "and 58 more warnings");
        assert_eq!(warning_texts((0..64).map(unknown).collect()).len(), 64);
    }

    #[test]
    fn warning_headers_quote_the_text() {
        assert_eq!(warning_header(r#"a "b" \c"#), r#"299 - "a \"b\" \\c""#);
    }
}
