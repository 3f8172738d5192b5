//! `refresh` and `reconcile`: the two requests a person makes of the controller, written only
//! when its rules say it would act on them ([`crate::rules`]).

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use captf_shared::keys;

use crate::annotate::{annotate, annotate_all, stored, whoami};
use crate::conn::Conn;
use crate::errors::PluginError;
use crate::live_read::read;
use crate::printed::{Printed, pretty};
use crate::rules;
use crate::target::Target;

pub(crate) async fn refresh(conn: &Conn, t: &Target, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let (verdict, _) = rules::refresh(&r.snap, now);
    match verdict {
        rules::Request::Write { words } => {
            let value = now.to_string();
            annotate(conn, &r, keys::ANNOTATION_REFRESH, &value).await?;
            if json {
                return Ok(Printed::out(pretty(&json!({
                    "object": r.id.what(), "annotation": {keys::ANNOTATION_REFRESH: value}, "message": words,
                }))));
            }
            Ok(Printed::out(format!("{words}\n")))
        }
        rules::Request::Refuse { words } => Err(PluginError::Refused(words)),
    }
}

pub(crate) async fn reconcile(
    conn: &Conn,
    t: &Target,
    reason: Option<&str>,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let (verdict, _) = rules::reconcile(&r.snap, now);
    match verdict {
        rules::Request::Write { words } => {
            let value = now.to_string();
            let by = whoami(conn).await;
            let reason = reason.map(str::trim).filter(|w| !w.is_empty()).unwrap_or("");
            let written = annotate_all(
                conn,
                &r,
                &[
                    (keys::ANNOTATION_RECONCILE_NOW, value.as_str()),
                    (keys::ANNOTATION_RECONCILE_NOW_BY, by.as_str()),
                    (keys::ANNOTATION_RECONCILE_NOW_REASON, reason),
                ],
            )
            .await?;
            let by = stored(&written, keys::ANNOTATION_RECONCILE_NOW_BY, by);
            if json {
                return Ok(Printed::out(pretty(&json!({
                    "object": r.id.what(), "requestedBy": by, "reason": reason,
                    "annotation": {keys::ANNOTATION_RECONCILE_NOW: value}, "message": words,
                }))));
            }
            Ok(Printed::out(format!("{words}\n")))
        }
        rules::Request::Refuse { words } => Err(PluginError::Refused(words)),
    }
}
