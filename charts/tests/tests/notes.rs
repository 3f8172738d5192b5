//! NOTES.txt renders and tells the person what to do next. (`helm install --dry-run` needs a
//! cluster, so the test renders NOTES.txt as a template of a scratch copy of the chart.)

#![allow(clippy::unwrap_used)]

use std::path::Path;

use captf_chart_tests::features::OWN_CERTIFICATE;
use captf_chart_tests::{RELEASE, chart_dir, helm_template_chart};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn render_notes(extra: &[&str]) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let chart = scratch.path().join("captf");
    copy_dir(&chart_dir(), &chart);
    std::fs::copy(chart.join("templates/NOTES.txt"), chart.join("notes.txt")).unwrap();
    std::fs::write(
        chart.join("templates/zz-notes.yaml"),
        "notes: |\n{{ tpl (.Files.Get \"notes.txt\") . | indent 2 }}\n",
    )
    .unwrap();
    let mut args = vec!["--show-only", "templates/zz-notes.yaml"];
    args.extend_from_slice(extra);
    let rendered = helm_template_chart(RELEASE, &chart, &args).unwrap();
    rendered.docs[0]["notes"].as_str().unwrap().to_string()
}

#[test]
fn notes_tell_how_to_apply_a_sample_and_where_to_look_when_it_is_not_ready() {
    let notes = render_notes(&[]);
    for want in [
        "rollout status deploy/captf-webhook\n",
        "rollout status deploy/captf-controller\n",
        "get certificate captf-webhook",
        "kubectl apply -n captf-system -f examples/terraformcluster-minimal.yaml",
        "kubectl describe terraformcluster",
        "kubectl logs job/",
        "captf.io/approve-plan=",
        "failed calling webhook",
        "`helm upgrade` updates the CRDs",
    ] {
        assert!(notes.contains(want), "NOTES.txt lacks {want:?}:\n{notes}");
    }
    assert!(!notes.contains("<no value>"), "{notes}");
}

#[test]
fn notes_without_cert_manager_do_not_mention_the_certificate() {
    let notes = render_notes(OWN_CERTIFICATE);
    assert!(!notes.contains("get certificate"), "{notes}");
}

#[test]
fn notes_say_which_account_runner_jobs_run_as() {
    let own = render_notes(&[]);
    assert!(own.contains("its own ServiceAccount captf-runner-<suffix>"), "{own}");
    let shared = render_notes(&["--set", "runner.serviceAccount.name=platform-runner"]);
    assert!(
        shared.contains("run as the ServiceAccount \"platform-runner\": create it"),
        "{shared}"
    );
}

#[test]
fn notes_say_which_namespaces_the_controller_watches_and_how_to_widen_them() {
    let default = render_notes(&[]);
    assert!(
        default.contains("The controller watches only these namespaces (a RoleBinding in each, no rights elsewhere):\n  captf-system\n"),
        "{default}"
    );
    assert!(
        default.contains("--set 'controller.watchNamespaces={captf-system,<another>}'")
            && default.contains("controller.watchAllNamespaces=true"),
        "{default}"
    );
    let listed = render_notes(&["--set", "controller.watchNamespaces={team-a,team-b}"]);
    assert!(listed.contains("\n  team-a, team-b\n"), "{listed}");
    assert!(listed.contains("kubectl apply -n team-a -f"), "{listed}");
    let all = render_notes(&["--set", "controller.watchAllNamespaces=true"]);
    assert!(all.contains("The controller watches EVERY namespace"), "{all}");
    assert!(all.contains("kubectl apply -n default -f"), "{all}");
    assert!(!default.contains("deprecated") && !all.contains("deprecated"));
    let old = render_notes(&["--set", "controller.watchNamespace=team-a"]);
    assert!(
        old.contains("WARNING: controller.watchNamespace is deprecated") && old.contains("\n  team-a\n"),
        "{old}"
    );
}

#[test]
fn notes_list_each_shards_deployment_and_how_to_move_an_object_into_a_shard() {
    let default = render_notes(&[]);
    assert!(!default.contains("sharded") && !default.contains("shard-"), "{default}");
    let notes = render_notes(&["--set", "controller.shards={blue,green}"]);
    for want in [
        "The controller is sharded (controller.shards): captf-controller serves the objects without the label\nsharding.captf.io/key",
        "\n  sharding.captf.io/key=blue  ->  captf-controller-shard-blue\n",
        "\n  sharding.captf.io/key=green  ->  captf-controller-shard-green\n",
        "kubectl label terraformcluster <name> sharding.captf.io/key=blue --overwrite",
        "rollout status deploy/captf-controller\n",
        "rollout status deploy/captf-controller-shard-blue\n",
        "rollout status deploy/captf-controller-shard-green\n",
    ] {
        assert!(notes.contains(want), "NOTES.txt lacks {want:?}:\n{notes}");
    }
}
