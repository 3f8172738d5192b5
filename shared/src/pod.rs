//! The parts of a runner pod that are CAPTF's own (docs/runner.md): the volumes, mount paths,
//! labels and annotations the Job builder sets and `spec.jobs` may not collide with. The
//! builder (controller) and validation (webhook) both read them here.

use crate::keys;
use crate::types::{CliConfigRef, JobsSpec};

/// Where the inputs Secret is mounted.
pub const INPUTS_DIR: &str = "/captf/inputs";
/// Where the Terraform CLI configuration is mounted (a directory holding [`CLI_CONFIG_FILE_NAME`]).
pub const CLI_CONFIG_DIR: &str = "/captf/terraform";
/// The file name of the Terraform CLI configuration under [`CLI_CONFIG_DIR`].
pub const CLI_CONFIG_FILE_NAME: &str = "terraform.rc";
/// The ConfigMap key of the Terraform CLI configuration when a reference names none.
pub const DEFAULT_CLI_CONFIG_KEY: &str = crate::types::DEFAULT_CLI_CONFIG_MAP_KEY;
/// The environment variable Terraform and OpenTofu read the CLI configuration's path from.
pub const TF_CLI_CONFIG_FILE: &str = "TF_CLI_CONFIG_FILE";
/// The runner's work directory (an emptyDir).
pub const WORK_DIR: &str = "/work";
/// The runner's temporary directory (an emptyDir).
pub const TMP_DIR: &str = "/tmp";

/// Volume names the builder uses.
pub const VOLUME_INPUTS: &str = "inputs";
pub const VOLUME_WORK: &str = "work";
pub const VOLUME_TMP: &str = "tmp";
pub const VOLUME_CLI_CONFIG: &str = "terraform-cli-config";
pub const VOLUME_MODULE_CREDENTIALS: &str = crate::module_credentials::VOLUME;
pub const VOLUME_STATE_ENCRYPTION: &str = crate::state_encryption::VOLUME;

/// Every volume name of CAPTF's own; `spec.jobs.volumes` and `volumeMounts` may use none.
pub const RESERVED_VOLUME_NAMES: [&str; 6] = [
    VOLUME_INPUTS,
    VOLUME_WORK,
    VOLUME_TMP,
    VOLUME_CLI_CONFIG,
    VOLUME_MODULE_CREDENTIALS,
    VOLUME_STATE_ENCRYPTION,
];

/// Directories CAPTF mounts into (or under); a tenant mount may be none of them, nor above or
/// below one.
pub const RESERVED_MOUNT_ROOTS: [&str; 3] = ["/captf", WORK_DIR, TMP_DIR];

/// Where a runner's Terraform CLI configuration comes from, and the field to name when it is
/// missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliConfigSource<'a> {
    pub config: &'a CliConfigRef,
    /// `spec.jobs.terraformCliConfig` (with the spec's path prefix), or the controller flag.
    pub field: String,
}

/// The controller flag naming the platform's default Terraform CLI configuration ConfigMap.
pub const CLI_CONFIG_FLAG: &str = "--runner-terraform-cli-config";

/// `spec.jobs.terraformCliConfig`, else the platform default (`--runner-terraform-cli-config`).
pub fn cli_config<'a>(
    jobs: Option<&'a JobsSpec>,
    platform: Option<&'a CliConfigRef>,
    spec_path: &str,
) -> Option<CliConfigSource<'a>> {
    match jobs.and_then(|j| j.terraform_cli_config.as_ref()) {
        Some(config) => Some(CliConfigSource {
            config,
            field: format!("{spec_path}.jobs.terraformCliConfig"),
        }),
        None => platform.map(|config| CliConfigSource {
            config,
            field: CLI_CONFIG_FLAG.to_string(),
        }),
    }
}

/// Why the runner's CLI configuration cannot be mounted (`data`: the ConfigMap's data and
/// binaryData keys, `None` when it does not exist), naming the field that chose it; `None` when
/// it can.
pub fn cli_config_problem(
    source: &CliConfigSource<'_>,
    namespace: &str,
    data_keys: Option<&[String]>,
) -> Option<String> {
    let (name, key) = (&source.config.name, source.config.key_or_default());
    match data_keys {
        None => Some(format!(
            "{}: ConfigMap {namespace}/{name} does not exist (yet); runner pods need it for the Terraform CLI configuration",
            source.field
        )),
        Some(keys) if !keys.iter().any(|k| k == key) => Some(format!(
            "{}: ConfigMap {namespace}/{name} has no key {key:?} (the Terraform CLI configuration)",
            source.field
        )),
        Some(_) => None,
    }
}

/// The volume sources a runner pod may use: the ones Pod Security's `restricted` profile allows
/// (its "Volume Types" rule). CAPTF's own volumes need nothing else (a Secret, two emptyDirs and
/// a ConfigMap). Everything else reaches the node or storage the namespace does not own:
/// `hostPath` the node's files, `gitRepo` runs git on the node as root (CVE-2024-10220 on
/// unpatched kubelets), `flexVolume` runs a node binary, `nfs`, `iscsi` and the in-tree cloud
/// disks attach storage by address, whoever owns it.
pub const ALLOWED_VOLUME_SOURCES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The sources a volume sets that [`ALLOWED_VOLUME_SOURCES`] does not list: each JSON field
/// name with its value, sorted by name. Read from the volume's JSON, so a source added to the
/// Kubernetes API later is refused until it is listed here.
pub fn disallowed_volume_sources(volume: &k8s_openapi::api::core::v1::Volume) -> Vec<(String, serde_json::Value)> {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(fields)) => fields
            .into_iter()
            .filter(|(k, v)| k != "name" && !v.is_null() && !ALLOWED_VOLUME_SOURCES.contains(&k.as_str()))
            .collect(),
        // A Volume always serializes to an object; refuse anything else outright.
        _ => vec![("<unreadable volume>".to_string(), serde_json::Value::Null)],
    }
}

/// Label and annotation keys with this prefix are the controller's.
pub const RESERVED_KEY_PREFIX: &str = "captf.io/";

/// Whether a pod label key is the controller's (`captf.io/…` or the Cluster API cluster label).
pub fn is_reserved_label(key: &str) -> bool {
    key.starts_with(RESERVED_KEY_PREFIX) || key == keys::LABEL_CLUSTER_NAME
}

/// Whether a pod annotation key is the controller's (`captf.io/…`).
pub fn is_reserved_annotation(key: &str) -> bool {
    key.starts_with(RESERVED_KEY_PREFIX)
}

/// Pod annotation key prefixes that set a container's security profile: AppArmor's beta
/// annotations (`unconfined` would lift the runner's profile) and the removed seccomp ones
/// (still read by older kubelets). No spec may set them; the runner's profiles are CAPTF's.
pub const SECURITY_ANNOTATION_PREFIXES: [&str; 3] = [
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
];

/// Whether a pod annotation key sets a security profile ([`SECURITY_ANNOTATION_PREFIXES`]).
pub fn is_security_annotation(key: &str) -> bool {
    SECURITY_ANNOTATION_PREFIXES
        .iter()
        .any(|p| key.starts_with(p) || key == p.trim_end_matches('/'))
}

/// The reserved mount root `path` collides with: equal to it, above it or below it (after
/// dropping trailing `/` and empty or `.` segments).
pub fn reserved_mount_collision(path: &str) -> Option<&'static str> {
    let segments = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .map(str::to_string)
            .collect()
    };
    let mine = segments(path);
    RESERVED_MOUNT_ROOTS.into_iter().find(|root| {
        let theirs = segments(root);
        let n = mine.len().min(theirs.len());
        mine[..n] == theirs[..n]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_collides_with_a_reserved_root_above_at_or_below_it() {
        assert_eq!(reserved_mount_collision("/work"), Some("/work"));
        assert_eq!(reserved_mount_collision("/work/"), Some("/work"));
        assert_eq!(reserved_mount_collision("/work/cache"), Some("/work"));
        assert_eq!(reserved_mount_collision("/captf/inputs"), Some("/captf"));
        assert_eq!(reserved_mount_collision("//tmp/./x"), Some("/tmp"));
        assert_eq!(reserved_mount_collision("/"), Some("/captf"), "/ is above every root");
        assert_eq!(reserved_mount_collision("/workspace"), None);
        assert_eq!(reserved_mount_collision("/etc/ssl/certs"), None);
        assert_eq!(reserved_mount_collision("/var/run/secrets/eks.amazonaws.com"), None);
    }

    #[test]
    fn the_spec_cli_config_wins_over_the_platform_default_and_a_missing_one_is_named() {
        let platform = CliConfigRef {
            name: "terraform-mirror".into(),
            key: None,
        };
        let jobs = JobsSpec {
            terraform_cli_config: Some(CliConfigRef {
                name: "own".into(),
                key: Some("cli.tfrc".into()),
            }),
            ..JobsSpec::default()
        };
        let own = cli_config(Some(&jobs), Some(&platform), "spec").unwrap();
        assert_eq!(
            (own.config.name.as_str(), own.field.as_str()),
            ("own", "spec.jobs.terraformCliConfig")
        );
        let default = cli_config(None, Some(&platform), "spec").unwrap();
        assert_eq!(default.field, CLI_CONFIG_FLAG);
        assert_eq!(default.config.key_or_default(), "terraform.rc");
        assert_eq!(cli_config(None, None, "spec"), None);

        let missing = cli_config_problem(&own, "team-a", None).unwrap();
        assert!(
            missing.starts_with("spec.jobs.terraformCliConfig: ConfigMap team-a/own does not exist"),
            "{missing}"
        );
        let no_key = cli_config_problem(&own, "team-a", Some(&["terraform.rc".to_string()])).unwrap();
        assert!(no_key.contains("has no key \"cli.tfrc\""), "{no_key}");
        assert_eq!(
            cli_config_problem(&own, "team-a", Some(&["cli.tfrc".to_string()])),
            None
        );
        let flag = cli_config_problem(&default, "team-a", None).unwrap();
        assert!(flag.starts_with("--runner-terraform-cli-config: "), "{flag}");
    }

    #[test]
    fn only_the_restricted_profiles_volume_sources_are_allowed() {
        use k8s_openapi::api::core::v1::{
            EmptyDirVolumeSource, GitRepoVolumeSource, HostPathVolumeSource, NFSVolumeSource, Volume,
        };
        let empty = Volume {
            name: "cache".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        };
        assert!(disallowed_volume_sources(&empty).is_empty());
        let both = Volume {
            name: "x".into(),
            git_repo: Some(GitRepoVolumeSource {
                repository: "https://example.com/r.git".into(),
                ..GitRepoVolumeSource::default()
            }),
            nfs: Some(NFSVolumeSource {
                server: "10.0.0.1".into(),
                path: "/".into(),
                read_only: None,
            }),
            host_path: Some(HostPathVolumeSource {
                path: "/".into(),
                type_: None,
            }),
            ..Volume::default()
        };
        let names: Vec<String> = disallowed_volume_sources(&both).into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["gitRepo", "hostPath", "nfs"]);
    }

    #[test]
    fn reserved_labels_are_the_captf_ones_and_the_cluster_label() {
        assert!(is_reserved_label("captf.io/op"));
        assert!(is_reserved_label("cluster.x-k8s.io/cluster-name"));
        assert!(!is_reserved_label("team"));
        assert!(!is_reserved_label("azure.workload.identity/use"));
        assert!(is_reserved_annotation("captf.io/reason"));
        assert!(!is_reserved_annotation("cluster.x-k8s.io/cluster-name"));
        assert!(is_security_annotation(
            "container.apparmor.security.beta.kubernetes.io/runner"
        ));
        assert!(is_security_annotation("seccomp.security.alpha.kubernetes.io/pod"));
        assert!(!is_security_annotation("eks.amazonaws.com/role-arn"));
    }
}
