//! Who a request comes from, and whether RBAC lets them make it.
//!
//! - No `Authorization` header, or the admin token of [`crate::Sim::kubeconfig_yaml`]: the
//!   administrator, allowed everything (test set-up, `kubectl`).
//! - A ServiceAccount token ([`crate::Sim::token_for`] or `POST .../serviceaccounts/<name>/token`):
//!   that ServiceAccount, authorized by the RBAC objects the simulator holds ([`crate::rbac`]).
//! - Any other bearer token: 401 Unauthorized.
//!
//! Discovery (`/api`, `/apis`, `/version`, `/openapi`), health and the simulator's own
//! `/sim/v1/...` paths are open to every authenticated user, as Kubernetes' `system:discovery`
//! and `system:public-info-viewer` ClusterRoles make them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use axum::http::{HeaderMap, header};

use crate::error::ApiError;
use crate::rbac::{Policy, Request, UserInfo, forbidden_message};
use crate::store::World;

/// The token of the admin user in the simulator's kubeconfig.
pub const ADMIN_TOKEN: &str = "captf-sim";

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    Admin,
    User(UserInfo),
}

/// The ServiceAccount tokens handed out so far, and the requests RBAC denied.
#[derive(Debug, Default)]
pub struct Auth {
    by_token: Mutex<HashMap<String, UserInfo>>,
    denied: Mutex<Vec<String>>,
    used: Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl Auth {
    /// A new bearer token for a ServiceAccount (each call makes another; all stay valid).
    pub fn mint(&self, namespace: &str, name: &str) -> String {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write(namespace.as_bytes());
        h.write(name.as_bytes());
        let mut tokens = self.by_token.lock().unwrap_or_else(|p| p.into_inner());
        h.write_usize(tokens.len());
        let token = format!("sim-sa.{:016x}{:08x}", h.finish(), tokens.len());
        tokens.insert(token.clone(), UserInfo::service_account(namespace, name));
        token
    }

    /// Who a request's headers say it comes from.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(Caller::Admin);
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(unauthorized)?;
        if token == ADMIN_TOKEN {
            return Ok(Caller::Admin);
        }
        let tokens = self.by_token.lock().unwrap_or_else(|p| p.into_inner());
        tokens.get(token).cloned().map(Caller::User).ok_or_else(unauthorized)
    }

    /// Ok when the caller may make the request; 403 Forbidden in Kubernetes' words otherwise
    /// (and the message is kept for [`Auth::denied`]).
    pub fn authorize(&self, w: &World, caller: &Caller, req: &Request) -> Result<(), ApiError> {
        let r = authorize(w, caller, req);
        match (&r, caller, req) {
            (Err(e), _, _) => self
                .denied
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.message.clone()),
            (
                Ok(()),
                Caller::User(u),
                Request::Resource {
                    verb,
                    group,
                    resource,
                    subresource,
                    ..
                },
            ) => {
                let res = match subresource {
                    Some(s) => format!("{resource}/{s}"),
                    None => resource.clone(),
                };
                self.used
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((u.name.clone(), format!("{verb} {group}/{res}")));
            }
            _ => {}
        }
        r
    }

    /// Every `<verb> <group>/<resource>` a user was allowed so far (`group` empty for core).
    pub fn used(&self, user: &str) -> std::collections::BTreeSet<String> {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(u, _)| u == user)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The message of every request denied so far, oldest first.
    pub fn denied(&self) -> Vec<String> {
        self.denied.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// The RBAC objects the store holds now, compiled (callers use the cached [`World::policy`]).
pub fn compile_policy(w: &World) -> Policy {
    let list = |id: &str| match w.def(id) {
        Ok(def) => w.list(&def, None),
        Err(_) => vec![],
    };
    Policy::from_values(
        &list("rbac.authorization.k8s.io/roles"),
        &list("rbac.authorization.k8s.io/clusterroles"),
        &list("rbac.authorization.k8s.io/rolebindings"),
        &list("rbac.authorization.k8s.io/clusterrolebindings"),
    )
}

/// Ok when the caller may make the request; 403 Forbidden in Kubernetes' words otherwise.
pub fn authorize(w: &World, caller: &Caller, req: &Request) -> Result<(), ApiError> {
    let Caller::User(user) = caller else {
        return Ok(());
    };
    if w.policy().allows(user, req) {
        return Ok(());
    }
    let mut e = ApiError::new(403, "Forbidden", forbidden_message(user, req));
    if let Request::Resource {
        group, resource, name, ..
    } = req
    {
        e.details =
            Some(serde_json::json!({"name": name.clone().unwrap_or_default(), "group": group, "kind": resource}));
    }
    Err(e)
}

/// Ok when the caller may store `obj`, an RBAC object of `def` in `namespace`, without granting
/// more than it holds ([`crate::rbac::escalation_refusal`]); 403 otherwise. Anything that is not
/// an RBAC object, and the administrator, always pass.
pub fn check_escalation(
    w: &World,
    caller: &Caller,
    def: &crate::resources::ResourceDef,
    namespace: Option<&str>,
    obj: &serde_json::Value,
) -> Result<(), ApiError> {
    let Caller::User(user) = caller else {
        return Ok(());
    };
    if def.group != "rbac.authorization.k8s.io" {
        return Ok(());
    }
    match crate::rbac::escalation_refusal(&w.policy(), user, &def.plural, namespace, obj) {
        None => Ok(()),
        Some(message) => Err(ApiError::new(403, "Forbidden", message)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, format!("Bearer {t}").parse().unwrap());
        h
    }

    #[test]
    fn no_token_and_the_admin_token_are_the_administrator() {
        let t = Auth::default();
        assert_eq!(t.authenticate(&HeaderMap::new()).unwrap(), Caller::Admin);
        assert_eq!(t.authenticate(&bearer(ADMIN_TOKEN)).unwrap(), Caller::Admin);
    }

    #[test]
    fn a_minted_token_is_its_service_account() {
        let t = Auth::default();
        let a = t.mint("ns", "sa");
        let b = t.mint("ns", "sa");
        assert_ne!(a, b, "every token is new");
        for tok in [a, b] {
            assert_eq!(
                t.authenticate(&bearer(&tok)).unwrap(),
                Caller::User(UserInfo::service_account("ns", "sa"))
            );
        }
    }

    #[test]
    fn an_unknown_token_is_unauthorized() {
        let t = Auth::default();
        assert_eq!(t.authenticate(&bearer("guess")).unwrap_err().code, 401);
    }
}
