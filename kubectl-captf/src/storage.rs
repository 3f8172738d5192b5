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

/// What a CRD's `status.storedVersions` says about the migration (PURE): `None` when only the
/// stored version is in it, else the versions found.
pub fn needs_migration(stored_versions: &[String]) -> Option<Vec<String>> {
    (stored_versions != [Version::STORED.as_str()]).then(|| stored_versions.to_vec())
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
        "{}: {} object(s) written at {} ({} changed or removed meanwhile); storedVersions [{}] -> [{}]",
        m.crd,
        m.rewritten,
        Version::STORED,
        m.moved_on,
        m.before.join(", "),
        Version::STORED
    )
}

/// The CRD name of a kind (`terraformclusters.infrastructure.cluster.x-k8s.io`) and its resource
/// at the stored version.
fn resource(kind: &str) -> (String, ApiResource) {
    let plural = format!("{}s", kind.to_lowercase());
    let gvk = kube::api::GroupVersionKind::gvk(captf_shared::keys::GROUP, Version::STORED.as_str(), kind);
    (
        format!("{plural}.{}", captf_shared::keys::GROUP),
        ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// Migrate every CAPTF CRD.
pub async fn migrate(conn: &Conn, json: bool) -> Result<Printed, PluginError> {
    let crds: Api<CustomResourceDefinition> = Api::all(conn.client.clone());
    let mut done = Vec::new();
    for kind in SERVED_KINDS {
        let (name, ar) = resource(kind);
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
        let Some(before) = needs_migration(&stored) else {
            done.push(Migrated {
                crd: name,
                before: stored,
                rewritten: 0,
                moved_on: 0,
                updated: false,
            });
            continue;
        };
        let (rewritten, moved_on) = rewrite_all(conn, &ar).await?;
        crds.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": [Version::STORED.as_str()]}})),
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
        done.push(Migrated {
            crd: name,
            before,
            rewritten,
            moved_on,
            updated: true,
        });
    }
    Ok(if json {
        Printed::out(pretty(&json!({"migrated": done})))
    } else {
        Printed::out(done.iter().map(|m| line(m) + "\n").collect())
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
        assert_eq!(needs_migration(&v(&["v1beta1"])), None);
        assert_eq!(
            needs_migration(&v(&["v1alpha1", "v1beta1"])),
            Some(v(&["v1alpha1", "v1beta1"]))
        );
        assert_eq!(needs_migration(&v(&["v1alpha1"])), Some(v(&["v1alpha1"])));
        // A CRD whose status says nothing yet is migrated too: its objects are listed and
        // written again, which costs nothing when there are none.
        assert_eq!(needs_migration(&[]), Some(vec![]));
    }

    #[test]
    fn migrate_storage_says_what_it_wrote_and_what_it_set() {
        let m = Migrated {
            crd: "terraformclusters.infrastructure.cluster.x-k8s.io".into(),
            before: vec!["v1alpha1".into(), "v1beta1".into()],
            rewritten: 12,
            moved_on: 1,
            updated: true,
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
    }
}
