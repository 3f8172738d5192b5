//! The runner pods CAPTF builds pass Pod Security's `restricted` profile, so a namespace labelled
//! `pod-security.kubernetes.io/enforce: restricted` admits them (docs/trust.md).
//!
//! [`restricted_violations`] is the profile written out from the Pod Security Standards'
//! published rules (kubernetes.io/docs/concepts/security/pod-security-standards, "latest"), over
//! the pod spec's JSON, every container kind included (`containers`, `initContainers`,
//! `ephemeralContainers`). The rules checked, baseline then restricted:
//!
//! | rule | allowed |
//! | --- | --- |
//! | HostProcess | `securityContext.windowsOptions.hostProcess` unset or false (pod and containers) |
//! | Host namespaces | `hostNetwork`, `hostPID`, `hostIPC` unset or false |
//! | Privileged containers | `securityContext.privileged` unset or false |
//! | Capabilities (baseline) | `capabilities.add` only from the baseline's list |
//! | HostPath volumes | none |
//! | Host ports | `ports[].hostPort` unset or 0 |
//! | AppArmor | `appArmorProfile.type` unset, `RuntimeDefault` or `Localhost` (pod and containers); the beta annotations `runtime/default` or `localhost/*` |
//! | SELinux | `seLinuxOptions.type` unset or one of the container types; `user` and `role` unset |
//! | /proc mount type | `procMount` unset or `Default` |
//! | Seccomp (baseline) | `seccompProfile.type` never `Unconfined` |
//! | Sysctls | only the safe set |
//! | Volume types (restricted) | only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, secret |
//! | Privilege escalation | `allowPrivilegeEscalation` false on every container |
//! | Running as non-root | `runAsNonRoot` true on the pod, or on every container; never false on a container |
//! | Running as non-root user | `runAsUser` never 0 (pod and containers) |
//! | Seccomp (restricted) | `seccompProfile.type` `RuntimeDefault` or `Localhost` on the pod, or on every container |
//! | Capabilities (restricted) | every container drops `ALL`; adds at most `NET_BIND_SERVICE` |
//!
//! Not checked, as they cannot occur in a pod spec CAPTF builds for Linux: the Windows-only
//! exemptions (`spec.os.name: windows` relaxes some restricted rules; CAPTF never sets it).
#![allow(clippy::unwrap_used)]

use captf_core::Reason;
use captf_core::decide::Start;
use captf_core::job::{JobParams, RunnerPodDefaults, build_job};
use captf_shared::types::{JobsSpec, StateEncryption, TerraformSpec};
use captf_shared::{Kind, Op, defaults};
use serde_json::{Value, json};

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

/// Every way `pod` (a Pod's `metadata` and `spec`, as JSON) breaks the `restricted` profile, one
/// line per rule and place.
fn restricted_violations(metadata: &Value, spec: &Value) -> Vec<String> {
    let mut out = vec![];
    let psc = &spec["securityContext"];
    let containers: Vec<(String, &Value)> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| {
            spec[*k]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .map(move |(i, c)| (format!("{k}[{i}]"), c))
        })
        .collect();

    // Baseline.
    if is_true(&psc["windowsOptions"]["hostProcess"]) {
        out.push("HostProcess: spec.securityContext".into());
    }
    for ns in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(&spec[ns]) {
            out.push(format!("Host namespaces: spec.{ns}"));
        }
    }
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        if !v["hostPath"].is_null() {
            out.push(format!("HostPath volumes: spec.volumes[{i}]"));
        }
        for (k, _) in v.as_object().into_iter().flatten() {
            if k != "name" && !RESTRICTED_VOLUMES.contains(&k.as_str()) {
                out.push(format!("Volume types: spec.volumes[{i}].{k}"));
            }
        }
    }
    let apparmor_ok = |p: &Value| p.is_null() || matches!(p["type"].as_str(), Some("RuntimeDefault" | "Localhost"));
    if !apparmor_ok(&psc["appArmorProfile"]) {
        out.push("AppArmor: spec.securityContext.appArmorProfile".into());
    }
    for (k, v) in metadata["annotations"].as_object().into_iter().flatten() {
        if k.starts_with("container.apparmor.security.beta.kubernetes.io/") {
            let v = v.as_str().unwrap_or_default();
            if v != "runtime/default" && !v.starts_with("localhost/") {
                out.push(format!("AppArmor: metadata.annotations[{k}]"));
            }
        }
    }
    let selinux_ok = |o: &Value| {
        o.is_null()
            || (o["type"].as_str().is_none_or(|t| SELINUX_TYPES.contains(&t))
                && o["user"].is_null()
                && o["role"].is_null())
    };
    if !selinux_ok(&psc["seLinuxOptions"]) {
        out.push("SELinux: spec.securityContext.seLinuxOptions".into());
    }
    if psc["seccompProfile"]["type"].as_str() == Some("Unconfined") {
        out.push("Seccomp: spec.securityContext.seccompProfile".into());
    }
    for s in psc["sysctls"].as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!("Sysctls: {name}"));
        }
    }
    for (at, c) in &containers {
        let sc = &c["securityContext"];
        if is_true(&sc["windowsOptions"]["hostProcess"]) {
            out.push(format!("HostProcess: {at}"));
        }
        if is_true(&sc["privileged"]) {
            out.push(format!("Privileged containers: {at}"));
        }
        for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
            let cap = cap.as_str().unwrap_or_default();
            if !BASELINE_CAPABILITIES.contains(&cap) {
                out.push(format!("Capabilities (baseline): {at} adds {cap}"));
            }
            if cap != "NET_BIND_SERVICE" {
                out.push(format!("Capabilities (restricted): {at} adds {cap}"));
            }
        }
        for p in c["ports"].as_array().into_iter().flatten() {
            if p["hostPort"].as_i64().is_some_and(|h| h != 0) {
                out.push(format!("Host ports: {at}"));
            }
        }
        if !apparmor_ok(&sc["appArmorProfile"]) {
            out.push(format!("AppArmor: {at}"));
        }
        if !selinux_ok(&sc["seLinuxOptions"]) {
            out.push(format!("SELinux: {at}"));
        }
        if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
            out.push(format!("/proc mount type: {at}"));
        }
        // Restricted.
        if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            out.push(format!("Privilege escalation: {at}"));
        }
        let non_root = &sc["runAsNonRoot"];
        if non_root.as_bool() == Some(false) || (non_root.is_null() && !is_true(&psc["runAsNonRoot"])) {
            out.push(format!("Running as non-root: {at}"));
        }
        if sc["runAsUser"].as_i64() == Some(0) {
            out.push(format!("Running as non-root user: {at}"));
        }
        match sc["seccompProfile"]["type"].as_str() {
            Some("Unconfined") => out.push(format!("Seccomp: {at}")),
            None if !matches!(
                psc["seccompProfile"]["type"].as_str(),
                Some("RuntimeDefault" | "Localhost")
            ) =>
            {
                out.push(format!("Seccomp (restricted): {at} sets none and the pod neither"))
            }
            _ => {}
        }
        let drops = sc["capabilities"]["drop"].as_array().into_iter().flatten();
        if !drops.into_iter().any(|d| d.as_str() == Some("ALL")) {
            out.push(format!("Capabilities (restricted): {at} does not drop ALL"));
        }
    }
    if psc["runAsUser"].as_i64() == Some(0) {
        out.push("Running as non-root user: spec.securityContext".into());
    }
    out
}

fn start(op: Op) -> Start {
    Start {
        op,
        reason: Reason::InputsChanged,
        attempt: 1,
        drift_remediation: false,
        force_unlock_id: None,
        approved_plan: None,
        approved_by: None,
        skipped_backoff: None,
    }
}

/// The runner pod (metadata and spec, as JSON) CAPTF builds for `op` and `jobs`.
fn runner_pod(op: Op, jobs: Option<JobsSpec>, module_credentials: Option<&str>) -> (Value, Value) {
    runner_pod_with(op, jobs, module_credentials, None)
}

fn runner_pod_with(
    op: Op,
    jobs: Option<JobsSpec>,
    module_credentials: Option<&str>,
    state_encryption: Option<&StateEncryption>,
) -> (Value, Value) {
    let spec = TerraformSpec {
        jobs: jobs.clone(),
        ..TerraformSpec::default()
    };
    let eff = defaults::effective(&spec);
    let s = start(op);
    let d = RunnerPodDefaults::default();
    let job = build_job(&JobParams {
        kind: Kind::TerraformCluster,
        namespace: "team-a",
        name: "prod-eu",
        uid: "uid-1",
        seq: 3,
        start: &s,
        effective: &eff,
        jobs: jobs.as_ref(),
        inputs_hash: "0123456789abcdef0123456789abcdef",
        cluster_name: Some("prod-eu"),
        runner_image: "ghcr.io/captf/runner:1",
        runner_service_account: None,
        sensitive_variables: &[],
        pod_defaults: &d,
        module_credentials,
        state_encryption,
        env_from_secret_names: &[],
    });
    let template = serde_json::to_value(job).unwrap()["spec"]["template"].clone();
    (template["metadata"].clone(), template["spec"].clone())
}

#[test]
fn every_runner_pod_passes_the_restricted_profile() {
    for op in Op::ALL {
        for credentials in [None, Some("git-ssh")] {
            let (meta, spec) = runner_pod(op, None, credentials);
            let v = restricted_violations(&meta, &spec);
            assert!(v.is_empty(), "{op:?} with credentials {credentials:?}: {v:?}");
        }
        let encryption: StateEncryption = serde_json::from_value(json!({
            "passphraseSecretRef": {"name": "state-key"},
            "previousPassphraseSecretRef": {"name": "old-key", "key": "k"},
        }))
        .unwrap();
        let (meta, spec) = runner_pod_with(op, None, None, Some(&encryption));
        let v = restricted_violations(&meta, &spec);
        assert!(v.is_empty(), "{op:?} with state encryption: {v:?}");
    }
}

/// With every pod field a spec may set (each allowed volume type, tolerations, a node selector,
/// a priority class, labels and annotations), the runner pod still passes: none of them can
/// weaken the runner's security context, not even an AppArmor annotation (which validation
/// refuses, and the Job builder drops should one reach it).
#[test]
fn a_runner_pod_with_every_tenant_pod_field_passes_the_restricted_profile() {
    let jobs: JobsSpec = serde_json::from_value(json!({
        "podLabels": {"team": "net"},
        "podAnnotations": {"container.apparmor.security.beta.kubernetes.io/runner": "unconfined"},
        "nodeSelector": {"pool": "infra"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
        "priorityClassName": "batch-low",
        "envFrom": [{"configMapRef": {"name": "settings"}}],
        "volumes": [
            {"name": "a", "configMap": {"name": "ca"}},
            {"name": "b", "csi": {"driver": "secrets-store.csi.k8s.io"}},
            {"name": "c", "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "d", "emptyDir": {}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
            {"name": "f", "persistentVolumeClaim": {"claimName": "cache"}},
            {"name": "g", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
            {"name": "h", "secret": {"secretName": "ca-bundle"}},
        ],
        "volumeMounts": [{"name": "a", "mountPath": "/etc/ca"}],
    }))
    .unwrap();
    let (meta, spec) = runner_pod(Op::Apply, Some(jobs), None);
    let v = restricted_violations(&meta, &spec);
    assert!(v.is_empty(), "{v:?}");
    assert_eq!(
        meta["annotations"].get("container.apparmor.security.beta.kubernetes.io/runner"),
        None,
        "a spec's annotation cannot unconfine the runner: {meta}"
    );
    assert_eq!(spec["volumes"].as_array().unwrap().len(), 3 + 8, "{spec}");
}

/// The check finds what it is for: a pod spec that breaks each rule is reported for each.
#[test]
fn the_restricted_check_reports_each_rule_a_pod_breaks() {
    let meta = json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}});
    let spec = json!({
        "hostNetwork": true,
        "hostPID": true,
        "hostIPC": true,
        "securityContext": {
            "runAsUser": 0,
            "seccompProfile": {"type": "Unconfined"},
            "sysctls": [{"name": "kernel.msgmax", "value": "1"}],
            "seLinuxOptions": {"type": "spc_t"},
            "windowsOptions": {"hostProcess": true},
            "appArmorProfile": {"type": "Unconfined"},
        },
        "volumes": [{"name": "n", "hostPath": {"path": "/"}}, {"name": "g", "gitRepo": {"repository": "r"}}],
        "containers": [{
            "name": "c",
            "ports": [{"containerPort": 80, "hostPort": 80}],
            "securityContext": {
                "privileged": true,
                "procMount": "Unmasked",
                "capabilities": {"add": ["SYS_ADMIN"]},
            },
        }],
        "initContainers": [{"name": "i", "securityContext": {"runAsNonRoot": false, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    });
    let v = restricted_violations(&meta, &spec);
    for rule in [
        "HostProcess: spec.securityContext",
        "Host namespaces: spec.hostNetwork",
        "Host namespaces: spec.hostPID",
        "Host namespaces: spec.hostIPC",
        "HostPath volumes: spec.volumes[0]",
        "Volume types: spec.volumes[0].hostPath",
        "Volume types: spec.volumes[1].gitRepo",
        "AppArmor: spec.securityContext.appArmorProfile",
        "AppArmor: metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]",
        "SELinux: spec.securityContext.seLinuxOptions",
        "Seccomp: spec.securityContext.seccompProfile",
        "Sysctls: kernel.msgmax",
        "Privileged containers: containers[0]",
        "Capabilities (baseline): containers[0] adds SYS_ADMIN",
        "Capabilities (restricted): containers[0] adds SYS_ADMIN",
        "Host ports: containers[0]",
        "/proc mount type: containers[0]",
        "Privilege escalation: containers[0]",
        "Running as non-root: containers[0]",
        "Seccomp (restricted): containers[0] sets none and the pod neither",
        "Capabilities (restricted): containers[0] does not drop ALL",
        "Running as non-root: initContainers[0]",
        "Seccomp (restricted): initContainers[0] sets none and the pod neither",
        "Running as non-root user: spec.securityContext",
    ] {
        assert!(v.iter().any(|f| f == rule), "{rule} missing from {v:#?}");
    }
}
