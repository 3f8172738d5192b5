//! `kubectl captf migrate-storage`: after an upgrade that changed the stored API version, every
//! object of CAPTF's kinds is written again so that etcd holds it at the stored version, and each
//! CRD's `status.storedVersions` is set to that version alone (docs/api.md, "Versions and
//! conversion"). Until then a later release could not drop the old version: the API server would
//! have objects it can no longer decode, and clusterctl refuses such an upgrade.
//!
//! Run by an administrator (it lists and updates the kinds in every namespace and updates the
//! CRDs' status), once after each upgrade; it is idempotent, and a CRD already at the stored
//! version alone is left as it is. Each object is written back as read (an update with its
//! `resourceVersion`): the spec is unchanged, so no Job starts, and an object that changed in
//! between, or went, was written (or removed) by someone else, which serves as well.
//!
//! `--to` an older version prepares going back to a release that knows only that one: each CRD
//! stores it again (the objects are written while the newer webhook still converts), its
//! `storedVersions` becomes that version alone, and the newer versions stop being served, so
//! neither the older release's clients nor its webhook, which serves no conversion, ever meet one.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use captf_shared::conversion::Version;
use captf_shared::types::SERVED_KINDS;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::printed::{Printed, pretty};

/// Objects listed per page.
const PAGE: u32 = 500;

/// What a CRD says about the migration to `to` (PURE): `None` when `to` is its storage version
/// and the only one in `status.storedVersions`, else the stored versions found.
pub fn needs_migration(storage: Option<&str>, stored_versions: &[String], to: Version) -> Option<Vec<String>> {
    (storage != Some(to.as_str()) || stored_versions != [to.as_str()]).then(|| stored_versions.to_vec())
}

/// The CRD's versions once `to` is stored (PURE): `to` is the one storage version, and served.
/// Versions are JSON (`spec.versions`), each kept whole but for `served` and `storage`.
pub fn versions_storing(versions: &[serde_json::Value], to: Version) -> Vec<serde_json::Value> {
    versions
        .iter()
        .map(|v| {
            let mut v = v.clone();
            let is_to = v["name"] == to.as_str();
            v["storage"] = json!(is_to);
            if is_to {
                v["served"] = json!(true);
            }
            v
        })
        .collect()
}

/// The CRD's versions once the ones newer than `to` are no longer served, when `to` is older
/// than the release's (PURE): what going back to a release that knows only `to` needs. Going
/// forward (`to` the release's), every version stays served.
pub fn versions_served_up_to(versions: &[serde_json::Value], to: Version) -> Vec<serde_json::Value> {
    let newer = |v: &serde_json::Value| {
        v["name"]
            .as_str()
            .and_then(|n| Version::parse(n).ok())
            .is_some_and(|v| v > to)
    };
    versions
        .iter()
        .map(|v| {
            let mut v = v.clone();
            if to < Version::STORED && newer(&v) {
                v["served"] = json!(false);
            }
            v
        })
        .collect()
}

/// One CRD's migration.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Migrated {
    pub crd: String,
    /// `status.storedVersions` before.
    pub before: Vec<String>,
    /// Objects written again (none when the CRD needed nothing).
    pub rewritten: u64,
    /// Objects changed or removed by someone else in between.
    pub moved_on: u64,
    /// Whether `status.storedVersions` was set.
    pub updated: bool,
    /// The version objects are stored at now.
    #[serde(serialize_with = "as_name")]
    pub to: Version,
}

fn as_name<S: serde::Serializer>(v: &Version, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v.as_str())
}

/// The line `migrate-storage` prints for one CRD (PURE).
pub fn line(m: &Migrated) -> String {
    if !m.updated {
        return format!(
            "{}: storedVersions is already [{}]; nothing to do",
            m.crd,
            m.before.join(", ")
        );
    }
    format!(
        "{}: {} object(s) written at {} ({} changed or removed meanwhile); storedVersions [{}] -> [{}]{}",
        m.crd,
        m.rewritten,
        m.to,
        m.moved_on,
        m.before.join(", "),
        m.to,
        if m.to < Version::STORED {
            format!("; {} served alone", m.to)
        } else {
            String::new()
        }
    )
}

/// The CRD name of a served kind (`terraformclusters.infrastructure.cluster.x-k8s.io`) and its
/// resource at `version`.
fn resource(kind: &str, version: Version) -> (String, ApiResource) {
    let plural = captf_shared::types::plural(kind).unwrap_or_default();
    let gvk = kube::api::GroupVersionKind::gvk(captf_shared::keys::GROUP, version.as_str(), kind);
    (
        captf_shared::types::crd_name(kind).unwrap_or_default(),
        ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// Migrate every CAPTF CRD to store `to`.
pub async fn migrate(conn: &Conn, to: Version, json: bool) -> Result<Printed, PluginError> {
    let crds: Api<CustomResourceDefinition> = Api::all(conn.client.clone());
    let mut done = Vec::new();
    for kind in SERVED_KINDS {
        let (name, ar) = resource(kind, to);
        let crd = crds.get(&name).await.map_err(|e| {
            from_kube(
                e,
                &format!("get CRD {name}"),
                ("get", "customresourcedefinitions", "apiextensions.k8s.io"),
                None,
            )
        })?;
        let stored = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default();
        let storage = crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.as_str());
        let Some(before) = needs_migration(storage, &stored, to) else {
            done.push(Migrated {
                crd: name,
                before: stored,
                rewritten: 0,
                moved_on: 0,
                updated: false,
                to,
            });
            continue;
        };
        if !crd.spec.versions.iter().any(|v| v.name == to.as_str()) {
            return Err(PluginError::Usage(format!(
                "CRD {name} has no version {to}: install the release that serves it first"
            )));
        }
        let versions: Vec<serde_json::Value> = crd
            .spec
            .versions
            .iter()
            .map(|v| serde_json::to_value(v).unwrap_or_default())
            .collect();
        // Storage first, serving `to` alone last: the objects are written while every version
        // is served and the newer webhook converts them.
        let storing = versions_storing(&versions, to);
        if storing != versions {
            set_versions(&crds, &name, &storing).await?;
        }
        let (rewritten, moved_on) = rewrite_all(conn, &ar).await?;
        crds.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": [to.as_str()]}})),
        )
        .await
        .map_err(|e| {
            from_kube(
                e,
                &format!("set status.storedVersions of CRD {name}"),
                ("update", "customresourcedefinitions/status", "apiextensions.k8s.io"),
                None,
            )
        })?;
        let served = versions_served_up_to(&storing, to);
        if served != storing {
            set_versions(&crds, &name, &served).await?;
        }
        done.push(Migrated {
            crd: name,
            before,
            rewritten,
            moved_on,
            updated: true,
            to,
        });
    }
    Ok(if json {
        Printed::out(pretty(&json!({"migrated": done})))
    } else {
        Printed::out(done.iter().map(|m| line(m) + "\n").collect())
    })
}

/// Set a CRD's `spec.versions` (a merge patch: the list is replaced whole).
async fn set_versions(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    versions: &[serde_json::Value],
) -> Result<(), PluginError> {
    crds.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"versions": versions}})),
    )
    .await
    .map(drop)
    .map_err(|e| {
        from_kube(
            e,
            &format!("set spec.versions of CRD {name}"),
            ("patch", "customresourcedefinitions", "apiextensions.k8s.io"),
            None,
        )
    })
}

/// Write every object of a kind back as read, page by page: (written, changed or removed
/// meanwhile).
async fn rewrite_all(conn: &Conn, ar: &ApiResource) -> Result<(u64, u64), PluginError> {
    let api: Api<DynamicObject> = Api::all_with(conn.client.clone(), ar);
    let (mut written, mut moved_on) = (0, 0);
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| from_kube(e, &format!("list {}", ar.plural), ("list", &ar.plural, &ar.group), None))?;
        for object in &page.items {
            let (Some(name), Some(ns)) = (object.metadata.name.as_deref(), object.metadata.namespace.as_deref()) else {
                continue;
            };
            let namespaced: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), ns, ar);
            match namespaced.replace(name, &PostParams::default(), object).await {
                Ok(_) => written += 1,
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => moved_on += 1,
                Err(e) => {
                    return Err(from_kube(
                        e,
                        &format!("write {} {ns}/{name} again", ar.kind),
                        ("update", &ar.plural, &ar.group),
                        Some(ns),
                    ));
                }
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((written, moved_on)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrate_storage_is_needed_until_the_stored_version_is_the_only_one() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let beta = Version::V1beta1;
        assert_eq!(needs_migration(Some("v1beta1"), &v(&["v1beta1"]), beta), None);
        assert_eq!(
            needs_migration(Some("v1beta1"), &v(&["v1alpha1", "v1beta1"]), beta),
            Some(v(&["v1alpha1", "v1beta1"]))
        );
        assert_eq!(
            needs_migration(Some("v1beta1"), &v(&["v1alpha1"]), beta),
            Some(v(&["v1alpha1"]))
        );
        // A CRD whose status says nothing yet is migrated too: its objects are listed and
        // written again, which costs nothing when there are none.
        assert_eq!(needs_migration(Some("v1beta1"), &[], beta), Some(vec![]));
        // Going back: a CRD storing v1beta1 is migrated even before anything is stored at it,
        // and one already storing v1alpha1 alone is left as it is.
        let alpha = Version::V1alpha1;
        assert_eq!(
            needs_migration(Some("v1beta1"), &v(&["v1alpha1"]), alpha),
            Some(v(&["v1alpha1"]))
        );
        assert_eq!(needs_migration(Some("v1alpha1"), &v(&["v1alpha1"]), alpha), None);
    }

    #[test]
    fn migrate_storage_to_an_older_version_stores_it_and_stops_serving_the_newer_ones() {
        let versions = vec![
            json!({"name": "v1alpha1", "served": true, "storage": false, "deprecated": true}),
            json!({"name": "v1beta1", "served": true, "storage": true, "schema": {"x": 1}}),
        ];
        let back = |versions: &[serde_json::Value]| {
            versions_served_up_to(&versions_storing(versions, Version::V1alpha1), Version::V1alpha1)
        };
        assert_eq!(
            back(&versions),
            vec![
                json!({"name": "v1alpha1", "served": true, "storage": true, "deprecated": true}),
                json!({"name": "v1beta1", "served": false, "storage": false, "schema": {"x": 1}}),
            ]
        );
        // While the objects are written, every version is still served.
        assert!(
            versions_storing(&versions, Version::V1alpha1)
                .iter()
                .all(|v| v["served"] == true)
        );
        // Forward again: v1beta1 stored and served; v1alpha1 keeps being served.
        let forward = |versions: &[serde_json::Value]| {
            versions_served_up_to(&versions_storing(versions, Version::V1beta1), Version::V1beta1)
        };
        assert_eq!(
            forward(&back(&versions)),
            vec![
                json!({"name": "v1alpha1", "served": true, "storage": false, "deprecated": true}),
                json!({"name": "v1beta1", "served": true, "storage": true, "schema": {"x": 1}}),
            ]
        );
        assert_eq!(forward(&versions), versions);
    }

    #[test]
    fn migrate_storage_says_what_it_wrote_and_what_it_set() {
        let m = Migrated {
            crd: "terraformclusters.infrastructure.cluster.x-k8s.io".into(),
            before: vec!["v1alpha1".into(), "v1beta1".into()],
            rewritten: 12,
            moved_on: 1,
            updated: true,
            to: Version::V1beta1,
        };
        assert_eq!(
            line(&m),
            "terraformclusters.infrastructure.cluster.x-k8s.io: 12 object(s) written at v1beta1 (1 changed or removed meanwhile); storedVersions [v1alpha1, v1beta1] -> [v1beta1]"
        );
        let m = Migrated {
            before: vec!["v1beta1".into()],
            updated: false,
            rewritten: 0,
            moved_on: 0,
            ..m
        };
        assert!(line(&m).ends_with("storedVersions is already [v1beta1]; nothing to do"));
        let back = Migrated {
            before: vec!["v1beta1".into()],
            rewritten: 3,
            updated: true,
            to: Version::V1alpha1,
            ..m
        };
        assert_eq!(
            line(&back),
            "terraformclusters.infrastructure.cluster.x-k8s.io: 3 object(s) written at v1alpha1 (0 changed or removed meanwhile); storedVersions [v1beta1] -> [v1alpha1]; v1alpha1 served alone"
        );
    }
}
