//! The shell completion scripts `kubectl-captf completion <shell>` prints: clap's static script
//! for the command line of [`crate::cli`], and for bash a function that asks
//! `kubectl-captf __complete` ([`crate::complete`]) for the candidates, object names included.

use clap::CommandFactory;

use crate::cli::Cli;

/// Write the completion script of `kubectl-captf` for `shell`, made for the binary's own name
/// (clap's scripts break on a two-word name such as `kubectl captf`). clap_complete's bash
/// script names a subcommand's case `kubectl__subcmd__captf__…` where its dispatch looks for
/// `kubectl__captf__…` (the `-` of the name); the script is written with one spelling. For bash,
/// a function that asks `kubectl-captf __complete` (object names listed live) then takes over
/// from clap's static one, which stays defined.
pub fn write(shell: clap_complete::Shell, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-captf", &mut buf);
    let script = String::from_utf8_lossy(&buf);
    let script = match shell {
        clap_complete::Shell::Bash => script.replace("kubectl__subcmd__captf", "kubectl__captf") + BASH_DYNAMIC,
        _ => script.into_owned(),
    };
    out.write_all(script.as_bytes())
}

/// Appended to clap's bash script by `kubectl-captf completion bash`: completion through
/// `kubectl-captf __complete`, so bash completes object names too. It reads cobra's format: the
/// candidates (a description after a tab is dropped), then `:<directive>` (error: nothing; no
/// space after a kind prefix).
pub const BASH_DYNAMIC: &str = r#"
# Through `kubectl-captf __complete`: subcommands, flags, kinds and object names listed live.
_kubectl_captf_dynamic() {
    local out line directive
    local -a candidates=()
    out=$(kubectl-captf __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
    directive=${out##*:}
    [[ "$directive" =~ ^[0-9]+$ ]] || directive=1
    (( directive & 1 )) && return 0
    while IFS= read -r line; do
        [[ -z "$line" || "$line" == :* ]] && continue
        candidates+=("${line%%$'	'*}")
    done <<< "$out"
    COMPREPLY=("${candidates[@]}")
    if (( directive & 2 )); then
        compopt -o nospace 2>/dev/null
    fi
    if (( ${#COMPREPLY[@]} == 0 )) && ! (( directive & 4 )); then
        compopt -o default 2>/dev/null
    fi
    return 0
}
complete -F _kubectl_captf_dynamic kubectl-captf
"#;
