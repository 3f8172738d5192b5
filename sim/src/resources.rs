//! The resources the simulator serves: the built-in ones CAPTF uses and the CRDs it loads.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// One served resource (group, version, kind, plural and how it behaves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    /// Has a `status` subresource: writes to the main resource keep the status, and vice versa.
    pub has_status: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Printer columns (`kubectl get`), as a CRD's `additionalPrinterColumns` declare them.
    pub columns: Vec<Column>,
    /// Served from a CRD: no strategic merge patch, as in kube-apiserver.
    pub custom: bool,
    /// The CRD version's `openAPIV3Schema` (published in `/openapi/v3` for `kubectl explain`).
    /// Shared: a definition is cloned for every request, a schema is tens of kilobytes.
    pub schema: Option<std::sync::Arc<Value>>,
}

/// One printer column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i32,
}

impl ResourceDef {
    fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool, has_status: bool) -> Self {
        ResourceDef {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            has_status,
            short_names: vec![],
            categories: vec![],
            columns: vec![],
            custom: false,
            schema: None,
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `v1` or `batch/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `jobs.batch` or `pods`, as kube-apiserver names a resource in its error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store's key for the resource: `group/plural`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    fn discovery_entries(&self) -> Vec<Value> {
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        if self.has_status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.group.is_empty() && self.plural == "pods" {
            out.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
        }
        out
    }
}

/// Failed to load or read a CRD.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("failed to read CRD directory {0}: {1}")]
    ReadDir(String, std::io::Error),
    #[error("failed to parse CRD file {0}: {1}")]
    Parse(String, serde_yaml_ng::Error),
    #[error("CRD {0} has no served version")]
    NoVersion(String),
    #[error("{0}")]
    Cached(String),
}

/// Every served resource.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    defs: Vec<ResourceDef>,
}

impl Registry {
    /// The built-in resources (no CRDs).
    pub fn builtin() -> Self {
        let b = ResourceDef::builtin;
        Registry {
            defs: vec![
                b("", "v1", "Namespace", "namespaces", false, true).short(&["ns"]),
                b("", "v1", "Secret", "secrets", true, false),
                b("", "v1", "ConfigMap", "configmaps", true, false).short(&["cm"]),
                b("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, true).short(&["pvc"]),
                b("", "v1", "Pod", "pods", true, true).short(&["po"]),
                b("", "v1", "Event", "events", true, false).short(&["ev"]),
                b("", "v1", "ServiceAccount", "serviceaccounts", true, false).short(&["sa"]),
                b("batch", "v1", "Job", "jobs", true, true),
                b("coordination.k8s.io", "v1", "Lease", "leases", true, false),
                b("events.k8s.io", "v1", "Event", "events", true, false).short(&["ev"]),
                b("rbac.authorization.k8s.io", "v1", "Role", "roles", true, false),
                b(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "ClusterRole",
                    "clusterroles",
                    false,
                    false,
                ),
                b(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "RoleBinding",
                    "rolebindings",
                    true,
                    false,
                ),
                b(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "ClusterRoleBinding",
                    "clusterrolebindings",
                    false,
                    false,
                ),
                b(
                    "admissionregistration.k8s.io",
                    "v1",
                    "MutatingWebhookConfiguration",
                    "mutatingwebhookconfigurations",
                    false,
                    false,
                ),
                b(
                    "admissionregistration.k8s.io",
                    "v1",
                    "ValidatingWebhookConfiguration",
                    "validatingwebhookconfigurations",
                    false,
                    false,
                ),
                b(
                    "apiextensions.k8s.io",
                    "v1",
                    "CustomResourceDefinition",
                    "customresourcedefinitions",
                    false,
                    true,
                )
                .short(&["crd", "crds"]),
            ],
        }
    }

    /// Serve a CRD at its stored version (else its first served one; pruning, defaulting and
    /// validation are ignored).
    pub fn add_crd(&mut self, crd: &CustomResourceDefinition) -> Result<ResourceDef, RegistryError> {
        let spec = &crd.spec;
        let name = crd.metadata.name.clone().unwrap_or_default();
        let version = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| spec.versions.iter().find(|v| v.served))
            .ok_or(RegistryError::NoVersion(name))?;
        let def = ResourceDef {
            group: spec.group.clone(),
            version: version.name.clone(),
            kind: spec.names.kind.clone(),
            plural: spec.names.plural.clone(),
            singular: spec
                .names
                .singular
                .clone()
                .unwrap_or_else(|| spec.names.kind.to_lowercase()),
            namespaced: spec.scope == "Namespaced",
            has_status: version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            short_names: spec.names.short_names.clone().unwrap_or_default(),
            categories: spec.names.categories.clone().unwrap_or_default(),
            columns: version
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| Column {
                    name: c.name.clone(),
                    type_: c.type_.clone(),
                    json_path: c.json_path.clone(),
                    priority: c.priority.unwrap_or(0),
                })
                .collect(),
            custom: true,
            schema: version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| serde_json::to_value(s).ok())
                .map(std::sync::Arc::new),
        };
        self.defs.retain(|d| !(d.group == def.group && d.plural == def.plural));
        self.defs.push(def.clone());
        Ok(def)
    }

    /// Load every `*.yaml` CRD of a directory (Cluster API's, say).
    pub fn load_crd_dir(&mut self, dir: &Path) -> Result<usize, RegistryError> {
        let shown = dir.display().to_string();
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| RegistryError::ReadDir(shown.clone(), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        let mut n = 0;
        for file in files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| RegistryError::ReadDir(shown.clone(), e))?;
            let crd: CustomResourceDefinition =
                serde_yaml_ng::from_str(&text).map_err(|e| RegistryError::Parse(shown.clone(), e))?;
            self.add_crd(&crd)?;
            n += 1;
        }
        Ok(n)
    }

    /// Find a resource by group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
    }

    /// Find a resource by apiVersion and kind.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.api_version() == api_version && d.kind == kind)
    }

    /// Find a resource by its store id (`group/plural`).
    pub fn by_id(&self, id: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| d.id() == id)
    }

    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// `/api/v1` or `/apis/<group>/<version>`: an APIResourceList.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let resources: Vec<Value> = self
            .defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .flat_map(ResourceDef::discovery_entries)
            .collect();
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    }

    fn group_json(&self, group: &str) -> Option<Value> {
        let mut versions: Vec<&str> = self
            .defs
            .iter()
            .filter(|d| d.group == group)
            .map(|d| d.version.as_str())
            .collect();
        versions.dedup();
        let first = versions.first()?;
        let v = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
        Some(json!({
            "name": group,
            "versions": versions.iter().map(|x| v(x)).collect::<Vec<_>>(),
            "preferredVersion": v(first),
        }))
    }

    /// `/apis`: an APIGroupList.
    pub fn group_list(&self) -> Value {
        let mut groups: Vec<&str> = Vec::new();
        for d in &self.defs {
            if !d.group.is_empty() && !groups.contains(&d.group.as_str()) {
                groups.push(&d.group);
            }
        }
        let groups: Vec<Value> = groups.iter().filter_map(|g| self.group_json(g)).collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `/apis/<group>`: an APIGroup.
    pub fn group(&self, group: &str) -> Option<Value> {
        let mut g = self.group_json(group)?;
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        Some(g)
    }
}

impl Registry {
    fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for d in &self.defs {
            let gv = (d.group.clone(), d.version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }

    /// `/openapi/v3`: the index of group-version documents. Each URL carries a hash of its
    /// document, as kube-apiserver's do, so a client's HTTP cache sees a CRD added later.
    pub fn openapi_v3_index(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (g, v) in self.group_versions() {
            let p = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            let hash = self
                .openapi_v3_doc(&g, &v)
                .map(|d| content_hash(&d))
                .unwrap_or_default();
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
            );
        }
        json!({"paths": paths})
    }

    /// `/openapi/v3/apis/<group>/<version>`: each resource's paths with the GVK extension and
    /// the `fieldValidation` parameter (so kubectl validates server-side), and in
    /// `components.schemas` each CRD's `openAPIV3Schema` under kube-apiserver's name for it
    /// ([`schema_name`]), marked with its GVK (what `kubectl explain` looks for). Built-in
    /// resources have no schema.
    pub fn openapi_v3_doc(&self, group: &str, version: &str) -> Option<Value> {
        let mut paths = serde_json::Map::new();
        let mut schemas = serde_json::Map::new();
        for d in self.defs.iter().filter(|d| d.group == group && d.version == version) {
            let base = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            let item = if d.namespaced {
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
            } else {
                format!("{base}/{}/{{name}}", d.plural)
            };
            let gvk = json!({"group": group, "version": version, "kind": d.kind});
            let params = json!([
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ]);
            let published = published_schema(d);
            let ok = match &published {
                Some(_) => json!({"description": "OK", "content": {"application/json": {"schema":
                    {"$ref": format!("#/components/schemas/{}", schema_name(group, version, &d.kind))}}}}),
                None => json!({"description": "OK"}),
            };
            let op = |id: &str| {
                json!({"operationId": format!("{id}{}", d.kind), "x-kubernetes-group-version-kind": gvk,
                       "parameters": params, "responses": {"200": ok}})
            };
            paths.insert(
                item,
                json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
            );
            if let Some(schema) = published {
                schemas.insert(schema_name(group, version, &d.kind), schema);
            }
        }
        if paths.is_empty() {
            return None;
        }
        Some(
            json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (captf-sim)", "version": "v1.33.0"},
                    "paths": paths, "components": {"schemas": schemas}}),
        )
    }
}

/// kube-apiserver's name for a kind's schema: the group's DNS labels reversed, the version and
/// the kind (`io.x-k8s.cluster.infrastructure.v1beta1.TerraformCluster`); the core group is
/// `io.k8s.api.core`.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let group = if group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{version}.{kind}")
}

/// A resource's schema as published: its CRD's `openAPIV3Schema` with the kind's
/// `x-kubernetes-group-version-kind`, and `apiVersion` and `kind` described where the CRD left
/// them bare (kube-apiserver adds both). None without a schema.
pub fn published_schema(def: &ResourceDef) -> Option<Value> {
    let mut schema = Value::clone(def.schema.as_deref()?);
    let obj = schema.as_object_mut()?;
    obj.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
    );
    let props = obj.entry("properties").or_insert_with(|| json!({})).as_object_mut()?;
    let described = [("apiVersion", API_VERSION_DESCRIPTION), ("kind", KIND_DESCRIPTION)];
    for (field, description) in described {
        let p = props.entry(field).or_insert_with(|| json!({"type": "string"}));
        if let Some(p) = p.as_object_mut() {
            p.entry("description").or_insert_with(|| json!(description));
        }
    }
    Some(schema)
}

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.";

/// A short, stable hash of a document (FNV-1a of its JSON text), for the index's URLs.
fn content_hash(doc: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in doc.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_captf_crds_are_served_at_their_stored_version_with_scope_and_status_subresource() {
        let r = registry_with_captf_crds();
        let tc = r
            .find("infrastructure.cluster.x-k8s.io", "v1beta1", "terraformclusters")
            .unwrap();
        assert_eq!(tc.kind, "TerraformCluster");
        assert!(tc.namespaced);
        assert!(tc.has_status);
        let list = r.resource_list("infrastructure.cluster.x-k8s.io", "v1beta1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"terraformclusters/status"), "{names:?}");
        assert!(
            r.group_list()["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "infrastructure.cluster.x-k8s.io")
        );
    }

    fn registry_with_captf_crds() -> Registry {
        let mut r = Registry::builtin();
        for crd in captf_shared::crd::crds() {
            r.add_crd(&crd).unwrap();
        }
        r
    }

    #[test]
    fn schema_names_reverse_the_group_as_kube_apiserver_does() {
        assert_eq!(
            schema_name("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster"),
            "io.x-k8s.cluster.infrastructure.v1beta1.TerraformCluster"
        );
        assert_eq!(schema_name("", "v1", "Pod"), "io.k8s.api.core.v1.Pod");
    }

    #[test]
    fn a_crd_group_version_publishes_each_kinds_schema_with_its_gvk() {
        let r = registry_with_captf_crds();
        let doc = r.openapi_v3_doc("infrastructure.cluster.x-k8s.io", "v1beta1").unwrap();
        let name = schema_name("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster");
        let tc = &doc["components"]["schemas"][name.as_str()];
        assert_eq!(
            tc["x-kubernetes-group-version-kind"],
            json!([{"group": "infrastructure.cluster.x-k8s.io", "version": "v1beta1", "kind": "TerraformCluster"}])
        );
        let crd_spec = captf_shared::crd::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "TerraformCluster")
            .unwrap();
        let from_crd = serde_json::to_value(
            crd_spec.spec.versions[1]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(tc["properties"]["spec"], from_crd["properties"]["spec"]);
        assert!(
            tc["properties"]["kind"]["description"]
                .as_str()
                .unwrap()
                .starts_with("Kind is")
        );
        let get = doc["paths"]["/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{namespace}/terraformclusters/{name}"]["get"].clone();
        assert_eq!(
            get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            format!("#/components/schemas/{name}")
        );
    }

    #[test]
    fn the_index_hash_changes_when_a_document_changes() {
        let before = Registry::builtin().openapi_v3_index();
        let after = registry_with_captf_crds().openapi_v3_index();
        let url = |i: &Value, p: &str| i["paths"][p]["serverRelativeURL"].as_str().map(String::from);
        assert_eq!(url(&before, "api/v1"), url(&after, "api/v1"));
        assert!(url(&before, "apis/infrastructure.cluster.x-k8s.io/v1beta1").is_none());
        assert!(
            url(&after, "apis/infrastructure.cluster.x-k8s.io/v1beta1")
                .unwrap()
                .starts_with("/openapi/v3/apis/infrastructure.cluster.x-k8s.io/v1beta1?hash=")
        );
    }
}
