//! Names (docs/api.md): suffixes, the Secrets and Leases they name, Job names and the
//! own-runner hostname pattern the stale-lock check relies on.

use regex::Regex;

use crate::{Kind, Op};

/// The longest Job name: the pod name `<job>-<5 chars>` then fits 63 characters.
pub const MAX_JOB_NAME_LEN: usize = 57;
/// The highest Job sequence number.
pub const MAX_JOB_SEQ: u32 = 9_999_999;
/// The alphabet the API server draws `generateName` suffixes from (k8s.io/apimachinery `utilrand.String`).
pub const GENERATED_NAME_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
/// Length of the random part of a Job's pod name.
pub const POD_SUFFIX_LEN: usize = 5;

const SUFFIX_MAX: usize = 40;
const SUFFIX_NAME_CUT: usize = 26;
/// Hex characters of the hash in a hashed suffix.
const SUFFIX_HASH_HEX: usize = 8;
/// Hex characters of the object id: 48 bits, so two objects sharing one is not a brute-force
/// exercise.
pub const OBJECT_ID_HEX: usize = 12;
/// `<k>-` (3 + 1), `-<op>-<seq>` (1 + 7 + 1 + 7) and the token `<cut>-<12 hex>` make 57.
const TOKEN_NAME_CUT: usize = MAX_JOB_NAME_LEN - 4 - 16 - 1 - OBJECT_ID_HEX;

/// The first `n` lowercase hex characters of sha256(`input`).
pub fn hex_sha256(input: &str, n: usize) -> String {
    let mut out = crate::inputs::sha256_hex(input.as_bytes());
    out.truncate(n);
    out
}

/// Cut `s` to at most `n` characters and drop a trailing `-` (or `.`) the cut leaves.
pub fn cut(s: &str, n: usize) -> String {
    let cut: String = s.chars().take(n).collect();
    cut.trim_end_matches(['-', '.']).to_string()
}

fn object_key(kind: Kind, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", kind.as_str())
}

/// The 12-hex object id (`captf.io/object` label, the end of the Job token).
pub fn object_id(kind: Kind, namespace: &str, name: &str) -> String {
    hex_sha256(&object_key(kind, namespace, name), OBJECT_ID_HEX)
}

/// Does `name` end the way a hashed suffix's name part does: `-` and 8 lowercase hex?
pub fn looks_hashed(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > SUFFIX_HASH_HEX
        && b[b.len() - SUFFIX_HASH_HEX - 1] == b'-'
        && b[b.len() - SUFFIX_HASH_HEX..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The suffix of the object's state, lock and CAPTF Secrets and Leases: `<name>-<k>`, or
/// `<name cut to 26>-<8 hex>-<k>` when that is longer than 40 characters or the name itself ends
/// in `-<8 hex>`. The second rule makes the scheme injective: a plain suffix never ends in
/// `-<8 hex>-<k>` and a hashed one always does, so a short name can never take a long name's
/// suffix; two hashed suffixes are equal only when 32 bits of SHA-256 collide, which the
/// owner-UID binding of every object made for the suffix catches (docs/trust.md).
pub fn suffix(kind: Kind, namespace: &str, name: &str) -> String {
    let plain = format!("{name}-{}", kind.short());
    if plain.len() <= SUFFIX_MAX && !looks_hashed(name) {
        return plain;
    }
    format!(
        "{}-{}-{}",
        cut(name, SUFFIX_NAME_CUT),
        hex_sha256(&object_key(kind, namespace, name), SUFFIX_HASH_HEX),
        kind.short()
    )
}

pub fn state_secret_name(suffix: &str) -> String {
    format!("tfstate-default-{suffix}")
}
pub fn lock_lease_name(suffix: &str) -> String {
    format!("lock-tfstate-default-{suffix}")
}
pub fn run_lease_name(suffix: &str) -> String {
    format!("captf-run-{suffix}")
}
pub fn inputs_secret_name(suffix: &str) -> String {
    format!("captf-inputs-{suffix}")
}
pub fn outputs_secret_name(suffix: &str) -> String {
    format!("captf-outputs-{suffix}")
}
/// The object's own runner ServiceAccount, Role and RoleBinding (`crate::runner_identity`).
pub fn runner_service_account_name(suffix: &str) -> String {
    format!("captf-runner-{suffix}")
}

/// `captf-cluster-<8 hex of sha256(namespace/cluster-name)>`.
pub fn cluster_lease_name(namespace: &str, cluster_name: &str) -> String {
    format!(
        "captf-cluster-{}",
        hex_sha256(&format!("{namespace}/{cluster_name}"), 8)
    )
}

/// `<name cut to 24, dots made dashes>-<12 hex>`: the same for every Job of the object.
pub fn object_token(kind: Kind, namespace: &str, name: &str) -> String {
    let label_safe = name.replace('.', "-");
    format!(
        "{}-{}",
        cut(&label_safe, TOKEN_NAME_CUT),
        object_id(kind, namespace, name)
    )
}

/// `<k>-<token>-<op>-<seq>`, at most 57 characters. `seq` is clamped to 1..=9999999.
pub fn job_name(kind: Kind, namespace: &str, name: &str, op: Op, seq: u32) -> String {
    let seq = seq.clamp(1, MAX_JOB_SEQ);
    format!(
        "{}-{}-{}-{seq}",
        kind.short(),
        object_token(kind, namespace, name),
        op.as_str()
    )
}

/// The sequence number and op of one of this object's Job names, if it is one.
pub fn parse_job_name(kind: Kind, namespace: &str, name: &str, job: &str) -> Option<(Op, u32)> {
    let prefix = format!("{}-{}-", kind.short(), object_token(kind, namespace, name));
    let rest = job.strip_prefix(&prefix)?;
    let (op, seq) = rest.split_once('-')?;
    let op: Op = op.parse().ok()?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((op, seq.parse().ok()?))
}

/// The own-runner hostname pattern of one object (docs/api.md).
#[derive(Clone, Debug)]
pub struct RunnerPattern(Regex);

impl RunnerPattern {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        let source = format!(
            "^{}-{}-(apply|refresh|drift|destroy)-[0-9]+-[{GENERATED_NAME_ALPHABET}]{{{POD_SUFFIX_LEN}}}$",
            kind.short(),
            regex::escape(&object_token(kind, namespace, name)),
        );
        // The pattern is built from escaped text and fixed syntax, so it always compiles.
        RunnerPattern(Regex::new(&source).unwrap_or_else(|_| unreachable!("own-runner pattern compiles")))
    }

    /// Is `hostname` a pod of one of this object's Jobs?
    pub fn matches(&self, hostname: &str) -> bool {
        self.0.is_match(hostname)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// A DNS-1123 label: lowercase alphanumerics and `-`, starting and ending alphanumeric, ≤ 63.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated labels, ≤ 253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn suffix_puts_the_kind_last() {
        assert_eq!(suffix(Kind::TerraformCluster, "default", "prod-eu"), "prod-eu-tc");
        assert_eq!(
            suffix(Kind::TerraformMachinePool, "default", "workers-1"),
            "workers-1-tmp"
        );
        assert_eq!(suffix(Kind::TerraformMachine, "default", "m"), "m-tm");
    }

    #[test]
    fn a_long_suffix_is_cut_and_hashed_to_at_most_39() {
        let name = "a-very-long-cluster-name-that-goes-on-and-on";
        let s = suffix(Kind::TerraformMachinePool, "ns", name);
        assert!(s.len() <= 39, "{s}");
        assert!(s.starts_with("a-very-long-cluster-name-t-"));
        assert!(s.ends_with("-tmp"));
        assert_ne!(s, suffix(Kind::TerraformMachinePool, "other", name));
    }

    #[test]
    fn derived_names() {
        let s = "prod-eu-tc";
        assert_eq!(state_secret_name(s), "tfstate-default-prod-eu-tc");
        assert_eq!(lock_lease_name(s), "lock-tfstate-default-prod-eu-tc");
        assert_eq!(run_lease_name(s), "captf-run-prod-eu-tc");
        assert_eq!(inputs_secret_name(s), "captf-inputs-prod-eu-tc");
        assert_eq!(outputs_secret_name(s), "captf-outputs-prod-eu-tc");
        let lease = cluster_lease_name("default", "prod-eu");
        assert_eq!(lease, format!("captf-cluster-{}", hex_sha256("default/prod-eu", 8)));
    }

    #[test]
    fn a_short_name_shaped_like_a_long_names_hashed_form_never_gets_its_suffix() {
        let victim = "production-eu-west-1-primary-cluster-a";
        let attacker = "production-eu-west-1-prima-fcdd74ef";
        let v = suffix(Kind::TerraformCluster, "default", victim);
        assert_eq!(v, "production-eu-west-1-prima-fcdd74ef-tc");
        let a = suffix(Kind::TerraformCluster, "default", attacker);
        assert_ne!(a, v);
        let attacker_hash = hex_sha256(&format!("TerraformCluster/default/{attacker}"), 8);
        assert_eq!(a, format!("production-eu-west-1-prima-{attacker_hash}-tc"));
    }

    #[test]
    fn a_name_ending_in_dash_and_8_hex_takes_the_hashed_form_however_short() {
        assert!(looks_hashed("a-0123abcd"));
        assert!(!looks_hashed("a-0123abcg"));
        assert!(!looks_hashed("a-0123ABCD"));
        assert!(!looks_hashed("a0123abcd"));
        assert!(!looks_hashed("-0123abc"));
        assert!(!looks_hashed("0123abcd"));
        let s = suffix(Kind::TerraformMachine, "ns", "a-0123abcd");
        assert_eq!(
            s,
            format!("a-0123abcd-{}-tm", hex_sha256("TerraformMachine/ns/a-0123abcd", 8))
        );
        // A name that only contains such a part keeps its plain suffix.
        assert_eq!(suffix(Kind::TerraformMachine, "ns", "a-0123abcd-x"), "a-0123abcd-x-tm");
    }

    #[test]
    fn job_name_example_of_the_design() {
        let token = object_token(Kind::TerraformCluster, "default", "prod-eu");
        let id = hex_sha256("TerraformCluster/default/prod-eu", 12);
        assert_eq!(token, format!("prod-eu-{id}"));
        assert_eq!(
            job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 7),
            format!("tc-prod-eu-{id}-apply-7")
        );
    }

    #[test]
    fn longest_job_name_is_exactly_57() {
        let name = "x".repeat(253);
        let j = job_name(Kind::TerraformMachinePool, "ns", &name, Op::Destroy, MAX_JOB_SEQ);
        assert_eq!(j.len(), 57, "{j}");
    }

    #[test]
    fn job_names_parse_back() {
        let j = job_name(Kind::TerraformMachine, "ns", "m-1", Op::Drift, 42);
        assert_eq!(
            parse_job_name(Kind::TerraformMachine, "ns", "m-1", &j),
            Some((Op::Drift, 42))
        );
        assert_eq!(parse_job_name(Kind::TerraformMachine, "ns", "m-2", &j), None);
        assert_eq!(
            parse_job_name(Kind::TerraformMachine, "ns", "m-1", &format!("{j}x")),
            None
        );
    }

    #[test]
    fn a_hostname_of_another_object_whose_name_is_a_prefix_is_foreign() {
        let short = RunnerPattern::new(Kind::TerraformCluster, "default", "prod");
        let long_job = job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 3);
        assert!(!short.matches(&format!("{long_job}-bcdfg")));
        let long = RunnerPattern::new(Kind::TerraformCluster, "default", "prod-eu");
        assert!(long.matches(&format!("{long_job}-bcdfg")));
        let short_job = job_name(Kind::TerraformCluster, "default", "prod", Op::Apply, 3);
        assert!(!long.matches(&format!("{short_job}-bcdfg")));
    }

    #[test]
    fn a_workstation_hostname_never_matches() {
        let p = RunnerPattern::new(Kind::TerraformCluster, "default", "prod-eu");
        for host in ["alice-laptop", "", "tc-prod-eu", "ci-runner-7"] {
            assert!(!p.matches(host));
        }
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        // Kubernetes object names: DNS-1123 subdomains (dots allowed), up to 253 characters.
        prop_oneof![
            "[a-z0-9]([-a-z0-9]{0,60}[a-z0-9])?",
            "[a-z0-9]([-a-z0-9.]{0,100}[a-z0-9])?",
            "[a-z]{1,10}(\\.[a-z0-9]{1,10}){0,5}",
        ]
        .prop_filter("a valid object name", |s| is_dns1123_subdomain(s))
    }

    fn kind_strategy() -> impl Strategy<Value = Kind> {
        prop::sample::select(Kind::ALL.to_vec())
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop::sample::select(Op::ALL.to_vec())
    }

    fn pod_suffix() -> impl Strategy<Value = String> {
        "[bcdfghjklmnpqrstvwxz2456789]{5}"
    }

    proptest! {
        #[test]
        fn every_job_name_is_at_most_57_and_a_dns_label(
            kind in kind_strategy(), ns in "[a-z0-9]{1,63}", name in name_strategy(),
            op in op_strategy(), seq in 0u32..=u32::MAX,
        ) {
            let j = job_name(kind, &ns, &name, op, seq);
            prop_assert!(j.len() <= MAX_JOB_NAME_LEN, "{} is {} long", j, j.len());
            prop_assert!(is_dns1123_label(&j), "{} is not a DNS-1123 label", j);
        }

        /// Two objects of one namespace never share a suffix: random pairs, and the attack
        /// pair (a name equal to another's hashed suffix without its kind).
        #[test]
        fn two_names_never_share_a_suffix(
            kind in kind_strategy(), other_kind in kind_strategy(), ns in "[a-z0-9]{1,20}",
            name in name_strategy(), other in name_strategy(), mimic in any::<bool>(),
        ) {
            let s = suffix(kind, &ns, &name);
            let other = if mimic {
                s.strip_suffix(&format!("-{}", kind.short())).unwrap_or(&s).to_string()
            } else {
                other
            };
            prop_assume!((kind, name.as_str()) != (other_kind, other.as_str()));
            prop_assert_ne!(&s, &suffix(other_kind, &ns, &other), "{:?} and {:?}", (kind, &name), (other_kind, &other));
        }

        /// The law behind injectivity: a suffix ends in `-<8 hex>-<k>` exactly when it is the
        /// hashed form, and a plain suffix is the whole name.
        #[test]
        fn a_suffix_looks_hashed_exactly_when_it_is_hashed(kind in kind_strategy(), ns in "[a-z0-9]{1,20}", name in name_strategy()) {
            let s = suffix(kind, &ns, &name);
            let part = s.strip_suffix(&format!("-{}", kind.short())).unwrap_or_default();
            let plain = format!("{name}-{}", kind.short()).len() <= 40 && !looks_hashed(&name);
            prop_assert_eq!(looks_hashed(part), !plain, "{}", s);
            if plain {
                prop_assert_eq!(part, name.as_str());
            }
        }

        #[test]
        fn suffix_is_at_most_40_and_never_ends_in_a_number(kind in kind_strategy(), ns in "[a-z0-9]{1,20}", name in name_strategy()) {
            let s = suffix(kind, &ns, &name);
            prop_assert!(s.len() <= 40);
            prop_assert!(s.ends_with(kind.short()));
            prop_assert!(is_dns1123_subdomain(&lock_lease_name(&s)));
        }

        #[test]
        fn the_pattern_matches_every_pod_of_the_objects_jobs(
            kind in kind_strategy(), ns in "[a-z0-9]{1,63}", name in name_strategy(),
            op in op_strategy(), seq in 1u32..=MAX_JOB_SEQ, rand in pod_suffix(),
        ) {
            let pod = format!("{}-{rand}", job_name(kind, &ns, &name, op, seq));
            prop_assert!(pod.len() <= 63);
            prop_assert!(RunnerPattern::new(kind, &ns, &name).matches(&pod), "{} should match", pod);
        }

        #[test]
        fn the_pattern_matches_no_pod_of_another_object(
            kind in kind_strategy(), other_kind in kind_strategy(),
            ns in "[a-z0-9]{1,8}", other_ns in "[a-z0-9]{1,8}",
            name in name_strategy(), extra in "[-a-z0-9]{0,6}",
            other_is_prefix in any::<bool>(),
            op in op_strategy(), seq in 1u32..=MAX_JOB_SEQ, rand in pod_suffix(),
        ) {
            // Names that are prefixes of one another included: the other object's name is
            // this one's with characters added (or taken away).
            let longer = format!("{name}{extra}");
            let (this, other) = if other_is_prefix { (longer.clone(), name.clone()) } else { (name.clone(), longer.clone()) };
            prop_assume!(is_dns1123_subdomain(&other));
            prop_assume!((kind, ns.as_str(), this.as_str()) != (other_kind, other_ns.as_str(), other.as_str()));
            let pod = format!("{}-{rand}", job_name(other_kind, &other_ns, &other, op, seq));
            prop_assert!(!RunnerPattern::new(kind, &ns, &this).matches(&pod), "{} must not match {:?}", pod, (kind, &ns, &this));
        }
    }
}
