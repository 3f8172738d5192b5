//! Kubernetes-shaped errors: every failure the API answers with is a `Status` body.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// An API error as kube-apiserver reports it (`code`, `reason`, `message`, `details`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, def: &ResourceDef, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": def.group, "kind": def.plural}));
        self
    }

    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        ApiError::new(404, "NotFound", format!("{} \"{name}\" not found", def.qualified())).with_details(def, name)
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.qualified()),
        )
        .with_details(def, name)
    }

    pub fn conflict(def: &ResourceDef, name: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                def.qualified()
            ),
        )
        .with_details(def, name)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn invalid(def: &ResourceDef, name: &str, message: impl Into<String>) -> Self {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {}", def.kind, message.into()),
        )
        .with_details(def, name)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(o) = s.as_object_mut()
        {
            // kube-apiserver's Status of an error it has no reason for (StatusReasonUnknown).
            o.remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
