//! Events about CAPTF objects (docs/operating.md), written as `events.k8s.io/v1` Events.
//!
//! Not kube's `Recorder`: its timestamps come from the wall clock, which would put the
//! simulator's events at the wrong time, and it keeps a cache per object that grows with the
//! number of objects. CAPTF emits each event once per Job (or once per transition, for
//! `StateLocked`), so it needs no series aggregation: one emission is one Event, stamped with the
//! controller's clock.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use captf_shared::keys;

use captf_core::ident::Ident;
use captf_core::membership::Unverified;

/// The reporting controller of every CAPTF Event.
pub const REPORTING_CONTROLLER: &str = "captf.io/controller";

/// What one emission says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emission<'a> {
    pub warning: bool,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
    /// The Job the event is about, when there is one (`related`).
    pub job: Option<&'a str>,
}

/// Build the Event (PURE): `regarding` the object, `related` to its Job, stamped `now`.
pub fn build(id: &Ident, e: &Emission<'_>, instance: &str, now: Timestamp) -> Event {
    let regarding = ObjectReference {
        api_version: Some(keys::API_VERSION.into()),
        kind: Some(id.kind.as_str().into()),
        name: Some(id.name.clone()),
        namespace: Some(id.namespace.clone()),
        uid: Some(id.uid.clone()).filter(|u| !u.is_empty()),
        ..Default::default()
    };
    Event {
        metadata: ObjectMeta {
            // `<name>-`: kube-apiserver refuses a generateName ending in a dot (not a DNS
            // subdomain once the random suffix is masked).
            generate_name: Some(format!("{}-", id.name)),
            namespace: Some(id.namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
        reason: Some(e.reason.into()),
        action: Some(e.action.into()),
        // The API server rejects notes over 1 KiB.
        note: Some(cut_note(e.note)),
        regarding: Some(regarding),
        related: e.job.map(|j| ObjectReference {
            api_version: Some("batch/v1".into()),
            kind: Some("Job".into()),
            name: Some(j.to_string()),
            namespace: Some(id.namespace.clone()),
            ..Default::default()
        }),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(instance.into()),
        ..Default::default()
    }
}

/// At most 1024 bytes, cut on a character boundary.
pub(super) fn cut_note(note: &str) -> String {
    let mut end = note.len().min(1024);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note[..end].to_string()
}

/// The name of a Job's booking Event: one per Job (its uid tells two Jobs of one name apart,
/// as an object deleted and created again reuses its Jobs' names). Creating it twice is a 409,
/// which is how a booking replayed after a crash emits it exactly once.
pub fn booking_event_name(job: &str, job_uid: &str) -> String {
    let uid: String = job_uid.chars().filter(char::is_ascii_alphanumeric).take(8).collect();
    format!("{job}.{}", uid.to_ascii_lowercase())
}

/// The name of the Event about one value of one request annotation on the object: the same
/// value seen again by the next pass gives the same name, so it is said once. A DNS subdomain
/// of at most 253 characters whatever the object's name.
pub fn request_event_name(id: &Ident, key: &str, value: &str) -> String {
    let hash = captf_shared::names::hex_sha256(&format!("{}\n{key}\n{value}", id.uid), 12);
    let name: String = id.name.chars().take(200).collect();
    format!("{}.request-{hash}", name.trim_end_matches(['.', '-']))
}

/// The name of the Event about the unverified member `member` met while deciding on the deletion
/// of the TerraformCluster of UID `cluster_uid`, on `regarding` (that cluster, or the member):
/// one per cluster (it is deleted once in its life), member and object the Event is about. A DNS
/// subdomain of at most 253 characters whatever the object's name.
pub fn unverified_member_event_name(regarding: &Ident, cluster_uid: &str, member: &Unverified) -> String {
    let hash = captf_shared::names::hex_sha256(
        &format!(
            "{cluster_uid}\n{}\n{}\n{}\n{}",
            member.kind, member.name, member.uid, regarding.kind
        ),
        12,
    );
    let name: String = regarding.name.chars().take(200).collect();
    format!("{}.unverified-{hash}", name.trim_end_matches(['.', '-']))
}

/// Writes Events. Ordinary ones are a courtesy: failures are logged, never fatal. A booking's
/// Event is part of the booking ([`Events::publish_once`]).
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    instance: String,
}

impl Events {
    /// `instance` names this replica (its pod name), as `reportingInstance` requires.
    pub fn new(client: kube::Client, instance: String) -> Events {
        Events { client, instance }
    }

    /// Create the Event named `name` unless it exists already (`AlreadyExists` is success; any
    /// other error, a 409 `Conflict` included, is not).
    pub async fn publish_once(
        &self,
        id: &Ident,
        e: &Emission<'_>,
        now: Timestamp,
        name: &str,
    ) -> Result<(), kube::Error> {
        let mut ev = build(id, e, &self.instance, now);
        ev.metadata.generate_name = None;
        ev.metadata.name = Some(name.to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &id.namespace);
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => Ok(()),
            Err(err) if captf_read::errors::is_already_exists(&err) => Ok(()),
            Err(err) => Err(err),
        }
    }

    pub async fn publish(&self, id: &Ident, e: &Emission<'_>, now: Timestamp) {
        let ev = build(id, e, &self.instance, now);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &id.namespace);
        if let Err(err) = api.create(&PostParams::default(), &ev).await {
            tracing::warn!(error = %err, reason = e.reason, "failed to publish event for {}", id.what());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_shared::Kind;

    fn ident() -> Ident {
        Ident {
            kind: Kind::TerraformCluster,
            namespace: "ns".into(),
            name: "c1".into(),
            uid: "u-1".into(),
            suffix: "s".into(),
            object_id: "o".into(),
            cluster_name: None,
        }
    }

    #[test]
    fn a_request_event_name_is_one_per_value_and_a_dns_subdomain_for_the_longest_object_name() {
        let id = ident();
        let a = request_event_name(&id, "captf.io/refresh", "9999-01-01T00:00:00Z");
        assert_eq!(a, request_event_name(&id, "captf.io/refresh", "9999-01-01T00:00:00Z"));
        assert_ne!(a, request_event_name(&id, "captf.io/refresh", "9999-01-02T00:00:00Z"));
        assert_ne!(
            a,
            request_event_name(&id, "captf.io/reconcile-now", "9999-01-01T00:00:00Z")
        );
        let long = Ident {
            name: format!("{}.x", "a".repeat(251)),
            ..ident()
        };
        let n = request_event_name(&long, "captf.io/refresh", "v");
        assert!(n.len() <= 253 && !n.contains(".."), "{n}");
    }

    #[test]
    fn an_unverified_member_event_is_named_once_per_cluster_member_and_object_it_is_about() {
        let cluster = ident();
        let member = Unverified {
            kind: Kind::TerraformMachinePool,
            name: "c1".into(),
            uid: "p-1".into(),
        };
        let on_member = Ident::new(member.kind, "ns".into(), "c1".into(), "p-1".into(), None);
        let a = unverified_member_event_name(&cluster, "u-1", &member);
        assert_eq!(a, unverified_member_event_name(&cluster, "u-1", &member), "said once");
        // The same name in one namespace: the cluster's Event and the pool's are two.
        assert_ne!(a, unverified_member_event_name(&on_member, "u-1", &member));
        // A cluster of the same name created again, or another member: said again.
        assert_ne!(a, unverified_member_event_name(&cluster, "u-2", &member));
        let other = Unverified {
            uid: "p-2".into(),
            ..member.clone()
        };
        assert_ne!(a, unverified_member_event_name(&cluster, "u-1", &other));
        let long = Ident {
            name: format!("{}.x", "a".repeat(251)),
            ..ident()
        };
        let n = unverified_member_event_name(&long, "u-1", &member);
        assert!(n.len() <= 253 && !n.contains(".."), "{n}");
    }

    #[test]
    fn an_event_is_stamped_with_the_controllers_clock_not_the_wall_clock() {
        let now: Timestamp = "2026-01-01T00:03:00Z".parse().expect("time");
        let e = Emission {
            warning: true,
            reason: "JobFailed",
            action: "BookJob",
            note: "Job x failed",
            job: Some("x"),
        };
        let ev = build(&ident(), &e, "pod-1", now);
        assert_eq!(ev.event_time, Some(MicroTime(now)));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.regarding.and_then(|r| r.uid).as_deref(), Some("u-1"));
        assert_eq!(ev.related.and_then(|r| r.name).as_deref(), Some("x"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(ev.metadata.generate_name.as_deref(), Some("c1-"));
    }

    #[test]
    fn a_booking_event_is_named_by_its_job_and_the_jobs_uid() {
        assert_eq!(
            booking_event_name("tc-a-1b2c3d-apply-3", "0F1E2D3C-4B5A-6978-8796-a5b4c3d2e1f0"),
            "tc-a-1b2c3d-apply-3.0f1e2d3c"
        );
        assert_ne!(
            booking_event_name("tc-a-apply-1", "11111111-0000"),
            booking_event_name("tc-a-apply-1", "22222222-0000")
        );
    }

    #[test]
    fn a_long_note_is_cut_to_1024_bytes_on_a_character_boundary() {
        let note = "é".repeat(1000);
        let cut = cut_note(&note);
        assert!(cut.len() <= 1024);
        assert!(note.starts_with(&cut));
        assert_eq!(cut_note("short"), "short");
    }
}
