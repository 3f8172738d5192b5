//! String formats the rules need: Terraform/OpenTofu module addresses, container image
//! references, Secret/ConfigMap data keys, Terraform variable names.

use std::sync::LazyLock;

use regex::Regex;

pub use crate::limits::VARIABLE_NAME_PATTERN;

/// A compiled pattern. The patterns are literals exercised by the tests below; were one ever
/// broken, it would match nothing (reject) rather than panic.
type Pattern = LazyLock<Option<Regex>>;

fn compile(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

fn is_match(re: &Pattern, s: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(s))
}

fn captured<'a>(re: &Pattern, s: &'a str, group: &str) -> Option<&'a str> {
    re.as_ref()?.captures(s)?.name(group).map(|m| m.as_str())
}

static VARIABLE_NAME: Pattern = LazyLock::new(|| compile(VARIABLE_NAME_PATTERN));

/// `^[A-Za-z_][A-Za-z0-9_-]*$`.
pub fn is_variable_name(s: &str) -> bool {
    is_match(&VARIABLE_NAME, s)
}

/// A Secret or ConfigMap data key (Kubernetes' `IsConfigMapKey`): at most 253 characters of
/// `[-._a-zA-Z0-9]`, not `.` or `..`, not starting with `..`.
pub fn is_data_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && s != "."
        && !s.starts_with("..")
}

/// A source `tofu init -from-module` would resolve on the runner's local disk.
pub fn is_local_path(s: &str) -> bool {
    s == "."
        || s == ".."
        || ["./", "../", "/", ".\\", "..\\", "file::", "file://"]
            .iter()
            .any(|p| s.starts_with(p))
}

/// Go-getter's forced getters that OpenTofu documents for module sources.
const FORCED_GETTERS: [&str; 4] = ["git", "hg", "s3", "gcs"];

/// Hosts go-getter handles itself; the registry parser refuses them as registry hosts.
const VCS_SHORTHAND_HOSTS: [&str; 2] = ["github.com", "bitbucket.org"];

/// `scheme://host…` with a non-empty host, for the schemes a remote source may use.
static REMOTE_URL: Pattern =
    LazyLock::new(|| compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]+@)?[^@/?#:]+(?::[0-9]+)?(?:[/?].*)?$"));

/// scp-like git address `user@host:path`.
static SCP_LIKE: Pattern = LazyLock::new(|| {
    compile(r"^[A-Za-z0-9_.-]+@[A-Za-z0-9][A-Za-z0-9.-]*:[^/].*$|^[A-Za-z0-9_.-]+@[A-Za-z0-9][A-Za-z0-9.-]*:/.+$")
});

/// Registry namespace and module name (terraform-registry-address).
static REGISTRY_PART: Pattern = LazyLock::new(|| compile(r"^[0-9A-Za-z](?:[0-9A-Za-z_-]{0,62}[0-9A-Za-z])?$"));

/// Registry target system (`aws`, `google`).
static REGISTRY_PROVIDER: Pattern = LazyLock::new(|| compile(r"^[0-9a-z]{1,64}$"));

/// A registry host name with an optional port: `registry.example.com`, `localhost:5000`.
static REGISTRY_HOST: Pattern = LazyLock::new(|| {
    compile(
        r"^(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+)(?::[0-9]{1,5})?$",
    )
});

fn is_remote_url(s: &str, schemes: &[&str]) -> bool {
    // The scheme is what comes before the first `://` (the pattern allows no `:` in it). Asking
    // the regex only whether it matches, not for a capture, keeps it on its fast engine: this
    // runs on every admission review.
    let Some((scheme, _)) = s.split_once("://") else {
        return false;
    };
    is_match(&REMOTE_URL, s)
        && if schemes.is_empty() {
            scheme != "file"
        } else {
            schemes.contains(&scheme)
        }
}

/// `owner/repo` (and more) after a VCS shorthand host.
fn has_owner_and_repo(rest: &str) -> bool {
    let path = rest.split(['?', '#']).next().unwrap_or("");
    let path = path.split("//").next().unwrap_or("");
    let mut segments = path.split('/');
    matches!((segments.next(), segments.next()), (Some(a), Some(b)) if !a.is_empty() && !b.is_empty())
}

/// A module registry address: `namespace/name/provider` or `host/namespace/name/provider`, with an
/// optional `//subdirectory`.
pub fn is_registry_address(s: &str) -> bool {
    let (addr, subdir) = match s.split_once("//") {
        Some((a, sub)) => (a, Some(sub)),
        None => (s, None),
    };
    if subdir.is_some_and(str::is_empty) {
        return false;
    }
    let parts: Vec<&str> = addr.split('/').collect();
    let (host, rest) = match parts.as_slice() {
        [ns, name, provider] => (None, [*ns, *name, *provider]),
        [host, ns, name, provider] => (Some(*host), [*ns, *name, *provider]),
        _ => return false,
    };
    if let Some(h) = host {
        let bare = h.split(':').next().unwrap_or(h).to_ascii_lowercase();
        if !is_match(&REGISTRY_HOST, h) || VCS_SHORTHAND_HOSTS.contains(&bare.as_str()) {
            return false;
        }
    }
    is_match(&REGISTRY_PART, rest[0]) && is_match(&REGISTRY_PART, rest[1]) && is_match(&REGISTRY_PROVIDER, rest[2])
}

/// Plausibly a remote module address `tofu init -from-module` accepts: a registry address,
/// `git::`/`hg::`/`s3::`/`gcs::` with a URL, `http(s)://`, `oci://`, `github.com/owner/repo`,
/// `bitbucket.org/owner/repo`, or `git@host:path`. Local paths are not module addresses here.
pub fn is_module_address(s: &str) -> bool {
    if s.is_empty() || is_local_path(s) {
        return false;
    }
    if let Some((getter, rest)) = s.split_once("::") {
        if !FORCED_GETTERS.contains(&getter) {
            return false;
        }
        return is_remote_url(rest, &[]) || (getter == "git" && is_match(&SCP_LIKE, rest));
    }
    if s.contains("://") {
        return is_remote_url(s, &["http", "https", "oci"]);
    }
    for host in VCS_SHORTHAND_HOSTS {
        if let Some(rest) = s.strip_prefix(host).and_then(|r| r.strip_prefix('/')) {
            return has_owner_and_repo(rest);
        }
    }
    if s.starts_with("git@") {
        return is_match(&SCP_LIKE, s);
    }
    is_registry_address(s)
}

/// The container image reference grammar of `distribution/reference`:
/// `[host[:port]/]path[:tag][@algorithm:hex]`, lowercase path components.
static IMAGE_REFERENCE: Pattern = LazyLock::new(|| {
    let alnum = "[a-z0-9]+";
    let separator = "(?:[._]|__|[-]+)";
    let path_component = format!("{alnum}(?:{separator}{alnum})*");
    let domain_component = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain_name = format!(r"{domain_component}(?:\.{domain_component})*");
    let ipv6 = r"\[(?:[a-fA-F0-9:]+)\]";
    let domain = format!("(?:{domain_name}|{ipv6})(?::[0-9]+)?");
    let name = format!("(?:{domain}/)?{path_component}(?:/{path_component})*");
    let tag = r"[\w][\w.-]{0,127}";
    let digest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    compile(&format!("^(?P<name>{name})(?::{tag})?(?:@{digest})?$"))
});

/// Maximum length of an image name (without tag and digest), as `distribution/reference` has it.
const MAX_IMAGE_NAME_LEN: usize = 255;

/// A valid container image reference (`registry.example.com:5000/captf/runner:1.2`,
/// `runner@sha256:…`).
pub fn is_image_reference(s: &str) -> bool {
    captured(&IMAGE_REFERENCE, s, "name").is_some_and(|name| name.len() <= MAX_IMAGE_NAME_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for re in [
            &VARIABLE_NAME,
            &REMOTE_URL,
            &SCP_LIKE,
            &REGISTRY_PART,
            &REGISTRY_PROVIDER,
            &REGISTRY_HOST,
            &IMAGE_REFERENCE,
        ] {
            assert!(re.is_some());
        }
    }

    #[test]
    fn module_addresses_opentofu_documents_are_accepted() {
        for ok in [
            "hashicorp/consul/aws",
            "terraform-aws-modules/vpc/aws",
            "app.terraform.io/example-corp/k8s-cluster/azurerm",
            "registry.example.com:8443/ns/name/aws",
            "hashicorp/consul/aws//modules/consul-cluster",
            "github.com/hashicorp/example",
            "github.com/hashicorp/example//subdir?ref=v1.2.0",
            "bitbucket.org/hashicorp/terraform-consul-aws",
            "git::https://example.com/vpc.git",
            "git::https://example.com/vpc.git?ref=v1.2.0",
            "git::ssh://username@example.com/storage.git",
            "git::git@example.com:org/vpc.git",
            "git@github.com:hashicorp/example.git",
            "hg::http://example.com/vpc.hg",
            "https://example.com/vpc-module.zip",
            "http://example.com/vpc-module?archive=zip",
            "s3::https://s3-eu-west-1.amazonaws.com/examplecorp-terraform-modules/vpc.zip",
            "gcs::https://www.googleapis.com/storage/v1/modules/foomodule.zip",
            "oci://example.com/repository-name",
            "oci://registry.example.com:5000/modules/vpc?tag=1.0.0",
        ] {
            assert!(is_module_address(ok), "{ok} should be accepted");
        }
    }

    #[test]
    fn local_paths_and_junk_are_not_module_addresses() {
        for bad in [
            "",
            "./vpc",
            "../modules/vpc",
            "/abs/path",
            ".",
            "..",
            "file:///tmp/m",
            "file::/tmp/m",
            "vpc",
            "hashicorp/consul",
            "a/b/c/d/e",
            "hashicorp/consul/AWS",
            "-ns/name/aws",
            "github.com/hashicorp",
            "bitbucket.org/",
            "git::",
            "git::not a url",
            "svn::https://example.com/x",
            "ftp://example.com/m.zip",
            "https://",
            "hashicorp/consul/aws//",
            "example.com/ns/name",
        ] {
            assert!(!is_module_address(bad), "{bad} should be rejected");
        }
    }

    #[test]
    fn image_references_follow_the_distribution_grammar() {
        for ok in [
            "runner",
            "captf/runner",
            "ghcr.io/captf/runner:1.2.3",
            "registry.example.com:5000/captf/runner:latest",
            "localhost:5000/runner",
            "runner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghcr.io/captf/runner:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "[::1]:5000/runner:1",
        ] {
            assert!(is_image_reference(ok), "{ok} should be accepted");
        }
        let long = format!("r/{}", "a".repeat(260));
        for bad in [
            "",
            "Runner",
            "captf/Runner:1",
            "runner:",
            "runner:-bad",
            "runner@sha256:short",
            "runner with space",
            ":tag",
            "/runner",
            "runner//x",
            long.as_str(),
        ] {
            assert!(!is_image_reference(bad), "{bad} should be rejected");
        }
    }

    #[test]
    fn data_keys_and_variable_names() {
        for ok in ["vars.json", "a_b-c", ".hidden", "X"] {
            assert!(is_data_key(ok), "{ok}");
        }
        let long = "k".repeat(254);
        for bad in ["", ".", "..", "..x", "a/b", "a b", long.as_str()] {
            assert!(!is_data_key(bad), "{bad}");
        }
        for ok in ["region", "_x", "instance-count", "A1"] {
            assert!(is_variable_name(ok), "{ok}");
        }
        for bad in ["", "1x", "-x", "a.b", "a b", "ä"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }
}
