//! The runtime's errors. Every variant names the action that failed; [`Error::category`] is a
//! stable string used as the `captf_reconcile_errors_total` label and in logs (docs/conventions.md).

use captf_shared::Kind;

/// An API action the reconciler takes (the category of a failed call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiAction {
    ListJobs,
    GetJob,
    PatchJob,
    CreateJob,
    DeleteJob,
    ListPods,
    GetPod,
    GetSecret,
    WriteSecret,
    GetConfigMap,
    GetLease,
    WriteLease,
    GetObject,
    PatchObject,
    PatchStatus,
    ListMembers,
    GetMachine,
    WriteIdentity,
    CreateEvent,
}

impl ApiAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiAction::ListJobs => "list Jobs",
            ApiAction::GetJob => "get Job",
            ApiAction::PatchJob => "patch Job",
            ApiAction::CreateJob => "create Job",
            ApiAction::DeleteJob => "delete Job",
            ApiAction::ListPods => "list pods",
            ApiAction::GetPod => "get pod",
            ApiAction::GetSecret => "get Secret",
            ApiAction::WriteSecret => "write Secret",
            ApiAction::GetConfigMap => "get ConfigMap",
            ApiAction::GetLease => "get Lease",
            ApiAction::WriteLease => "write Lease",
            ApiAction::GetObject => "get",
            ApiAction::PatchObject => "patch",
            ApiAction::PatchStatus => "patch the status of",
            ApiAction::ListMembers => "list the members of",
            ApiAction::GetMachine => "get the Cluster API Machine of",
            ApiAction::CreateEvent => "create the Event of",
            ApiAction::WriteIdentity => "create the runner identity (ServiceAccount, Role, RoleBinding)",
        }
    }

    /// The category string (PascalCase, e.g. `CreateJob`).
    pub fn category(self) -> &'static str {
        match self {
            ApiAction::ListJobs => "ListJobs",
            ApiAction::GetJob => "GetJob",
            ApiAction::PatchJob => "PatchJob",
            ApiAction::CreateJob => "CreateJob",
            ApiAction::DeleteJob => "DeleteJob",
            ApiAction::ListPods => "ListPods",
            ApiAction::GetPod => "GetPod",
            ApiAction::GetSecret => "GetSecret",
            ApiAction::WriteSecret => "WriteSecret",
            ApiAction::GetConfigMap => "GetConfigMap",
            ApiAction::GetLease => "GetLease",
            ApiAction::WriteLease => "WriteLease",
            ApiAction::GetObject => "GetObject",
            ApiAction::PatchObject => "PatchObject",
            ApiAction::PatchStatus => "PatchStatus",
            ApiAction::ListMembers => "ListMembers",
            ApiAction::GetMachine => "GetMachine",
            ApiAction::WriteIdentity => "WriteIdentity",
            ApiAction::CreateEvent => "CreateEvent",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("failed to {} {what}: {source}", action.as_str())]
    Api {
        action: ApiAction,
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The object could not be turned into a snapshot (no name, not a Job kind, bad annotation).
    #[error("failed to read {kind} {name}: {source}")]
    Snapshot {
        kind: Kind,
        name: String,
        #[source]
        source: captf_core::snapshot::SnapshotError,
    },
    /// A value could not be serialized (a bug, reported rather than panicking).
    #[error("failed to serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The object has no namespace or name.
    #[error("{kind} has no metadata.{field}")]
    MissingMeta { kind: Kind, field: &'static str },
    /// A read found nothing to decide from yet (its Jobs not listed, or its copy of the object
    /// older than the live one): reading again will.
    #[error("{what}: nothing to decide from yet ({why}); read again")]
    Pending { what: String, why: &'static str },
}

impl From<captf_core::ident::MissingMeta> for Error {
    fn from(m: captf_core::ident::MissingMeta) -> Error {
        Error::MissingMeta {
            kind: m.kind,
            field: m.field,
        }
    }
}

impl Error {
    pub fn api(action: ApiAction, what: impl Into<String>, source: kube::Error) -> Error {
        Error::Api {
            action,
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// A stable category string (metric label, log field).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Api { action, .. } => action.category(),
            Error::Snapshot { .. } => "Snapshot",
            Error::Serialize { .. } => "Serialize",
            Error::MissingMeta { .. } => "MissingMeta",
            Error::Pending { .. } => "Pending",
        }
    }

    /// A 409 (somebody else wrote first): a requeue, not a failure.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Api { source, .. } if status_code(source) == Some(409))
    }
}

/// The HTTP status of an API error response.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// True for a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    status_code(e) == Some(404)
}

/// True for a 409 (conflict or already exists).
pub fn is_conflict(e: &kube::Error) -> bool {
    status_code(e) == Some(409)
}

/// True for a create's 409 `AlreadyExists` (not an update's 409 `Conflict`).
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// True for a 401 or 403: the API answered that the caller may not do this.
pub fn is_forbidden(e: &kube::Error) -> bool {
    matches!(status_code(e), Some(401 | 403))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_says_what_failed_and_has_a_category() {
        let status = kube::core::Status::failure("boom", "InternalError").with_code(500);
        let e = Error::api(
            ApiAction::CreateJob,
            "default/tc-x-apply-1",
            kube::Error::Api(Box::new(status)),
        );
        assert!(
            e.to_string().starts_with("failed to create Job default/tc-x-apply-1: "),
            "{e}"
        );
        assert_eq!(e.category(), "CreateJob");
        assert!(!e.is_conflict());
        let conflict = kube::core::Status::failure("c", "Conflict").with_code(409);
        assert!(!is_already_exists(&kube::Error::Api(Box::new(conflict.clone()))));
        assert!(Error::api(ApiAction::WriteLease, "l", kube::Error::Api(Box::new(conflict))).is_conflict());
        let exists = kube::core::Status::failure("e", "AlreadyExists").with_code(409);
        assert!(is_already_exists(&kube::Error::Api(Box::new(exists))));
    }
}
