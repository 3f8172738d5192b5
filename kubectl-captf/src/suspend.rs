//! `kubectl captf suspend` and `resume`: `spec.paused` set true or false, as Flux's
//! `flux suspend` / `flux resume` do for theirs. The controller's rule (`decide`): a paused object
//! starts no Job (no apply, drift check, refresh, retry, nor the destroy of a deletion) and the
//! Job that runs finishes and is booked.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use captf_read::kinds::api_resource;
use captf_shared::keys;
use captf_shared::types::CaptfObject;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::live_read::get_object;
use crate::printed::{Printed, pretty};
use crate::target::Target;

/// What suspending means, said once for `suspend` (PURE).
pub const SUSPEND_MEANS: &str = "The running Job, if any, finishes and is booked; no new Job starts \
(no apply, drift check, refresh or retry) until it is resumed. Deleting it while suspended waits: \
its destroy starts only once it is resumed.";

/// The sentence `suspend` or `resume` prints (PURE). `was`: `spec.paused` before; `other`: a pause
/// that stays whatever `spec.paused` says (the `cluster.x-k8s.io/paused` annotation).
pub fn words(what: &str, pause: bool, was: bool, annotated: bool) -> String {
    let head = match (pause, was) {
        (true, true) => format!("{what} was already suspended (spec.paused: true); nothing written."),
        (true, false) => format!("Suspended {what} (spec.paused: true)."),
        (false, false) => format!("{what} was not suspended (spec.paused is not true); nothing written."),
        (false, true) => format!("Resumed {what} (spec.paused: false): the controller decides again now."),
    };
    let mut out = head;
    if pause {
        out.push(' ');
        out.push_str(SUSPEND_MEANS);
    }
    if annotated && !pause {
        out.push_str(&format!(
            " It stays paused by its {} annotation: remove that too.",
            keys::ANNOTATION_CAPI_PAUSED
        ));
    }
    out.push('\n');
    out
}

/// What pauses an object: its own `spec.paused` (what `suspend` sets and `resume` undoes), the
/// Cluster API pause annotation, its Cluster API `Cluster`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pauses {
    pub spec: bool,
    pub annotation: bool,
    pub cluster: bool,
}

/// What pauses `object`; `cluster_paused`: its Cluster API `Cluster` is paused, as read (PURE).
pub fn pauses(object: &CaptfObject, cluster_paused: bool) -> Pauses {
    Pauses {
        spec: object.terraform_spec().paused.unwrap_or(false),
        annotation: annotated(object),
        cluster: cluster_paused,
    }
}

fn annotated(object: &CaptfObject) -> bool {
    object
        .metadata()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::ANNOTATION_CAPI_PAUSED))
}

/// Set `spec.paused` to `pause`, only if the object is still the version read (a 409 otherwise).
pub async fn set_paused(conn: &Conn, t: &Target, pause: bool, json: bool) -> Result<Printed, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    let what = format!("{} {ns}/{}", t.kind, t.name);
    let was = object.terraform_spec().paused.unwrap_or(false);
    let written = was != pause;
    if written {
        let api: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), ns, &api_resource(t.kind));
        let patch = json!({
            "metadata": {"resourceVersion": object.metadata().resource_version},
            "spec": {"paused": pause},
        });
        match api.patch(&t.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Err(PluginError::Refused(format!(
                    "{what} changed while this command ran; nothing was written. Run it again to see the current state."
                )));
            }
            Err(err) => {
                return Err(from_kube(
                    err,
                    &format!("set spec.paused of {what}"),
                    ("patch", t.kind.plural(), keys::GROUP),
                    Some(ns),
                ));
            }
        }
    }
    let text = words(&what, pause, was, annotated(&object));
    if json {
        return Ok(Printed::out(pretty(&json!({
            "object": what, "paused": pause, "written": written, "message": text.trim_end(),
        }))));
    }
    Ok(Printed::out(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspend_says_the_running_job_finishes_no_job_starts_and_a_deletion_waits() {
        let w = words("TerraformCluster default/a", true, false, false);
        assert!(w.starts_with("Suspended TerraformCluster default/a"), "{w}");
        assert!(w.contains("finishes and is booked"), "{w}");
        assert!(w.contains("no new Job starts"), "{w}");
        assert!(w.contains("destroy starts only once it is resumed"), "{w}");
        assert!(words("x", true, true, false).contains("already suspended"));
    }

    #[test]
    fn resume_names_a_pause_annotation_that_still_holds_the_object() {
        let w = words("x", false, true, true);
        assert!(w.starts_with("Resumed x"), "{w}");
        assert!(w.contains(keys::ANNOTATION_CAPI_PAUSED), "{w}");
        assert!(words("x", false, false, false).contains("was not suspended"));
    }
}
