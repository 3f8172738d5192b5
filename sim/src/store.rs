//! The object store and its semantics: create (generateName, uid, creationTimestamp,
//! resourceVersion), update with resourceVersion preconditions, status subresource separation,
//! `metadata.generation`, finalizers and `deletionTimestamp`, propagation policies and ownerReference
//! garbage collection, and the event history that watches replay.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, watch};

use crate::error::ApiError;
use crate::kubelet::Kubelet;
use crate::resources::{Registry, ResourceDef};
use crate::runner::Scripts;

/// `2024-06-01T10:20:30Z` (metav1.Time).
pub fn fmt_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `2024-06-01T10:20:30.123456Z` (metav1.MicroTime).
pub fn fmt_micro(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// ADDED, MODIFIED or DELETED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as a watch reports it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub res: String,
    pub ns: String,
    pub kind: EventType,
    pub object: Value,
    /// The object before a MODIFIED change (selector watches turn changes into ADDED/DELETED).
    pub old: Option<Value>,
    /// The wall-clock instant the change was made (measurements: finish → next Job).
    pub wall: std::time::Instant,
}

type Key = (String, String, String);

/// The label whose values the store indexes: the controller lists an object's Jobs and pods by
/// it, and without the index each such list would look at every Job or pod of the namespace.
pub const INDEXED_LABEL: &str = "captf.io/object";

/// The index entry of an object (`None`: it does not carry [`INDEXED_LABEL`]).
fn label_key(key: &Key, obj: &Value) -> Option<Key> {
    let v = obj.pointer("/metadata/labels")?.get(INDEXED_LABEL)?.as_str()?;
    Some((key.0.clone(), key.1.clone(), v.to_string()))
}

/// A small deterministic random source (SplitMix64): names, uids, lock IDs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// `n` characters of the API server's generated-name alphabet.
    pub fn name_suffix(&mut self, n: usize) -> String {
        let alphabet = captf_shared::names::GENERATED_NAME_ALPHABET.as_bytes();
        (0..n)
            .map(|_| alphabet[(self.next_u64() % alphabet.len() as u64) as usize] as char)
            .collect()
    }
    /// A random version-4-shaped UUID.
    pub fn uuid(&mut self) -> String {
        let (a, b) = (self.next_u64(), self.next_u64());
        let h = format!("{a:016x}{b:016x}");
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }
}

/// How a delete propagates to dependents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// The parts of DeleteOptions the simulator honours.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub propagation: Option<Propagation>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Which part of an object a write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
}

/// The whole simulated cluster state, behind one lock.
pub struct World {
    pub registry: Registry,
    rv: u64,
    objects: BTreeMap<Key, Value>,
    uids: HashMap<String, Key>,
    /// owner uid → its dependents.
    owners: HashMap<String, BTreeSet<Key>>,
    /// (resource, namespace, value of [`INDEXED_LABEL`]) → the objects that carry it.
    labelled: HashMap<Key, BTreeSet<Key>>,
    history: VecDeque<Arc<WatchEvent>>,
    history_cap: usize,
    compacted: u64,
    /// The open snapshots of paged lists.
    pub pages: crate::paging::Pages,
    pub tx: broadcast::Sender<Arc<WatchEvent>>,
    /// Events published on `tx` so far (see `activity`).
    pub published: u64,
    pub clock: watch::Sender<Timestamp>,
    /// Changes of `clock` so far (see `activity`: clock watches are tracked like event watches).
    pub clock_changes: u64,
    pub rng: Rng,
    pub kubelet: Kubelet,
    pub scripts: Scripts,
    /// Lossless observers of every change (see [`crate::Sim::observe`]).
    observers: Vec<Observer>,
    /// Changes of RBAC objects so far: the policy every request is authorized against is
    /// compiled again only after one (see [`World::policy`]).
    rbac_changes: u64,
    policy: std::sync::Mutex<Option<(u64, Arc<crate::rbac::Policy>)>>,
}

/// Called with the simulated time and each change, under the world's lock.
pub type Observer = Box<dyn FnMut(Timestamp, &WatchEvent) + Send>;

/// The resources whose changes change the RBAC policy.
const RBAC_PREFIX: &str = "rbac.authorization.k8s.io/";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// `ts + d`, or `None` past the end of time (a huge deadline or duration never comes).
pub fn later(ts: Timestamp, d: std::time::Duration) -> Option<Timestamp> {
    let d = jiff::SignedDuration::try_from(d).ok()?;
    ts.checked_add(d).ok()
}

/// `ts + d`, saturating at the latest representable time.
pub fn later_or_max(ts: Timestamp, d: std::time::Duration) -> Timestamp {
    later(ts, d).unwrap_or(Timestamp::MAX)
}

/// `v[key] = val`, making `v` an object first if it is not one (never panics).
pub fn set(v: &mut Value, key: &str, val: Value) {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    if let Some(m) = v.as_object_mut() {
        m.insert(key.into(), val);
    }
}

/// `&mut v[key]`, made an object (as `v` is) when it is not one (never panics).
pub fn child<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let slot = &mut v[key];
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot
}

fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let slot = &mut obj["metadata"];
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Are `a` and `b` equal but for these top-level fields (compared in place, no copy)?
fn equal_except(a: &Value, b: &Value, skip: &[&str]) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => {
            let kept = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
            kept(x) == kept(y)
                && x.iter()
                    .filter(|(k, _)| !skip.contains(&k.as_str()))
                    .all(|(k, v)| y.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// Same but for metadata and status: what `metadata.generation` tracks.
fn same_spec(a: &Value, b: &Value) -> bool {
    equal_except(a, b, &["metadata", "status"])
}

/// Same but for `metadata.resourceVersion`: a write that changes nothing else is a no-op.
fn same_but_version(a: &Value, b: &Value) -> bool {
    let none = Value::Null;
    equal_except(a, b, &["metadata"])
        && equal_except(
            a.get("metadata").unwrap_or(&none),
            b.get("metadata").unwrap_or(&none),
            &["resourceVersion"],
        )
}

impl World {
    pub fn new(registry: Registry, now: Timestamp, seed: u64, history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        let (clock, _) = watch::channel(now);
        let mut w = World {
            registry,
            rv: 1000,
            objects: BTreeMap::new(),
            uids: HashMap::new(),
            owners: HashMap::new(),
            labelled: HashMap::new(),
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            compacted: 1000,
            pages: crate::paging::Pages::default(),
            tx,
            published: 0,
            clock,
            clock_changes: 0,
            rng: Rng::new(seed),
            kubelet: Kubelet::default(),
            scripts: Scripts::default(),
            observers: Vec::new(),
            rbac_changes: 0,
            policy: std::sync::Mutex::new(None),
        };
        for ns in ["default", "kube-system", "kube-public"] {
            w.ensure_namespace(ns);
        }
        w
    }

    pub fn now(&self) -> Timestamp {
        *self.clock.borrow()
    }

    pub fn set_now(&mut self, ts: Timestamp) {
        self.clock_changes += 1;
        self.clock.send_replace(ts);
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch may still start from.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted
    }

    /// Forget the event history: watches from any older resourceVersion, and the continue
    /// tokens of paged lists, get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
        self.pages.clear();
    }

    pub fn def(&self, id: &str) -> Result<ResourceDef, ApiError> {
        self.registry.by_id(id).cloned().ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({id})"),
            )
        })
    }

    pub fn ensure_namespace(&mut self, ns: &str) {
        if self
            .objects
            .contains_key(&("/namespaces".into(), String::new(), ns.into()))
        {
            return;
        }
        if let Ok(def) = self.def("/namespaces") {
            let _ = self.create(&def, "", json!({"metadata": {"name": ns}}));
        }
    }

    fn emit(&mut self, res: &str, ns: &str, kind: EventType, object: Value, old: Option<Value>) {
        let ev = Arc::new(WatchEvent {
            rv: self.rv,
            res: res.into(),
            ns: ns.into(),
            kind,
            object,
            old,
            wall: std::time::Instant::now(),
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        self.published += 1;
        let now = self.now();
        for o in &mut self.observers {
            o(now, &ev);
        }
        let _ = self.tx.send(ev);
    }

    /// The RBAC policy of the objects stored now, compiled once per change of them: with an
    /// object's own Role and RoleBinding per managed object, compiling it per request made every
    /// request cost as much as all the Roles together.
    pub fn policy(&self) -> Arc<crate::rbac::Policy> {
        let mut cached = self.policy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*cached {
            Some((at, p)) if *at == self.rbac_changes => p.clone(),
            _ => {
                let p = Arc::new(crate::auth::compile_policy(self));
                *cached = Some((self.rbac_changes, p.clone()));
                p
            }
        }
    }

    /// Add a lossless observer of every change from now on.
    pub fn observe(&mut self, observer: Observer) {
        self.observers.push(observer);
    }

    /// Events after `rv` for the resource, or `None` when `rv` is older than the history (410).
    pub fn history_since(&self, rv: u64) -> Option<Vec<Arc<WatchEvent>>> {
        if rv < self.compacted {
            return None;
        }
        Some(self.history.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects
            .get(&(def.id(), ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))
    }

    pub fn try_get(&self, def_id: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(def_id.to_string(), ns.to_string(), name.to_string()))
    }

    /// Objects of a resource, in one namespace or (`None`) all.
    pub fn list(&self, def: &ResourceDef, ns: Option<&str>) -> Vec<Value> {
        self.list_where(def, ns, |_| true)
    }

    /// The objects of a resource (in one namespace or all) that match, each cloned only when it
    /// matches: the key order (resource, namespace, name) bounds the scan to the resource and
    /// namespace, and a selector costs a look at each object there, not a copy.
    pub fn list_where(&self, def: &ResourceDef, ns: Option<&str>, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.scan_where(def, ns, keep).cloned().collect()
    }

    /// The objects of a resource (in one namespace or all) that match the selectors. A selector
    /// that requires one value of [`INDEXED_LABEL`] in one namespace looks only at the objects
    /// that carry it; the answer and its order (by name) are those of a full scan.
    pub fn list_selected(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        ls: &crate::selectors::LabelSelector,
        fs: &crate::selectors::FieldSelector,
    ) -> Vec<Value> {
        let keep = |o: &Value| ls.matches(o) && fs.matches(o);
        match (ns, ls.required_value(INDEXED_LABEL)) {
            (Some(ns), Some(v)) => self
                .labelled
                .get(&(def.id(), ns.to_string(), v.to_string()))
                .into_iter()
                .flatten()
                .filter_map(|k| self.objects.get(k))
                .filter(|o| keep(o))
                .cloned()
                .collect(),
            _ => self.list_where(def, ns, keep),
        }
    }

    /// How many objects of a resource (in one namespace or all) match, without copying any.
    pub fn count_where(&self, def: &ResourceDef, ns: Option<&str>, keep: impl Fn(&Value) -> bool) -> usize {
        self.scan_where(def, ns, keep).count()
    }

    /// The objects of a resource (in one namespace or all) that match, by reference.
    pub fn scan_where<'a>(
        &'a self,
        def: &ResourceDef,
        ns: Option<&'a str>,
        keep: impl Fn(&Value) -> bool + 'a,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let id = def.id();
        let start = (id.clone(), ns.unwrap_or_default().to_string(), String::new());
        self.objects
            .range(start..)
            .take_while(move |((r, n, _), _)| *r == id && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .filter(move |v| keep(v))
    }

    fn check_namespace(&self, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
        if !def.namespaced {
            return Ok(());
        }
        match self.objects.get(&("/namespaces".into(), String::new(), ns.to_string())) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if meta(n).get("deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    def.qualified()
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Create an object: fills name (from generateName), namespace, uid, resourceVersion,
    /// creationTimestamp and generation; drops status where it is a subresource.
    pub fn create(&mut self, def: &ResourceDef, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body of the request was not a JSON object"));
        }
        let ns = if def.namespaced { ns } else { "" };
        self.check_namespace(def, ns)?;
        let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match meta_str(&obj, "generateName").filter(|n| !n.is_empty()) {
                Some(base) => {
                    let base = captf_shared::names::cut(base, 58);
                    let base = if base.len() < 58 && meta_str(&obj, "generateName").is_some_and(|g| g.ends_with('-')) {
                        format!("{base}-")
                    } else {
                        base
                    };
                    let mut name = format!("{base}{}", self.rng.name_suffix(5));
                    while self.objects.contains_key(&(def.id(), ns.to_string(), name.clone())) {
                        name = format!("{base}{}", self.rng.name_suffix(5));
                    }
                    name
                }
                None => {
                    return Err(ApiError::invalid(
                        def,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        if let Some(body_ns) = meta_str(&obj, "namespace")
            && def.namespaced
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if name.len() > 253 || !captf_shared::names::is_dns1123_subdomain(&name) && def.kind != "Event" {
            return Err(ApiError::invalid(
                def,
                &name,
                format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
                ),
            ));
        }
        let key = (def.id(), ns.to_string(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(def, &name));
        }
        self.rv += 1;
        let uid = self.rng.uuid();
        let now = self.now();
        obj["apiVersion"] = json!(def.api_version());
        obj["kind"] = json!(def.kind);
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if def.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(self.rv.to_string()));
        m.insert("creationTimestamp".into(), json!(fmt_time(now)));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        if def.has_status
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        if def.id() == "/namespaces" {
            obj["status"] = json!({"phase": "Active"});
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            let labels = meta_mut(&mut obj).entry("labels").or_insert_with(|| json!({}));
            set(labels, "kubernetes.io/metadata.name", json!(name));
        }
        self.store_obj(key.clone(), obj.clone());
        self.uids.insert(uid, key);
        self.emit(&def.id(), ns, EventType::Added, obj.clone(), None);
        if def.id() == "apiextensions.k8s.io/customresourcedefinitions"
            && let Ok(crd) = serde_json::from_value(obj.clone())
        {
            let _ = self.registry.add_crd(&crd);
        }
        self.after_create(def, &obj);
        Ok(obj)
    }

    /// [`World::create`] for a client's request, then garbage collection of a dependent created
    /// after its owners went (a client that read the owner before its deletion): when every
    /// owner is absent it is deleted at once, in the background, as kube-controller-manager's
    /// collector does a moment later. Direct writes ([`World::put`]) plant what a test says and
    /// are not collected.
    pub fn create_collected(&mut self, def: &ResourceDef, ns: &str, obj: Value) -> Result<Value, ApiError> {
        let created = self.create(def, ns, obj)?;
        let owners = owner_uids(&created);
        if !owners.is_empty() && owners.iter().all(|u| !self.uids.contains_key(u)) {
            let _ = self.delete(
                def,
                ns,
                meta_str(&created, "name").unwrap_or_default(),
                &DeleteOpts {
                    propagation: Some(Propagation::Background),
                    ..Default::default()
                },
            );
        }
        Ok(created)
    }

    /// Replace an object (PUT, or the result of a patch). `sub` picks main resource or status.
    pub fn update(&mut self, def: &ResourceDef, ns: &str, name: &str, new: Value, sub: Sub) -> Result<Value, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        let old = self.get(def, ns, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the body of the request was not a JSON object"));
        }
        if let Some(body_name) = meta_str(&new, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(def, name));
        }
        if let Some(uid) = meta_str(&new, "uid")
            && !uid.is_empty()
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(def, name));
        }
        let mut merged = match (def.has_status, sub) {
            (true, Sub::Main) => {
                let mut n = new;
                match old.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(o) = n.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                n
            }
            (true, Sub::Status) => {
                let mut n = old.clone();
                match new.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(o) = n.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                n
            }
            (false, _) => new,
        };
        merged["apiVersion"] = json!(def.api_version());
        merged["kind"] = json!(def.kind);
        {
            let m = meta_mut(&mut merged);
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old["metadata"].get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.remove("managedFields");
        }
        if meta(&old).get("deletionTimestamp").is_some() {
            let before = finalizers(&old);
            let added: Vec<String> = finalizers(&merged)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                return Err(ApiError::invalid(
                    def,
                    name,
                    format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        quoted.join(", ")
                    ),
                ));
            }
        }
        if !same_spec(&merged, &old) {
            let g = meta(&old).get("generation").and_then(Value::as_i64).unwrap_or(1);
            meta_mut(&mut merged).insert("generation".into(), json!(g + 1));
        }
        if same_but_version(&merged, &old) {
            return Ok(old);
        }
        self.rv += 1;
        meta_mut(&mut merged).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = (def.id(), ns.to_string(), name.to_string());
        self.store_obj(key, merged.clone());
        self.emit(&def.id(), ns, EventType::Modified, merged.clone(), Some(old));
        if meta(&merged).get("deletionTimestamp").is_some() && finalizers(&merged).is_empty() {
            self.remove(def, ns, name);
        }
        Ok(merged)
    }

    /// Delete: with finalizers (or a Foreground/Orphan propagation) the object gets a
    /// `deletionTimestamp` and stays until the last finalizer goes; otherwise it is removed.
    pub fn delete(&mut self, def: &ResourceDef, ns: &str, name: &str, opts: &DeleteOpts) -> Result<Value, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        let obj = self.get(def, ns, name)?;
        if opts.uid.as_deref().is_some_and(|u| Some(u) != meta_str(&obj, "uid")) {
            return Err(ApiError::conflict(def, name));
        }
        if opts
            .resource_version
            .as_deref()
            .is_some_and(|r| Some(r) != meta_str(&obj, "resourceVersion"))
        {
            return Err(ApiError::conflict(def, name));
        }
        if meta(&obj).get("deletionTimestamp").is_some() {
            return Ok(obj);
        }
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        let default = if def.id() == "batch/jobs" {
            Propagation::Orphan
        } else {
            Propagation::Background
        };
        let policy = opts.propagation.unwrap_or(default);
        let has_dependents = !self.dependents_of(&uid).is_empty();
        let mut fins = finalizers(&obj);
        if def.id() == "/namespaces" {
            fins.push("kubernetes".into());
        }
        match policy {
            Propagation::Foreground if has_dependents => fins.push(FOREGROUND.into()),
            Propagation::Orphan if has_dependents => fins.push(ORPHAN.into()),
            _ => {}
        }
        if fins.is_empty() {
            self.remove(def, ns, name);
            return Ok(obj);
        }
        // Mark it deleting.
        self.rv += 1;
        let mut marked = obj.clone();
        let now = fmt_time(self.now());
        {
            let m = meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), json!(now));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            let store_fins: Vec<String> = fins.iter().filter(|f| *f != "kubernetes").cloned().collect();
            if !store_fins.is_empty() {
                m.insert("finalizers".into(), json!(store_fins));
            }
            m.insert("resourceVersion".into(), json!(self.rv.to_string()));
        }
        if def.id() == "/namespaces" {
            marked["status"] = json!({"phase": "Terminating"});
        }
        self.store_obj((def.id(), ns.to_string(), name.to_string()), marked.clone());
        self.emit(&def.id(), ns, EventType::Modified, marked.clone(), Some(obj.clone()));
        match policy {
            Propagation::Orphan if has_dependents => {
                for key in self.dependents_of(&uid) {
                    self.drop_owner_ref(&key, &uid);
                }
                self.remove_finalizer(def, ns, name, ORPHAN);
            }
            Propagation::Foreground if has_dependents => {
                for (r, dns, dname) in self.dependents_of(&uid) {
                    if let Ok(d) = self.def(&r) {
                        let _ = self.delete(&d, &dns, &dname, &DeleteOpts::default());
                    }
                }
                self.finish_foreground(&uid);
            }
            _ => {}
        }
        if def.id() == "/namespaces" {
            let contents: Vec<Key> = self.objects.keys().filter(|(_, n, _)| n == name).cloned().collect();
            for (r, dns, dname) in contents {
                if let Ok(d) = self.def(&r) {
                    let _ = self.delete(&d, &dns, &dname, &DeleteOpts::default());
                }
            }
            self.finish_namespace(name);
        }
        Ok(self.get(def, ns, name).unwrap_or(marked))
    }

    fn finish_namespace(&mut self, ns: &str) {
        let empty = !self.objects.keys().any(|(_, n, _)| n == ns);
        let key: Key = ("/namespaces".into(), String::new(), ns.into());
        let deleting = self
            .objects
            .get(&key)
            .is_some_and(|o| meta(o).get("deletionTimestamp").is_some() && finalizers(o).is_empty());
        if empty
            && deleting
            && let Ok(def) = self.def("/namespaces")
        {
            self.remove(&def, "", ns);
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<Key> {
        if uid.is_empty() {
            return vec![];
        }
        self.owners
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Insert or replace an object, keeping the owner index.
    fn store_obj(&mut self, key: Key, obj: Value) {
        self.note_rbac_change(&key);
        if let Some(old) = self.objects.get(&key) {
            for u in owner_uids(old) {
                if let Some(set) = self.owners.get_mut(&u) {
                    set.remove(&key);
                }
            }
            let old_label = label_key(&key, old);
            self.unlabel(old_label, &key);
        }
        for u in owner_uids(&obj) {
            self.owners.entry(u).or_default().insert(key.clone());
        }
        if let Some(l) = label_key(&key, &obj) {
            self.labelled.entry(l).or_default().insert(key.clone());
        }
        self.objects.insert(key, obj);
    }

    /// Take `key` out of the label index entry `l` (its object's [`label_key`]).
    fn unlabel(&mut self, l: Option<Key>, key: &Key) {
        if let Some(l) = l
            && let Some(set) = self.labelled.get_mut(&l)
        {
            set.remove(key);
            if set.is_empty() {
                self.labelled.remove(&l);
            }
        }
    }

    fn note_rbac_change(&mut self, key: &Key) {
        if key.0.starts_with(RBAC_PREFIX) {
            self.rbac_changes += 1;
        }
    }

    fn unstore(&mut self, key: &Key) -> Option<Value> {
        let obj = self.objects.remove(key)?;
        self.note_rbac_change(key);
        for u in owner_uids(&obj) {
            if let Some(set) = self.owners.get_mut(&u) {
                set.remove(key);
                if set.is_empty() {
                    self.owners.remove(&u);
                }
            }
        }
        self.unlabel(label_key(key, &obj), key);
        Some(obj)
    }

    fn drop_owner_ref(&mut self, key: &Key, uid: &str) {
        let Some(mut o) = self.objects.get(key).cloned() else {
            return;
        };
        if let Some(refs) = o.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
        }
        if let Ok(def) = self.def(&key.0) {
            let _ = self.update(&def, &key.1, &key.2, o, Sub::Main);
        }
    }

    fn remove_finalizer(&mut self, def: &ResourceDef, ns: &str, name: &str, fin: &str) {
        let Ok(mut o) = self.get(def, ns, name) else { return };
        let rest: Vec<String> = finalizers(&o).into_iter().filter(|f| f != fin).collect();
        let m = meta_mut(&mut o);
        if rest.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(rest));
        }
        let _ = self.update(def, ns, name, o, Sub::Main);
    }

    fn finish_foreground(&mut self, owner_uid: &str) {
        let Some(key) = self.uids.get(owner_uid).cloned() else {
            return;
        };
        let Some(o) = self.objects.get(&key) else { return };
        if finalizers(o).iter().any(|f| f == FOREGROUND)
            && self.dependents_of(owner_uid).is_empty()
            && let Ok(def) = self.def(&key.0)
        {
            self.remove_finalizer(&def, &key.1, &key.2, FOREGROUND);
        }
    }

    /// Remove the object for good, then collect its garbage.
    fn remove(&mut self, def: &ResourceDef, ns: &str, name: &str) {
        let key = (def.id(), ns.to_string(), name.to_string());
        let Some(mut obj) = self.unstore(&key) else {
            return;
        };
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        self.uids.remove(&uid);
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.emit(&def.id(), ns, EventType::Deleted, obj.clone(), None);
        self.after_remove(def, &obj);
        // Garbage collection: dependents whose owners are all gone are deleted in the background.
        for (r, dns, dname) in self.dependents_of(&uid) {
            let Some(dep) = self.objects.get(&(r.clone(), dns.clone(), dname.clone())) else {
                continue;
            };
            if owner_uids(dep).iter().any(|u| self.uids.contains_key(u)) {
                continue;
            }
            if let Ok(d) = self.def(&r) {
                let _ = self.delete(
                    &d,
                    &dns,
                    &dname,
                    &DeleteOpts {
                        propagation: Some(Propagation::Background),
                        ..Default::default()
                    },
                );
            }
        }
        for owner in owner_uids(&obj) {
            self.finish_foreground(&owner);
        }
        if !ns.is_empty() {
            self.finish_namespace(ns);
        }
    }

    /// Internal write of a whole object (the simulated controllers use it; no admission).
    pub fn put(&mut self, def_id: &str, obj: Value) -> Result<Value, ApiError> {
        let def = self.def(def_id)?;
        let mut obj = obj;
        let ns = match meta_str(&obj, "namespace").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None if def.namespaced => {
                meta_mut(&mut obj).insert("namespace".into(), json!("default"));
                "default".to_string()
            }
            None => String::new(),
        };
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if self.try_get(def_id, &ns, &name).is_some() {
            let mut o = obj;
            meta_mut(&mut o).remove("resourceVersion");
            let main = self.update(&def, &ns, &name, o.clone(), Sub::Main)?;
            if def.has_status && o.get("status") != main.get("status") {
                return self.update(&def, &ns, &name, o, Sub::Status);
            }
            Ok(main)
        } else {
            let status = obj.get("status").cloned();
            let created = self.create(&def, &ns, obj)?;
            match status {
                Some(s) if def.has_status => {
                    let mut o = created;
                    o["status"] = s;
                    meta_mut(&mut o).remove("resourceVersion");
                    self.update(&def, &ns, &name, o, Sub::Status)
                }
                _ => Ok(created),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn uuids_and_name_suffixes_use_the_right_shapes() {
        let mut r = super::Rng::new(7);
        let u = r.uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        let s = r.name_suffix(5);
        assert_eq!(s.len(), 5);
        assert!(
            s.chars()
                .all(|c| captf_shared::names::GENERATED_NAME_ALPHABET.contains(c))
        );
    }

    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Create(usize, bool),
        Update(usize, String, bool),
        Delete(usize),
        DropFinalizer(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, any::<bool>()).prop_map(|(i, f)| Op::Create(i, f)),
            (0..3usize, "[a-z]{0,3}", any::<bool>()).prop_map(|(i, v, s)| Op::Update(i, v, s)),
            (0..3usize).prop_map(Op::Delete),
            (0..3usize).prop_map(Op::DropFinalizer),
        ]
    }

    proptest! {
        #[test]
        fn replaying_the_watch_history_rebuilds_the_store_and_versions_only_grow(ops in proptest::collection::vec(op(), 0..40)) {
            let mut w = World::new(Registry::builtin(), Timestamp::UNIX_EPOCH, 1, 100_000);
            let def = w.def("/configmaps").unwrap();
            let start = w.resource_version();
            let names = ["a", "b", "c"];
            for op in ops {
                match op {
                    Op::Create(i, fin) => {
                        let mut o = json!({"metadata": {"name": names[i]}, "data": {}});
                        if fin { o["metadata"]["finalizers"] = json!(["x/y"]); }
                        let _ = w.create(&def, "default", o);
                    }
                    Op::Update(i, v, stale) => {
                        if let Ok(mut o) = w.get(&def, "default", names[i]) {
                            o["data"]["v"] = json!(v);
                            if stale { o["metadata"]["resourceVersion"] = json!("1"); }
                            let r = w.update(&def, "default", names[i], o, Sub::Main);
                            prop_assert_eq!(stale, r.is_err());
                        }
                    }
                    Op::Delete(i) => { let _ = w.delete(&def, "default", names[i], &DeleteOpts::default()); }
                    Op::DropFinalizer(i) => {
                        if let Ok(mut o) = w.get(&def, "default", names[i]) {
                            o["metadata"]["finalizers"] = json!([]);
                            let _ = w.update(&def, "default", names[i], o, Sub::Main);
                        }
                    }
                }
            }
            let mut rebuilt: BTreeMap<String, Value> = BTreeMap::new();
            let mut last = start;
            for e in w.history_since(start).unwrap() {
                prop_assert!(e.rv > last);
                last = e.rv;
                if e.res != "/configmaps" { continue; }
                let name = e.object["metadata"]["name"].as_str().unwrap().to_string();
                prop_assert_eq!(e.object["metadata"]["resourceVersion"].as_str().unwrap(), e.rv.to_string());
                match e.kind {
                    EventType::Deleted => { rebuilt.remove(&name); }
                    _ => { rebuilt.insert(name, e.object.clone()); }
                }
            }
            let now: BTreeMap<String, Value> = w
                .list(&def, Some("default"))
                .into_iter()
                .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), o))
                .collect();
            prop_assert_eq!(rebuilt, now);
        }
    }

    proptest! {
        /// Whatever creates, relabels and deletes came before, a list selecting one value of
        /// the indexed label answers what a full scan with the same selectors answers, in the
        /// same order.
        #[test]
        fn a_list_by_the_indexed_label_answers_as_a_full_scan(
            ops in proptest::collection::vec((0..5usize, prop::option::of(0..3usize), any::<bool>(), 0..3usize), 0..40),
        ) {
            use crate::selectors::{FieldSelector, LabelSelector};
            let mut w = World::new(Registry::builtin(), Timestamp::UNIX_EPOCH, 1, 100_000);
            let def = w.def("/configmaps").unwrap();
            let names = ["a", "b", "c", "d", "e"];
            let values = ["x", "y", "z"];
            for (i, value, delete, ns) in ops {
                let ns = ["default", "other", "third"][ns];
                if delete {
                    let _ = w.delete(&def, ns, names[i], &DeleteOpts::default());
                    continue;
                }
                let labels = match value {
                    Some(v) => json!({INDEXED_LABEL: values[v], "tier": values[(v + i) % 3]}),
                    None => json!({"tier": "x"}),
                };
                match w.get(&def, ns, names[i]) {
                    Ok(mut o) => {
                        o["metadata"]["labels"] = labels;
                        let _ = w.update(&def, ns, names[i], o, Sub::Main);
                    }
                    Err(_) => {
                        let _ = w.create(&def, ns, json!({"metadata": {"name": names[i], "labels": labels}}));
                    }
                }
            }
            for ns in ["default", "other", "third"] {
                for v in values {
                    for sel in [format!("{INDEXED_LABEL}={v}"), format!("{INDEXED_LABEL}={v},tier=y"), format!("{INDEXED_LABEL} in ({v})")] {
                        let ls = LabelSelector::parse(&sel).unwrap();
                        let fs = FieldSelector::default();
                        let scanned = w.list_where(&def, Some(ns), |o| ls.matches(o));
                        prop_assert_eq!(w.list_selected(&def, Some(ns), &ls, &fs), scanned, "{} in {}", sel, ns);
                    }
                }
            }
        }
    }

    #[test]
    fn the_generation_and_no_op_comparisons_skip_only_their_fields() {
        let a = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "spec": {"x": 1}, "status": {"s": 1}});
        let mut b = a.clone();
        b["status"]["s"] = json!(2);
        b["metadata"]["labels"] = json!({"l": "v"});
        assert!(same_spec(&a, &b));
        assert!(!same_but_version(&a, &b));
        let mut c = a.clone();
        c["metadata"]["resourceVersion"] = json!("2");
        assert!(same_but_version(&a, &c));
        c["data"] = json!({});
        assert!(!same_spec(&a, &c) && !same_but_version(&a, &c));
        let mut d = a.clone();
        d["spec"]["x"] = json!(2);
        assert!(!same_spec(&a, &d));
        // A field missing on one side, or metadata missing on both.
        assert!(!same_spec(&json!({"spec": {}}), &json!({})));
        assert!(same_but_version(&json!({"spec": 1}), &json!({"spec": 1})));
    }

    #[test]
    fn times_are_rfc3339_seconds_and_micro() {
        let ts: Timestamp = "2024-06-01T10:20:30.123456789Z".parse().unwrap();
        assert_eq!(fmt_time(ts), "2024-06-01T10:20:30Z");
        assert_eq!(fmt_micro(ts), "2024-06-01T10:20:30.123456Z");
    }
}
