//! The parts of a runner pod that are CAPTF's own (docs/runner.md): the volumes, mount paths,
//! labels and annotations the Job builder sets and `spec.jobs` may not collide with. The
//! builder (controller) and validation (webhook) both read them here.

use crate::keys;

/// Where the inputs Secret is mounted.
pub const INPUTS_DIR: &str = "/captf/inputs";
/// Where the Terraform CLI configuration is mounted (a directory holding [`CLI_CONFIG_FILE_NAME`]).
pub const CLI_CONFIG_DIR: &str = "/captf/terraform";
/// The file name of the Terraform CLI configuration under [`CLI_CONFIG_DIR`].
pub const CLI_CONFIG_FILE_NAME: &str = "terraform.rc";
/// Where the shared provider plugin cache is mounted.
pub const PLUGIN_CACHE_DIR: &str = "/captf/plugin-cache";
/// The runner's work directory (an emptyDir).
pub const WORK_DIR: &str = "/work";
/// The runner's temporary directory (an emptyDir).
pub const TMP_DIR: &str = "/tmp";

/// Volume names the builder uses.
pub const VOLUME_INPUTS: &str = "inputs";
pub const VOLUME_WORK: &str = "work";
pub const VOLUME_TMP: &str = "tmp";
pub const VOLUME_CLI_CONFIG: &str = "terraform-cli-config";
pub const VOLUME_PLUGIN_CACHE: &str = "plugin-cache";

/// Every volume name of CAPTF's own; `spec.jobs.volumes` and `volumeMounts` may use none.
pub const RESERVED_VOLUME_NAMES: [&str; 5] = [
    VOLUME_INPUTS,
    VOLUME_WORK,
    VOLUME_TMP,
    VOLUME_CLI_CONFIG,
    VOLUME_PLUGIN_CACHE,
];

/// Directories CAPTF mounts into (or under); a tenant mount may be none of them, nor above or
/// below one.
pub const RESERVED_MOUNT_ROOTS: [&str; 3] = ["/captf", WORK_DIR, TMP_DIR];

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
    fn reserved_labels_are_the_captf_ones_and_the_cluster_label() {
        assert!(is_reserved_label("captf.io/op"));
        assert!(is_reserved_label("cluster.x-k8s.io/cluster-name"));
        assert!(!is_reserved_label("team"));
        assert!(!is_reserved_label("azure.workload.identity/use"));
        assert!(is_reserved_annotation("captf.io/reason"));
        assert!(!is_reserved_annotation("cluster.x-k8s.io/cluster-name"));
    }
}
