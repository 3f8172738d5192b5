//! An object and everything its reconcile pass reads, read live, and the controller's plan of it.

use k8s_openapi::jiff::Timestamp;

use captf_core::explain::{Explanation, explain_snapshot};
use captf_read::live::{self, LiveRead};
use captf_shared::types::CaptfObject;

use crate::conn::Conn;
use crate::errors::{PluginError, from_runtime};
use crate::target::Target;

/// The target object, read live; `NotFound` names the namespace it was looked for in.
pub(crate) async fn get_object(conn: &Conn, t: &Target) -> Result<CaptfObject, PluginError> {
    let ns = conn.namespace.as_str();
    live::get_object(&conn.client, t.kind, ns, &t.name)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))?
        .ok_or_else(|| PluginError::NotFound {
            kind: t.kind.to_string(),
            name: t.name.clone(),
            namespace: ns.to_string(),
        })
}

/// Read the object and everything its pass reads.
pub(crate) async fn read(conn: &Conn, t: &Target) -> Result<LiveRead, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    live::read(&conn.client, object)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))
}

/// The controller's plan of a live read, explained.
pub fn explanation(r: &LiveRead, now: Timestamp) -> Explanation {
    explain_snapshot(&r.snap, &r.active_check, 0, now)
}
