//! The `spec.jobs` fields that shape the runner pod: each rejection names its field path.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use captf_shared::types::{CaptfObject, JobsSpec, ModuleSpec, TerraformCluster, TerraformClusterSpec, TerraformSpec};
use captf_shared::validation::validate_create;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, EmptyDirVolumeSource, EnvFromSource, HostPathVolumeSource,
    LocalObjectReference, SecretEnvSource, Volume, VolumeMount,
};
use serde_json::{Value, json};

fn with_jobs(jobs: JobsSpec) -> CaptfObject {
    CaptfObject::Cluster(TerraformCluster::new(
        "prod-eu",
        TerraformClusterSpec {
            terraform: TerraformSpec {
                module: ModuleSpec {
                    source: "git::https://example.com/modules/vpc.git?ref=v1.2.0".into(),
                    ..Default::default()
                },
                jobs: Some(jobs),
                ..Default::default()
            },
            control_plane_endpoint: None,
            exports: None,
        },
    ))
}

/// The fields of every violation.
fn fields(jobs: JobsSpec) -> Vec<String> {
    validate_create(&with_jobs(jobs))
        .violations
        .into_iter()
        .map(|v| v.field)
        .collect()
}

#[track_caller]
fn rejected_at(jobs: JobsSpec, field: &str) -> String {
    let r = validate_create(&with_jobs(jobs));
    assert_eq!(
        r.violations.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
        [field],
        "{}",
        r.message()
    );
    r.message()
}

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

#[test]
fn every_pod_field_accepts_a_plain_value() {
    let jobs = JobsSpec {
        pod_labels: map(&[("team", "net"), ("azure.workload.identity/use", "true")]),
        pod_annotations: map(&[("eks.amazonaws.com/skip-containers", "sidecar")]),
        volumes: Some(vec![Volume {
            name: "ca".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "ca-bundle".into(),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        volume_mounts: Some(vec![mount("ca", "/etc/ssl/custom")]),
        priority_class_name: Some("platform-batch".into()),
        image_pull_secrets: Some(vec![LocalObjectReference {
            name: "registry-creds".into(),
        }]),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "aws-settings".into(),
                optional: None,
            }),
            prefix: Some("TF_VAR_".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(fields(jobs), Vec::<String>::new());
}

#[test]
fn pod_labels_may_not_set_the_controllers_keys() {
    for key in ["captf.io/op", "captf.io/anything", "cluster.x-k8s.io/cluster-name"] {
        let msg = rejected_at(
            JobsSpec {
                pod_labels: map(&[(key, "x")]),
                ..Default::default()
            },
            &format!("spec.jobs.podLabels[{key}]"),
        );
        assert!(msg.contains("is the controller's"), "{msg}");
    }
}

#[test]
fn pod_annotations_may_not_set_the_controllers_keys() {
    let msg = rejected_at(
        JobsSpec {
            pod_annotations: map(&[("captf.io/reason", "x")]),
            ..Default::default()
        },
        "spec.jobs.podAnnotations[captf.io/reason]",
    );
    assert!(msg.contains("is the controller's"), "{msg}");
}

/// An AppArmor (or legacy seccomp) annotation would lift the runner container's profile.
#[test]
fn pod_annotations_may_not_set_a_containers_security_profile() {
    for key in [
        "container.apparmor.security.beta.kubernetes.io/runner",
        "seccomp.security.alpha.kubernetes.io/pod",
    ] {
        let msg = rejected_at(
            JobsSpec {
                pod_annotations: map(&[(key, "unconfined")]),
                ..Default::default()
            },
            &format!("spec.jobs.podAnnotations[{key}]"),
        );
        assert!(msg.contains("security profile"), "{msg}");
    }
}

#[test]
fn pod_label_keys_and_values_must_be_valid() {
    rejected_at(
        JobsSpec {
            pod_labels: map(&[("bad key", "x")]),
            ..Default::default()
        },
        r#"spec.jobs.podLabels["bad key"]"#,
    );
    let msg = rejected_at(
        JobsSpec {
            pod_labels: map(&[("team", "not a value")]),
            ..Default::default()
        },
        "spec.jobs.podLabels[team]",
    );
    assert!(msg.contains("63 characters"), "{msg}");
}

#[test]
fn host_path_volumes_are_refused() {
    let msg = rejected_at(
        JobsSpec {
            volumes: Some(vec![Volume {
                name: "node".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/var/run/docker.sock".into(),
                    type_: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
        "spec.jobs.volumes[0].hostPath",
    );
    assert!(msg.contains("node's filesystem"), "{msg}");
}

/// A runner pod may use only the volume sources Pod Security's `restricted` profile allows: the
/// node-reaching and storage-by-address sources a tenant could use to leave its namespace are
/// refused, each at its own field.
#[test]
fn volume_sources_outside_the_restricted_profile_are_refused_each_at_its_field() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "gitRepo",
            json!({"repository": "https://example.com/evil.git", "directory": "."}),
        ),
        ("flexVolume", json!({"driver": "example.com/exec"})),
        ("nfs", json!({"server": "10.0.0.1", "path": "/exports"})),
        (
            "iscsi",
            json!({"targetPortal": "10.0.0.2:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0}),
        ),
        ("hostPath", json!({"path": "/var/run/docker.sock"})),
        ("cephfs", json!({"monitors": ["10.0.0.3:6789"]})),
        ("awsElasticBlockStore", json!({"volumeID": "vol-1"})),
    ];
    for (source, value) in cases {
        let volume: Volume = serde_json::from_value(json!({"name": "x", source: value})).unwrap();
        let msg = rejected_at(
            JobsSpec {
                volumes: Some(vec![volume]),
                ..Default::default()
            },
            &format!("spec.jobs.volumes[0].{source}"),
        );
        assert!(msg.contains("restricted profile allows (configMap, csi"), "{msg}");
    }
}

#[test]
fn every_volume_source_the_restricted_profile_allows_is_accepted() {
    let allowed: Vec<(&str, Value)> = vec![
        ("configMap", json!({"name": "ca"})),
        ("csi", json!({"driver": "secrets-store.csi.k8s.io", "readOnly": true})),
        (
            "downwardAPI",
            json!({"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}),
        ),
        ("emptyDir", json!({})),
        (
            "ephemeral",
            json!({"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}),
        ),
        ("persistentVolumeClaim", json!({"claimName": "cache"})),
        (
            "projected",
            json!({"sources": [{"serviceAccountToken": {"path": "token", "audience": "sts.amazonaws.com"}}]}),
        ),
        ("secret", json!({"secretName": "ca-bundle"})),
    ];
    assert_eq!(allowed.len(), captf_shared::pod::ALLOWED_VOLUME_SOURCES.len());
    let volumes: Vec<Volume> = allowed
        .into_iter()
        .enumerate()
        .map(|(i, (source, value))| serde_json::from_value(json!({"name": format!("v{i}"), source: value})).unwrap())
        .collect();
    let f = fields(JobsSpec {
        volumes: Some(volumes),
        ..Default::default()
    });
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn volume_names_may_not_be_captfs_own() {
    for name in ["inputs", "work", "tmp", "terraform-cli-config"] {
        let msg = rejected_at(
            JobsSpec {
                volumes: Some(vec![empty_dir(name)]),
                ..Default::default()
            },
            "spec.jobs.volumes[0].name",
        );
        assert!(msg.contains("runner's own volumes"), "{msg}");
    }
}

#[test]
fn volume_names_are_unique_dns_labels() {
    rejected_at(
        JobsSpec {
            volumes: Some(vec![empty_dir("a.b")]),
            ..Default::default()
        },
        "spec.jobs.volumes[0].name",
    );
    let msg = rejected_at(
        JobsSpec {
            volumes: Some(vec![empty_dir("cache"), empty_dir("cache")]),
            ..Default::default()
        },
        "spec.jobs.volumes[1].name",
    );
    assert!(msg.contains("unique"), "{msg}");
}

#[test]
fn volume_mounts_may_not_name_captfs_volumes_or_unknown_ones() {
    let msg = rejected_at(
        JobsSpec {
            volume_mounts: Some(vec![mount("inputs", "/elsewhere")]),
            ..Default::default()
        },
        "spec.jobs.volumeMounts[0].name",
    );
    assert!(msg.contains("runner's own volumes"), "{msg}");
    let msg = rejected_at(
        JobsSpec {
            volumes: Some(vec![empty_dir("cache")]),
            volume_mounts: Some(vec![mount("cahce", "/cache")]),
            ..Default::default()
        },
        "spec.jobs.volumeMounts[0].name",
    );
    assert!(msg.contains("must name one of spec.jobs.volumes"), "{msg}");
}

#[test]
fn volume_mount_paths_may_not_collide_with_captfs_mounts() {
    for path in ["/work", "/work/.terraform", "/tmp/", "/captf", "/captf/inputs", "/"] {
        let msg = rejected_at(
            JobsSpec {
                volumes: Some(vec![empty_dir("cache")]),
                volume_mounts: Some(vec![mount("cache", path)]),
                ..Default::default()
            },
            "spec.jobs.volumeMounts[0].mountPath",
        );
        assert!(msg.contains("must not be, contain or lie inside"), "{path}: {msg}");
    }
    rejected_at(
        JobsSpec {
            volumes: Some(vec![empty_dir("cache")]),
            volume_mounts: Some(vec![mount("cache", "relative/path")]),
            ..Default::default()
        },
        "spec.jobs.volumeMounts[0].mountPath",
    );
    let msg = rejected_at(
        JobsSpec {
            volumes: Some(vec![empty_dir("cache")]),
            volume_mounts: Some(vec![mount("cache", "/cache"), mount("cache", "/cache/")]),
            ..Default::default()
        },
        "spec.jobs.volumeMounts[1].mountPath",
    );
    assert!(msg.contains("unique"), "{msg}");
}

#[test]
fn env_from_needs_exactly_one_source_and_no_captf_prefix() {
    rejected_at(
        JobsSpec {
            env_from: Some(vec![EnvFromSource::default()]),
            ..Default::default()
        },
        "spec.jobs.envFrom[0]",
    );
    let msg = rejected_at(
        JobsSpec {
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "creds".into(),
                    optional: None,
                }),
                prefix: Some("CAPTF_".into()),
                ..Default::default()
            }]),
            ..Default::default()
        },
        "spec.jobs.envFrom[0].prefix",
    );
    assert!(msg.contains("reserved for the runner"), "{msg}");
    rejected_at(
        JobsSpec {
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: "Not_A_Name".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
        "spec.jobs.envFrom[0].secretRef.name",
    );
}

#[test]
fn the_terraform_cli_config_names_a_configmap_and_a_data_key() {
    use captf_shared::types::CliConfigRef;
    let with = |name: &str, key: Option<&str>| JobsSpec {
        terraform_cli_config: Some(CliConfigRef {
            name: name.into(),
            key: key.map(str::to_string),
        }),
        ..Default::default()
    };
    assert_eq!(fields(with("terraform-mirror", None)), Vec::<String>::new());
    assert_eq!(fields(with("terraform-mirror", Some("cli.tfrc"))), Vec::<String>::new());
    rejected_at(with("Mirror_Config", None), "spec.jobs.terraformCliConfig.name");
    rejected_at(with("terraform-mirror", Some("..")), "spec.jobs.terraformCliConfig.key");
}

#[test]
fn priority_class_and_image_pull_secret_names_are_dns_subdomains() {
    rejected_at(
        JobsSpec {
            priority_class_name: Some("Bad_Name".into()),
            ..Default::default()
        },
        "spec.jobs.priorityClassName",
    );
    rejected_at(
        JobsSpec {
            image_pull_secrets: Some(vec![LocalObjectReference { name: "".into() }]),
            ..Default::default()
        },
        "spec.jobs.imagePullSecrets[0].name",
    );
}
