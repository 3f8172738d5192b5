//! Where notifications go (docs/notifications.md): the cluster-wide targets read once at start
//! (`--notification-targets-file`, their Secrets in the controller's namespace) and each
//! namespace's own (`ConfigMap captf-notifications`, their Secrets in that namespace), and
//! [`Notifications::send`], which only queues.
//!
//! A namespace's targets are read in a task of their own, never by the pass that sends: a pass
//! hands the event over and goes on. The first event of a namespace waits in that namespace's
//! entry (at most [`MAX_PENDING`]) until its targets are read; later ones go to the targets read
//! at most [`REFRESH`] ago while a newer read runs. A target that cannot be used (a missing
//! Secret, a URL that is not http or https) is logged by name and field, never by value, counted
//! in `captf_notification_target_errors_total`, and left out; the others still get the event.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use sha2::{Digest, Sha256};

use captf_notify::{Delivery, Event, Notifier, Options, SecretKeyRef, Target, TargetSpec};

use super::locking::lock;
use super::metrics::Metrics;

/// The ConfigMap, in an object's namespace, whose `targets` key lists that namespace's targets.
pub const NAMESPACE_CONFIGMAP: &str = "captf-notifications";
/// Its key holding the YAML list.
pub const NAMESPACE_CONFIGMAP_KEY: &str = "targets";
/// How long a namespace's targets are used before they are read again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// One read of a ConfigMap or Secret.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Reading a whole configuration (the ConfigMap and every Secret it names).
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// The namespaces whose targets are kept; the one used longest ago is forgotten first.
pub const MAX_NAMESPACES: usize = 256;
/// Events of a namespace that wait for its first read; more are dropped (and logged).
pub const MAX_PENDING: usize = 16;

const CLUSTER: &str = "cluster";
const NAMESPACE: &str = "namespace";

/// The notifiers every pass shares.
pub struct Notifications {
    cluster: Option<(Notifier, Delivery)>,
    namespaces: Option<Arc<Namespaces>>,
    after_failures: u32,
}

impl Notifications {
    /// No target at all (a runtime built without flags, and tests of other things).
    pub fn none(after_failures: u32) -> Notifications {
        Notifications {
            cluster: None,
            namespaces: None,
            after_failures,
        }
    }

    /// Read the cluster-wide targets from `targets_file` (none when empty) with their Secrets in
    /// `secrets_namespace`, and start delivering. Never fails: whatever cannot be used is logged,
    /// counted and left out, so the controller starts and reconciles without it.
    pub async fn start(
        client: &kube::Client,
        targets_file: &str,
        secrets_namespace: &str,
        namespace_targets: bool,
        after_failures: u32,
        metrics: &Arc<Metrics>,
        clock: super::clock::SharedClock,
    ) -> Notifications {
        let cluster = match cluster_specs(targets_file, metrics) {
            specs if specs.is_empty() => None,
            specs => {
                let (targets, _) = resolve(
                    client,
                    secrets_namespace,
                    &specs,
                    CLUSTER,
                    None,
                    metrics,
                    &mut Vec::new(),
                )
                .await;
                tracing::info!(
                    configured = specs.len(),
                    usable = targets.len(),
                    "cluster-wide notification targets"
                );
                start_delivery(targets, metrics)
            }
        };
        Notifications {
            cluster,
            namespaces: namespace_targets.then(|| {
                Arc::new(Namespaces {
                    client: client.clone(),
                    clock,
                    metrics: metrics.clone(),
                    cache: Mutex::default(),
                })
            }),
            after_failures,
        }
    }

    /// `--notify-after-failures`.
    pub fn after_failures(&self) -> u32 {
        self.after_failures
    }

    /// Hand `event` to the cluster-wide targets and to those of its object's namespace. Never
    /// waits: not for the network, not for a read of the namespace's targets.
    pub fn send(&self, event: Event) {
        if let Some(ns) = &self.namespaces {
            ns.send(event.clone());
        }
        if let Some((notifier, _)) = &self.cluster {
            notifier.notify(event);
        }
    }
}

/// The cluster-wide target specs of the file, or none (logged and counted) when it cannot be
/// read or breaks a rule.
fn cluster_specs(path: &str, metrics: &Metrics) -> Vec<TargetSpec> {
    if path.trim().is_empty() {
        return vec![];
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(file = path, error = %e, "cannot read the notification targets; no cluster-wide notifications");
            metrics.notification_target_error(CLUSTER, "config");
            return vec![];
        }
    };
    parse(&text, CLUSTER, None, metrics, &mut Vec::new())
}

/// A YAML list of targets; an empty text is none. Errors name the field, never a Secret's value
/// (the list holds only references).
fn parse(
    text: &str,
    scope: &str,
    namespace: Option<&str>,
    metrics: &Metrics,
    problems: &mut Vec<String>,
) -> Vec<TargetSpec> {
    if text.trim().is_empty() {
        return vec![];
    }
    match captf_notify::parse_targets(text) {
        Ok(specs) => specs,
        Err(errors) => {
            for e in &errors {
                tracing::warn!(scope, namespace, field = %e.field, reason = %e.reason, "notification targets do not parse; none of them is used");
                problems.push(format!("{}: {}", e.field, e.reason));
            }
            metrics.notification_target_error(scope, "config");
            vec![]
        }
    }
}

fn start_delivery(targets: Vec<Target>, metrics: &Metrics) -> Option<(Notifier, Delivery)> {
    if targets.is_empty() {
        return None;
    }
    match captf_notify::start(targets, Options::default(), metrics.notifications.clone()) {
        Ok(pair) => Some(pair),
        Err(e) => {
            tracing::error!(error = %e, "cannot start delivering notifications");
            None
        }
    }
}

/// The targets of `specs` whose Secrets (in `namespace`) hold usable values, and a digest of
/// what they were made of (to tell a changed configuration from the same one read again).
/// `prefix` names a namespace's targets `<namespace>/<name>` in logs and metrics.
async fn resolve(
    client: &kube::Client,
    namespace: &str,
    specs: &[TargetSpec],
    scope: &str,
    prefix: Option<&str>,
    metrics: &Metrics,
    problems: &mut Vec<String>,
) -> (Vec<Target>, [u8; 32]) {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secrets: BTreeMap<String, Result<Option<Secret>, String>> = BTreeMap::new();
    let mut digest = Sha256::new();
    let mut targets = vec![];
    for spec in specs {
        let mut spec = spec.clone();
        if let Some(p) = prefix {
            spec.name = format!("{p}/{}", spec.name);
        }
        let mut value = async |r: &SecretKeyRef| -> Result<String, String> {
            if !secrets.contains_key(&r.name) {
                let got = match tokio::time::timeout(READ_TIMEOUT, api.get_opt(&r.name)).await {
                    Ok(Ok(s)) => Ok(s),
                    Ok(Err(e)) => Err(format!("cannot read Secret {}: {}", r.name, reason_of(&e))),
                    Err(_) => Err(format!("reading Secret {} timed out", r.name)),
                };
                secrets.insert(r.name.clone(), got);
            }
            match secrets.get(&r.name) {
                Some(Ok(Some(s))) => secret_value(s, &r.key)
                    .ok_or_else(|| format!("Secret {} has no key {} (or it is not UTF-8)", r.name, r.key)),
                Some(Ok(None)) | None => Err(format!("Secret {} not found", r.name)),
                Some(Err(e)) => Err(e.clone()),
            }
        };
        let url = match value(&spec.url_secret).await {
            Ok(u) => u,
            Err(why) => {
                left_out(scope, namespace, &spec.name, "urlSecret", &why, metrics, problems);
                continue;
            }
        };
        let token = match &spec.token_secret {
            None => None,
            Some(r) => match value(r).await {
                Ok(t) => Some(t),
                Err(why) => {
                    left_out(scope, namespace, &spec.name, "tokenSecret", &why, metrics, problems);
                    continue;
                }
            },
        };
        match Target::resolve(&spec, &url, token.as_deref()) {
            Ok(t) => {
                for part in [spec.name.as_str(), url.as_str(), token.as_deref().unwrap_or("")] {
                    digest.update((part.len() as u64).to_be_bytes());
                    digest.update(part.as_bytes());
                }
                digest.update(format!("{:?}/{:?}", spec.kind, spec.events).as_bytes());
                targets.push(t);
            }
            // The error names the reference and why (`targets[x].urlSecret: Secret s key k: the
            // URL must be http or https`), never the value.
            Err(e) => {
                let field = e.field.rsplit('.').next().unwrap_or("urlSecret").to_string();
                left_out(scope, namespace, &spec.name, &field, &e.reason, metrics, problems);
            }
        }
    }
    (targets, digest.finalize().into())
}

/// A target left out: logged and counted for the platform, and said to `problems` for the
/// namespace's own team (an Event on their ConfigMap).
fn left_out(
    scope: &str,
    namespace: &str,
    target: &str,
    field: &str,
    why: &str,
    metrics: &Metrics,
    problems: &mut Vec<String>,
) {
    problems.push(format!("target {target}: {field}: {why}"));
    tracing::warn!(
        scope,
        namespace,
        target,
        field,
        reason = why,
        "notification target left out"
    );
    metrics.notification_target_error(scope, field);
}

/// A Secret's value under `key` (data, else stringData as a fake API server may keep it).
fn secret_value(s: &Secret, key: &str) -> Option<String> {
    if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone()).ok();
    }
    s.string_data.as_ref().and_then(|d| d.get(key)).cloned()
}

/// An API error without the response body (which might quote what was sent).
fn reason_of(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.reason),
        _ => "the API server could not be reached".into(),
    }
}

/// Each namespace's targets, read in the background and kept for [`REFRESH`].
struct Namespaces {
    client: kube::Client,
    /// The controller's clock: an Event's time, as every Event of the controller's.
    clock: super::clock::SharedClock,
    metrics: Arc<Metrics>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<String, Entry>,
    uses: u64,
}

#[derive(Default)]
struct Entry {
    /// None: no usable target (or not read yet).
    delivery: Option<(Notifier, Delivery)>,
    /// What the targets were made of: the same digest read again keeps the running delivery
    /// (and its deduplication window).
    digest: Option<[u8; 32]>,
    /// When the targets were last read; `None` until the first read ends.
    read_at: Option<Instant>,
    reading: bool,
    /// Events that came before the first read ended.
    pending: Vec<Event>,
    last_used: u64,
}

impl Namespaces {
    fn send(self: &Arc<Self>, event: Event) {
        let ns = event.object().namespace.clone();
        let mut cache = lock(&self.cache);
        cache.uses += 1;
        let uses = cache.uses;
        if !cache.entries.contains_key(&ns) && cache.entries.len() >= MAX_NAMESPACES {
            evict_oldest(&mut cache.entries);
        }
        let entry = cache.entries.entry(ns.clone()).or_default();
        entry.last_used = uses;
        let due = entry.read_at.is_none_or(|t| t.elapsed() >= REFRESH);
        match (&entry.delivery, entry.read_at) {
            (Some((notifier, _)), _) => {
                notifier.notify(event);
            }
            (None, None) if entry.pending.len() < MAX_PENDING => entry.pending.push(event),
            (None, None) => {
                tracing::warn!(namespace = %ns, event = event.kind().as_str(), "namespace notification targets not read yet and too many events wait; dropped");
            }
            (None, Some(_)) => {}
        }
        if due && !entry.reading {
            entry.reading = true;
            drop(cache);
            let this = self.clone();
            tokio::spawn(async move { this.refresh(ns).await });
        }
    }

    /// Read `ns`'s targets (bounded by [`LOAD_TIMEOUT`]); a failure is "no targets" until the
    /// next read.
    async fn refresh(self: Arc<Self>, ns: String) {
        let read = tokio::time::timeout(LOAD_TIMEOUT, self.read(&ns)).await;
        let (targets, digest) = match read {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(namespace = %ns, "reading the namespace's notification targets timed out; none until the next read");
                self.metrics.notification_target_error(NAMESPACE, "read");
                (vec![], [0; 32])
            }
        };
        let mut cache = lock(&self.cache);
        // Forgotten meanwhile (evicted): what was read is not kept.
        let Some(entry) = cache.entries.get_mut(&ns) else {
            return;
        };
        entry.reading = false;
        entry.read_at = Some(Instant::now());
        if entry.digest != Some(digest) {
            entry.digest = Some(digest);
            if let Some((_, old)) = entry.delivery.take() {
                // The old targets finish what they hold (the notifier just dropped) in the
                // background: nothing queued is lost to a changed configuration.
                tokio::spawn(old.finished());
            }
            entry.delivery = start_delivery(targets, &self.metrics);
        }
        let pending = std::mem::take(&mut entry.pending);
        if let Some((notifier, _)) = &entry.delivery {
            for e in pending {
                notifier.notify(e);
            }
        }
    }

    async fn read(&self, ns: &str) -> (Vec<Target>, [u8; 32]) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let cm = match tokio::time::timeout(READ_TIMEOUT, api.get_opt(NAMESPACE_CONFIGMAP)).await {
            Ok(Ok(cm)) => cm,
            Ok(Err(e)) => {
                tracing::warn!(namespace = ns, configmap = NAMESPACE_CONFIGMAP, error = %reason_of(&e), "cannot read the namespace's notification targets; none until the next read");
                self.metrics.notification_target_error(NAMESPACE, "read");
                return (vec![], [0; 32]);
            }
            Err(_) => {
                tracing::warn!(
                    namespace = ns,
                    configmap = NAMESPACE_CONFIGMAP,
                    "reading the namespace's notification targets timed out; none until the next read"
                );
                self.metrics.notification_target_error(NAMESPACE, "read");
                return (vec![], [0; 32]);
            }
        };
        let Some(cm) = cm else {
            return (vec![], [0; 32]);
        };
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(NAMESPACE_CONFIGMAP_KEY))
            .cloned()
            .unwrap_or_default();
        let mut problems = Vec::new();
        let specs = parse(&text, NAMESPACE, Some(ns), &self.metrics, &mut problems);
        let found = if specs.is_empty() {
            (vec![], [0; 32])
        } else {
            resolve(
                &self.client,
                ns,
                &specs,
                NAMESPACE,
                Some(ns),
                &self.metrics,
                &mut problems,
            )
            .await
        };
        if !problems.is_empty() {
            self.tell(&cm, &problems).await;
        }
        found
    }

    /// Say what is wrong with a namespace's targets where its team looks: a Warning Event on
    /// their ConfigMap, once per version of it and of the problems (a read every minute does not
    /// repeat it). A failure to publish is logged; the problems are counted and logged anyway.
    async fn tell(&self, cm: &ConfigMap, problems: &[String]) {
        let ev = invalid_targets_event(cm, problems, self.clock.now());
        let ns = cm.metadata.namespace.clone().unwrap_or_default();
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(self.client.clone(), &ns);
        match tokio::time::timeout(READ_TIMEOUT, api.create(&kube::api::PostParams::default(), &ev)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if captf_read::errors::is_already_exists(&e) => {}
            Ok(Err(e)) => {
                tracing::warn!(namespace = ns, error = %reason_of(&e), "cannot publish the Event on the notification targets' problems")
            }
            Err(_) => tracing::warn!(
                namespace = ns,
                "publishing the Event on the notification targets' problems timed out"
            ),
        }
    }
}

/// The reason of the Event on a namespace's ConfigMap whose targets are (partly) unusable.
pub const INVALID_TARGETS_REASON: &str = "NotificationTargetsInvalid";

/// The Warning Event on `cm` listing `problems` (each names the target and the field, never a
/// value), named after the ConfigMap's version and the problems, so the same ones are told once.
/// PURE.
fn invalid_targets_event(
    cm: &ConfigMap,
    problems: &[String],
    now: jiff::Timestamp,
) -> k8s_openapi::api::events::v1::Event {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    let mut digest = Sha256::new();
    digest.update(cm.metadata.resource_version.as_deref().unwrap_or_default().as_bytes());
    for p in problems {
        digest.update((p.len() as u64).to_be_bytes());
        digest.update(p.as_bytes());
    }
    let hex: String = digest.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    // The API server refuses notes over 1 KiB: cut as every Event of the controller's is.
    let note = super::events::cut_note(&format!(
        "{} of {NAMESPACE_CONFIGMAP} left out: {}",
        if problems.len() == 1 { "a target" } else { "targets" },
        problems.join("; ")
    ));
    k8s_openapi::api::events::v1::Event {
        metadata: ObjectMeta {
            name: Some(format!("{NAMESPACE_CONFIGMAP}.{hex}")),
            namespace: cm.metadata.namespace.clone(),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".into()),
        reason: Some(INVALID_TARGETS_REASON.into()),
        action: Some("ReadNotificationTargets".into()),
        note: Some(note),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: cm.metadata.name.clone(),
            namespace: cm.metadata.namespace.clone(),
            uid: cm.metadata.uid.clone(),
            ..Default::default()
        }),
        reporting_controller: Some(super::events::REPORTING_CONTROLLER.into()),
        reporting_instance: Some("captf-controller".into()),
        ..Default::default()
    }
}

/// Forget the namespace used longest ago; its delivery finishes what it holds.
fn evict_oldest(entries: &mut HashMap<String, Entry>) {
    let oldest = entries
        .iter()
        .min_by_key(|(_, e)| e.last_used)
        .map(|(ns, _)| ns.clone());
    if let Some(e) = oldest.and_then(|ns| entries.remove(&ns))
        && let Some((_, delivery)) = e.delivery
    {
        tokio::spawn(delivery.finished());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn a_secrets_value_is_read_from_data_and_a_missing_key_or_bad_utf8_is_none() {
        let s = Secret {
            data: Some(BTreeMap::from([
                ("url".to_string(), ByteString(b"http://x/y\n".to_vec())),
                ("bad".to_string(), ByteString(vec![0xff])),
            ])),
            ..Default::default()
        };
        assert_eq!(secret_value(&s, "url").as_deref(), Some("http://x/y\n"));
        assert_eq!(secret_value(&s, "bad"), None);
        assert_eq!(secret_value(&s, "other"), None);
    }

    #[test]
    fn a_configuration_that_does_not_parse_gives_no_target_and_is_counted() {
        let m = Metrics::new();
        let mut problems = Vec::new();
        assert!(parse("", CLUSTER, None, &m, &mut problems).is_empty());
        assert!(problems.is_empty());
        assert!(parse("- {name: x, kind: Nope}", CLUSTER, None, &m, &mut problems).is_empty());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("targets[0]"), "{problems:?}");
        assert!(
            m.encode()
                .contains(r#"captf_notification_target_errors_total{scope="cluster",field="config"} 1"#),
            "{}",
            m.encode()
        );
        assert_eq!(
            parse(
                "- {name: s, kind: Slack, urlSecret: {name: n, key: k}}",
                CLUSTER,
                None,
                &m,
                &mut Vec::new()
            )
            .len(),
            1
        );
    }

    #[test]
    fn a_missing_targets_file_gives_no_target_and_is_counted() {
        let m = Metrics::new();
        assert!(cluster_specs("", &m).is_empty());
        assert!(cluster_specs("/nonexistent/targets.yaml", &m).is_empty());
        assert!(m.encode().contains(r#"field="config"} 1"#));
    }

    #[test]
    fn a_namespaces_unusable_target_is_told_on_its_configmap_once_per_version_never_with_a_value() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "captf-notifications", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"},
        }))
        .unwrap();
        let problems = vec!["target team-a/chat: urlSecret: the URL must be http or https".to_string()];
        let now = jiff::Timestamp::UNIX_EPOCH;
        let ev = invalid_targets_event(&cm, &problems, now);
        assert_eq!(ev.reason.as_deref(), Some(INVALID_TARGETS_REASON));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        let regarding = ev.regarding.clone().unwrap();
        assert_eq!(
            (regarding.kind.as_deref(), regarding.uid.as_deref()),
            (Some("ConfigMap"), Some("u-1"))
        );
        assert!(
            ev.note.as_deref().unwrap().contains("team-a/chat: urlSecret"),
            "{:?}",
            ev.note
        );
        // The same version and problems: the same name (created once); a new version: another.
        assert_eq!(
            invalid_targets_event(&cm, &problems, now).metadata.name,
            ev.metadata.name
        );
        let mut newer = cm.clone();
        newer.metadata.resource_version = Some("8".into());
        assert_ne!(
            invalid_targets_event(&newer, &problems, now).metadata.name,
            ev.metadata.name
        );
        // Bounded, whatever the list.
        let many: Vec<String> = (0..200)
            .map(|i| format!("target t{i}: urlSecret: Secret s{i} not found"))
            .collect();
        assert!(invalid_targets_event(&cm, &many, now).note.unwrap().len() <= 1024);
    }

    #[test]
    fn the_namespace_used_longest_ago_is_forgotten_first() {
        let mut entries = HashMap::new();
        for (ns, used) in [("a", 3), ("b", 1), ("c", 2)] {
            entries.insert(
                ns.to_string(),
                Entry {
                    last_used: used,
                    ..Default::default()
                },
            );
        }
        evict_oldest(&mut entries);
        let mut left: Vec<_> = entries.keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["a", "c"]);
    }
}
