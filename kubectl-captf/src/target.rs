//! `<kind>/<name>` as kubectl takes it: the kind by its name, plural, short name or the code in
//! Job names, with or without the API group.

use captf_shared::Kind;

use crate::errors::PluginError;

/// The CRDs' short names.
fn crd_short(kind: Kind) -> &'static str {
    match kind {
        Kind::TerraformCluster => "tfc",
        Kind::TerraformMachinePool => "tfmp",
        Kind::TerraformMachine => "tfm",
    }
}

/// A Job-running kind from what a person types.
pub fn parse_kind(s: &str) -> Option<Kind> {
    let lower = s.to_ascii_lowercase();
    let bare = lower
        .strip_suffix(&format!(".{}", captf_shared::keys::GROUP))
        .unwrap_or(&lower);
    Kind::ALL.into_iter().find(|k| {
        let singular = k.as_str().to_ascii_lowercase();
        bare == singular || bare == k.plural() || bare == crd_short(*k) || bare == k.short()
    })
}

/// The object a subcommand is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

/// Parse `<kind>/<name>`.
pub fn parse_target(s: &str) -> Result<Target, PluginError> {
    let usage = |why: String| {
        PluginError::Usage(format!(
            "{why}; name the object as <kind>/<name>, e.g. terraformcluster/prod-eu, tfmp/workers or tfm/worker-0 \
             (kinds: TerraformCluster (tfc), TerraformMachinePool (tfmp), TerraformMachine (tfm))"
        ))
    };
    let Some((kind, name)) = s.split_once('/') else {
        return Err(usage(format!("{s:?} has no kind")));
    };
    let kind = parse_kind(kind).ok_or_else(|| usage(format!("{kind:?} is not a kind that runs Terraform")))?;
    if !captf_shared::names::is_dns1123_subdomain(name) {
        return Err(usage(format!("{name:?} is not an object name")));
    }
    Ok(Target {
        kind,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_kind_is_named_as_kubectl_names_it() {
        for s in [
            "TerraformCluster",
            "terraformclusters",
            "tfc",
            "tc",
            "terraformclusters.infrastructure.cluster.x-k8s.io",
        ] {
            assert_eq!(parse_kind(s), Some(Kind::TerraformCluster), "{s}");
        }
        assert_eq!(parse_kind("tfmp"), Some(Kind::TerraformMachinePool));
        assert_eq!(parse_kind("terraformmachine"), Some(Kind::TerraformMachine));
        assert_eq!(parse_kind("terraformclustertemplate"), None);
    }

    #[test]
    fn a_target_without_a_kind_is_a_usage_error_that_shows_the_form() {
        let e = parse_target("prod-eu").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("<kind>/<name>"), "{e}");
        assert_eq!(
            parse_target("tfc/prod-eu").unwrap(),
            Target {
                kind: Kind::TerraformCluster,
                name: "prod-eu".into()
            }
        );
        assert!(parse_target("pods/x").is_err());
    }
}
