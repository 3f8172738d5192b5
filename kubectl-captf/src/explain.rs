//! `explain`: what the controller does next with an object, when, and why.

use k8s_openapi::jiff::Timestamp;

use captf_shared::keys;

use crate::conn::Conn;
use crate::errors::PluginError;
use crate::live_read::{explanation, read};
use crate::printed::{Printed, pretty};
use crate::status::{NOT_OBSERVED, observed};
use crate::target::Target;
use crate::words;

pub(crate) async fn explain(
    conn: &Conn,
    t: &Target,
    typed: &str,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    if json {
        return Ok(Printed::out(pretty(&e.json)));
    }
    let mut text = words::explain_text(&e, &r.object, r.waited_on.as_ref(), typed, now);
    let stored = r
        .inputs_secret
        .as_ref()
        .and_then(captf_core::inputs_secret::stored_inputs);
    if let Some(flow) = words::exports_words(&r.object, stored.as_ref()) {
        text.push_str(&format!("{:<14}{flow}\n", "Outputs:"));
    }
    if !observed(&r.object) {
        text = format!("Note: {NOT_OBSERVED}; below is what a controller would do.\n{text}");
    }
    if let Some(by) = r
        .object
        .metadata()
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LABEL_MANAGED_BY))
    {
        text = format!(
            "Note: labelled {}={by}: the controller leaves this object alone; below is what it would do otherwise.\n{text}",
            keys::LABEL_MANAGED_BY
        );
    }
    Ok(Printed::out(text))
}
