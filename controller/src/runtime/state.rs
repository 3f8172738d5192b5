//! The state-readability read (a deletion hold, docs/rules.md): the state Secret, read live.
//! The rule is pure, in [`crate::core::state`].

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use captf_shared::names;

use super::errors::{self, ApiAction, Error};
use super::gather::Ident;
use crate::core::state::{self, StateRead};

/// The data key of Terraform's kubernetes backend.
pub const STATE_KEY: &str = "tfstate";

/// Why the object's state cannot be read, or `None` when it can. Only a failure to ask (a 5xx,
/// a timeout) is an error; a 401/403 is an answer (the state cannot be read).
pub async fn unreadable(client: &kube::Client, id: &Ident) -> Result<Option<String>, Error> {
    let name = names::state_secret_name(&id.suffix);
    let read = Api::<Secret>::namespaced(client.clone(), &id.namespace)
        .get_opt(&name)
        .await;
    let secret = match read {
        Ok(s) => s,
        Err(e) if errors::is_forbidden(&e) => return Ok(state::unreadable(&name, StateRead::Forbidden)),
        Err(e) => return Err(Error::api(ApiAction::GetSecret, format!("{}/{name}", id.namespace), e)),
    };
    let verdict = match &secret {
        None => state::unreadable(&name, StateRead::Missing),
        Some(s) => state::unreadable(
            &name,
            StateRead::Data(s.data.as_ref().and_then(|d| d.get(STATE_KEY)).map(|b| b.0.as_slice())),
        ),
    };
    Ok(verdict)
}
