//! Which namespaces a CAPTF controller watches, as the webhook is told (`--watched-namespaces`,
//! the same list the controller's `--namespace` gets), and the rule that reads it: an object
//! the controller acts on, created in a namespace no controller watches, is admitted with a
//! warning (kubectl prints it) instead of in silence, since nothing would ever act on it.

/// The kinds a controller acts on (templates are only admitted: Cluster API copies them).
const RECONCILED_KINDS: [&str; 3] = ["TerraformCluster", "TerraformMachinePool", "TerraformMachine"];

/// The watched namespaces; empty: every namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watched(Vec<String>);

impl Watched {
    /// Every namespace is watched: no warning is ever given.
    pub fn all() -> Self {
        Watched(Vec::new())
    }

    /// The namespaces listed (blank entries ignored, as clusterctl passes an unset variable);
    /// none listed: every namespace.
    pub fn only<I, S>(namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list: Vec<String> = Vec::new();
        for n in namespaces {
            let n = n.as_ref().trim();
            if !n.is_empty() && !list.iter().any(|l| l == n) {
                list.push(n.to_string());
            }
        }
        Watched(list)
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|n| n == namespace)
    }

    /// The warning for creating a `kind` object in `namespace`, when no controller watches it.
    pub fn warning(&self, kind: &str, namespace: &str) -> Option<String> {
        if !RECONCILED_KINDS.contains(&kind) || self.contains(namespace) {
            return None;
        }
        Some(format!(
            "no CAPTF controller watches namespace {namespace:?} (it watches {}): this {kind} is stored, but nothing will act on it until the namespace is watched (chart values controller.watchNamespaces or controller.watchAllNamespaces; clusterctl variable CAPTF_WATCH_NAMESPACE)",
            self.0.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_created_where_no_controller_watches_gets_a_warning_naming_both_namespaces() {
        let w = Watched::only(["default", "team-a"]);
        let warning = w.warning("TerraformCluster", "team-z").unwrap();
        assert!(warning.contains("\"team-z\""), "{warning}");
        assert!(warning.contains("it watches default, team-a"), "{warning}");
        assert!(warning.contains("controller.watchNamespaces"), "{warning}");
        for kind in RECONCILED_KINDS {
            assert!(w.warning(kind, "team-z").is_some(), "{kind}");
            assert_eq!(w.warning(kind, "team-a"), None, "{kind}");
        }
    }

    #[test]
    fn templates_and_every_namespace_watched_get_no_warning() {
        let w = Watched::only(["default"]);
        assert_eq!(w.warning("TerraformMachineTemplate", "team-z"), None);
        assert_eq!(w.warning("TerraformClusterTemplate", "team-z"), None);
        assert_eq!(Watched::all().warning("TerraformCluster", "anywhere"), None);
        // clusterctl passes the unset variable as an empty value: every namespace.
        assert_eq!(Watched::only([""]), Watched::all());
        assert_eq!(Watched::only([" a ", "a", ""]), Watched::only(["a"]));
    }
}
