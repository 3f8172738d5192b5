//! The state read of a deletion hold (docs/rules.md): the state Secret, read live. The rules
//! are pure, in [`captf_core::state`].

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use captf_shared::names;

use crate::errors::{self, ApiAction, Error};
use captf_core::ident::Ident;
use captf_core::state::{self, StateRead};

/// The data key of Terraform's kubernetes backend.
pub const STATE_KEY: &str = "tfstate";

/// What a live read of the object's state Secret found (see [`captf_core::state`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateFacts {
    /// Why the state cannot be read, or `None` when it can.
    pub unreadable: Option<String>,
    /// No state at all: no Secret, or no (or an empty) `tfstate` value.
    pub empty: bool,
}

/// Read the object's state Secret. Only a failure to ask (a 5xx, a timeout) is an error; a
/// 401/403 is an answer (the state cannot be read).
pub async fn read(client: &kube::Client, id: &Ident) -> Result<StateFacts, Error> {
    let name = names::state_secret_name(&id.suffix);
    let read = Api::<Secret>::namespaced(client.clone(), &id.namespace)
        .get_opt(&name)
        .await;
    let secret = match read {
        Ok(s) => s,
        Err(e) if errors::is_forbidden(&e) => {
            return Ok(StateFacts {
                unreadable: state::unreadable(&name, StateRead::Forbidden),
                empty: false,
            });
        }
        Err(e) => return Err(Error::api(ApiAction::GetSecret, format!("{}/{name}", id.namespace), e)),
    };
    let read = match &secret {
        None => StateRead::Missing,
        Some(s) => StateRead::Data(s.data.as_ref().and_then(|d| d.get(STATE_KEY)).map(|b| b.0.as_slice())),
    };
    Ok(StateFacts {
        unreadable: state::unreadable(&name, read),
        empty: state::empty(read),
    })
}
