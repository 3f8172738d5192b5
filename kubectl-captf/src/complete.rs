//! Completion of `kubectl captf` arguments, in cobra's `__complete` format, which kubectl
//! (v1.26+) expects from a plugin's `kubectl_complete-<plugin>` executable: one candidate a line
//! (`candidate<TAB>description` allowed), then `:<directive>`.
//!
//! `kubectl-captf __complete <words typed after "kubectl captf">` prints them (the last word is
//! the one being completed, empty after a space): subcommand names, flags, flag values, the
//! kinds of `<kind>/<name>` (`terraformcluster/`, `tfc/`, ...) and, after a kind, the names of
//! that kind listed live in the namespace of `-n` or the context (at most [`MAX_NAMES`]).

use clap::CommandFactory;
use kube::api::ListParams;

use captf_shared::Kind;

use crate::cli::Cli;

/// cobra's `ShellCompDirective` values.
pub mod directive {
    /// An error occurred; the candidates are ignored.
    pub const ERROR: u32 = 1;
    /// No space after the candidate (a kind prefix such as `tfc/` goes on with a name).
    pub const NO_SPACE: u32 = 2;
    /// No file names when there is no candidate.
    pub const NO_FILE_COMP: u32 = 4;
    /// The shell's default: file names when there is no candidate.
    pub const DEFAULT: u32 = 0;
}

/// How long a completion waits for the API server's listing.
pub const LIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most object names one completion lists.
pub const MAX_NAMES: u32 = 300;

/// The kinds of `<kind>/<name>` offered, as a person types them.
const KINDS: [(&str, Kind); 6] = [
    ("terraformcluster", Kind::TerraformCluster),
    ("tfc", Kind::TerraformCluster),
    ("terraformmachinepool", Kind::TerraformMachinePool),
    ("tfmp", Kind::TerraformMachinePool),
    ("terraformmachine", Kind::TerraformMachine),
    ("tfm", Kind::TerraformMachine),
];

/// Whether a subcommand's one argument is `<kind>/<name>` (its positional argument `target`).
fn targeted(subcommand: &str) -> bool {
    Cli::command().find_subcommand(subcommand).is_some_and(|c| {
        c.get_arguments()
            .any(|a| a.get_id().as_str() == "target" && a.is_positional())
    })
}

/// The flags that take a value (the next word), with their short forms.
const VALUE_FLAGS: [&str; 10] = [
    "--kubeconfig",
    "--context",
    "-n",
    "--namespace",
    "-o",
    "--output",
    "--now",
    "--op",
    "--sort-by",
    "--hash",
];

/// What the word being completed is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    Subcommands,
    /// A flag of the subcommand (or a global one).
    Flags {
        subcommand: Option<String>,
    },
    /// The value of a flag (its long name).
    FlagValue {
        flag: String,
        subcommand: Option<String>,
    },
    /// `<kind>/` of a target (`cluster/` too for `tree`).
    Kinds {
        capi_cluster: bool,
    },
    /// The names of `kind`, typed as `typed_kind/`.
    Names {
        kind: Kind,
        typed_kind: String,
    },
    /// The shells of `completion`.
    Shells,
    Nothing,
}

/// The connection flags typed so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Typed {
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

fn long_of(flag: &str) -> String {
    match flag {
        "-n" => "--namespace".into(),
        "-o" => "--output".into(),
        f => f.to_string(),
    }
}

/// What to complete for `words` (the last one is being completed) (PURE).
pub fn analyze(words: &[String]) -> (Typed, Want) {
    let (current, before) = match words.split_last() {
        Some((c, b)) => (c.as_str(), b),
        None => ("", &[][..]),
    };
    let mut typed = Typed::default();
    let mut subcommand: Option<String> = None;
    let mut positionals = 0usize;
    let mut i = 0;
    let mut pending_flag: Option<String> = None;
    while i < before.len() {
        let w = before[i].as_str();
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (w, None),
        };
        if flag.starts_with('-') && flag.len() > 1 {
            let takes = VALUE_FLAGS.contains(&flag);
            let value = match (takes, inline) {
                (true, Some(v)) => Some(v),
                (true, None) => {
                    i += 1;
                    match before.get(i) {
                        Some(v) => Some(v.clone()),
                        None => {
                            pending_flag = Some(long_of(flag));
                            None
                        }
                    }
                }
                (false, _) => None,
            };
            match (long_of(flag).as_str(), value) {
                ("--kubeconfig", v) => typed.kubeconfig = v.or(typed.kubeconfig),
                ("--context", v) => typed.context = v.or(typed.context),
                ("--namespace", v) => typed.namespace = v.or(typed.namespace),
                _ => {}
            }
        } else if subcommand.is_none() {
            subcommand = Some(w.to_string());
        } else {
            positionals += 1;
        }
        i += 1;
    }
    if let Some(flag) = pending_flag {
        return (typed, Want::FlagValue { flag, subcommand });
    }
    if current.starts_with('-') {
        return (typed, Want::Flags { subcommand });
    }
    let Some(sub) = subcommand else {
        return (typed, Want::Subcommands);
    };
    if sub == "completion" && positionals == 0 {
        return (typed, Want::Shells);
    }
    if !targeted(&sub) || positionals > 0 {
        return (typed, Want::Nothing);
    }
    let want = match current.split_once('/') {
        Some((kind, _)) => match crate::target::parse_kind(kind) {
            Some(k) => Want::Names {
                kind: k,
                typed_kind: kind.to_string(),
            },
            None => Want::Nothing,
        },
        None => Want::Kinds {
            capi_cluster: sub == "tree",
        },
    };
    (typed, want)
}

/// What `__complete` prints (PURE): the candidates that start with `current`, then the directive.
pub fn render(candidates: &[String], current: &str, directive: u32) -> String {
    let mut out = String::new();
    for c in candidates.iter().filter(|c| c.starts_with(current)) {
        out.push_str(c);
        out.push('\n');
    }
    out.push_str(&format!(":{directive}\n"));
    out
}

/// The candidates and directive that need no cluster (PURE); `None` for object names.
pub fn offline(want: &Want) -> Option<(Vec<String>, u32)> {
    let cmd = Cli::command();
    let nothing = directive::NO_FILE_COMP;
    Some(match want {
        Want::Subcommands => (
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| {
                    let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
                    let first = about
                        .split(['.', ':', '('])
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    if first.is_empty() {
                        s.get_name().to_string()
                    } else {
                        format!("{}\t{first}", s.get_name())
                    }
                })
                .collect(),
            nothing,
        ),
        Want::Flags { subcommand } => {
            let mut flags: Vec<String> = Vec::new();
            let mut add = |c: &clap::Command| {
                for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                    if let Some(l) = a.get_long() {
                        flags.push(format!("--{l}"));
                    }
                    if let Some(s) = a.get_short() {
                        flags.push(format!("-{s}"));
                    }
                }
            };
            add(&cmd);
            if let Some(sub) = subcommand.as_deref().and_then(|s| cmd.find_subcommand(s)) {
                add(sub);
            }
            flags.sort();
            flags.dedup();
            (flags, nothing)
        }
        Want::FlagValue { flag, subcommand } => {
            if flag == "--kubeconfig" {
                return Some((vec![], directive::DEFAULT));
            }
            if flag == "--namespace" || flag == "--context" {
                return None;
            }
            let id = flag.trim_start_matches('-').replace('-', "_");
            let find = |c: &clap::Command| {
                c.get_arguments().find(|a| a.get_id().as_str() == id).map(|a| {
                    a.get_possible_values()
                        .iter()
                        .map(|v| v.get_name().to_string())
                        .collect::<Vec<_>>()
                })
            };
            let values = subcommand
                .as_deref()
                .and_then(|s| cmd.find_subcommand(s))
                .and_then(find)
                .or_else(|| find(&cmd))
                .unwrap_or_default();
            (values, nothing)
        }
        Want::Kinds { capi_cluster } => {
            let mut kinds: Vec<String> = KINDS.iter().map(|(k, _)| format!("{k}/")).collect();
            if *capi_cluster {
                kinds.insert(0, "cluster/".to_string());
            }
            (kinds, directive::NO_SPACE | nothing)
        }
        Want::Shells => (
            ["bash", "elvish", "fish", "powershell", "zsh"]
                .map(String::from)
                .to_vec(),
            nothing,
        ),
        Want::Nothing => (vec![], nothing),
        Want::Names { .. } => return None,
    })
}

/// The contexts of the kubeconfig named (or the default one).
fn contexts(typed: &Typed) -> Vec<String> {
    let kc = match &typed.kubeconfig {
        Some(p) => kube::config::Kubeconfig::read_from(p),
        None => kube::config::Kubeconfig::read(),
    };
    kc.map(|k| k.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

/// Names listed live: `typed_kind/<name>` of `kind`, or namespaces for `-n`.
async fn live(typed: &Typed, want: &Want) -> Result<Vec<String>, String> {
    let mut argv = vec!["kubectl-captf".to_string()];
    if let Some(k) = &typed.kubeconfig {
        argv.extend(["--kubeconfig".into(), k.clone()]);
    }
    if let Some(c) = &typed.context {
        argv.extend(["--context".into(), c.clone()]);
    }
    if let Some(n) = &typed.namespace {
        argv.extend(["--namespace".into(), n.clone()]);
    }
    argv.push("status".into());
    let cli = <Cli as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
    let conn = crate::conn::connect(&cli).await.map_err(|e| e.to_string())?;
    let lp = ListParams::default().limit(MAX_NAMES);
    match want {
        Want::Names { kind, typed_kind } => {
            let objects = captf_read::live::list_objects(&conn.client, *kind, Some(&conn.namespace), &lp)
                .await
                .map_err(|e| e.to_string())?;
            let mut names: Vec<String> = objects
                .iter()
                .filter_map(|o| o.metadata().name.clone())
                .map(|n| format!("{typed_kind}/{n}"))
                .collect();
            names.sort();
            Ok(names)
        }
        Want::FlagValue { flag, .. } if flag == "--namespace" => {
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(conn.client.clone());
            let list = api.list_metadata(&lp).await.map_err(|e| e.to_string())?;
            Ok(list.items.into_iter().filter_map(|n| n.metadata.name).collect())
        }
        _ => Ok(vec![]),
    }
}

/// The whole answer of `__complete` for `words`: what it prints on stdout, and a note for
/// stderr when the live listing failed (the shell does not show it; `__complete` run by hand
/// does).
pub async fn complete(words: &[String]) -> (String, String) {
    let current = words.last().map(String::as_str).unwrap_or_default();
    let (typed, want) = analyze(words);
    if let Some((candidates, d)) = offline(&want) {
        return (render(&candidates, current, d), String::new());
    }
    if matches!(&want, Want::FlagValue { flag, .. } if flag == "--context") {
        return (
            render(&contexts(&typed), current, directive::NO_FILE_COMP),
            String::new(),
        );
    }
    // A shell waits for the answer: a server that does not answer soon gets none.
    let listed = tokio::time::timeout(LIVE_TIMEOUT, live(&typed, &want))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", LIVE_TIMEOUT.as_secs())));
    match listed {
        Ok(names) => (render(&names, current, directive::NO_FILE_COMP), String::new()),
        Err(why) => (
            render(&[], current, directive::ERROR),
            format!("cannot list names to complete: {why}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        // A trailing space means the last word is empty.
        let mut v: Vec<String> = s.split_whitespace().map(String::from).collect();
        if s.ends_with(' ') || s.is_empty() {
            v.push(String::new());
        }
        v
    }

    #[test]
    fn the_first_word_completes_to_the_visible_subcommands_with_their_descriptions() {
        let (_, want) = analyze(&w(""));
        assert_eq!(want, Want::Subcommands);
        let (c, d) = offline(&want).unwrap_or_default();
        let names: Vec<&str> = c.iter().map(|c| c.split('\t').next().unwrap_or_default()).collect();
        for s in ["explain", "status", "tree", "suspend", "resume", "logs"] {
            assert!(names.contains(&s), "{names:?}");
        }
        assert!(
            !names.iter().any(|n| n.starts_with("__")),
            "hidden stays hidden: {names:?}"
        );
        assert_eq!(d, directive::NO_FILE_COMP);
        assert!(render(&c, "tr", d).starts_with("tree\t"), "{}", render(&c, "tr", d));
    }

    #[test]
    fn a_target_completes_to_kinds_without_a_space_then_to_names_of_that_kind() {
        let (_, want) = analyze(&w("explain tf"));
        assert_eq!(want, Want::Kinds { capi_cluster: false });
        let (c, d) = offline(&want).unwrap_or_default();
        assert_eq!(d, directive::NO_SPACE | directive::NO_FILE_COMP);
        assert_eq!(render(&c, "tfm", d), "tfmp/\ntfm/\n:6\n");
        let (_, tree) = analyze(&w("tree "));
        assert_eq!(tree, Want::Kinds { capi_cluster: true });
        let (_, names) = analyze(&w("-n team-a logs tfmp/wo"));
        assert_eq!(
            names,
            Want::Names {
                kind: Kind::TerraformMachinePool,
                typed_kind: "tfmp".into()
            }
        );
        assert_eq!(offline(&names), None, "names are listed live");
        for sub in ["plan", "logs", "events", "suspend", "resume"] {
            let (_, want) = analyze(&w(&format!("{sub} ")));
            assert_eq!(want, Want::Kinds { capi_cluster: false }, "{sub}");
        }
        assert_eq!(analyze(&w("status ")).1, Want::Nothing, "status takes no target");
        let (_, done) = analyze(&w("explain tfc/a "));
        assert_eq!(done, Want::Nothing, "one target only");
    }

    #[test]
    fn connection_flags_typed_anywhere_choose_where_names_are_listed() {
        let (typed, _) = analyze(&w("--kubeconfig=/k -n team-a --context prod explain tfc/"));
        assert_eq!(
            typed,
            Typed {
                kubeconfig: Some("/k".into()),
                context: Some("prod".into()),
                namespace: Some("team-a".into())
            }
        );
    }

    #[test]
    fn a_flag_and_its_enum_values_complete_from_the_command_line_definition() {
        let (_, flags) = analyze(&w("status --so"));
        let (c, _) = offline(&flags).unwrap_or_default();
        assert!(c.contains(&"--sort-by".to_string()), "{c:?}");
        assert!(c.contains(&"--watch".to_string()), "{c:?}");
        let (_, v) = analyze(&w("status --sort-by "));
        let (c, _) = offline(&v).unwrap_or_default();
        assert!(c.contains(&"last-success".to_string()), "{c:?}");
        let (_, o) = analyze(&w("-o "));
        let (c, _) = offline(&o).unwrap_or_default();
        assert_eq!(c, ["json", "yaml", "wide"]);
        let (_, ns) = analyze(&w("status -n "));
        assert_eq!(offline(&ns), None, "namespaces are listed live");
    }
}
