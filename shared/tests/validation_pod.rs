//! The `spec.jobs` fields that shape the runner pod: each rejection names its field path.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use captf_shared::types::{CaptfObject, JobsSpec, ModuleSpec, TerraformCluster, TerraformClusterSpec, TerraformSpec};
use captf_shared::validation::validate_create;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, EmptyDirVolumeSource, EnvFromSource, HostPathVolumeSource,
    LocalObjectReference, SecretEnvSource, Volume, VolumeMount,
};

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
