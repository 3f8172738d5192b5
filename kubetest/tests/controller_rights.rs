//! The controller's rights on the real API server: the chart's RBAC and admission policy as
//! `helm template` renders them, kube-apiserver's authorizer, its ValidatingAdmissionPolicy and
//! OwnerReferencesPermissionEnforcement admission. The shipped controller binary, run under its
//! own account, makes an object's runner identity, state objects and first Job with no call
//! refused; the same account is refused everything else the policy names. Bound to listed
//! namespaces only (`controller.watchNamespaces`), it works there and its token is refused by the
//! RBAC authorizer in a namespace it does not watch. The simulator
//! evaluates neither CEL nor owner-reference permissions, so these run on the real server only.
//! Without the binaries these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use captf_chart_tests::{NAMESPACE, helm_template};
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use common::chart::{CONTROLLER, crds, create, install_controller_rights, install_controller_rights_with, resource_of};
use common::{TEST_READY_TIMEOUT, namespace};

/// Upper bound on any one wait; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(90);
const OBJECT: &str = "rights";

async fn start() -> Option<ControlPlane> {
    let tools = tools_or_skip()?;
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    Some(ControlPlane::start(opts).await.unwrap())
}

async fn wait_for<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    common::wait_within(what, PATIENCE, probe).await
}

fn terraform_cluster() -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": { "name": OBJECT, "namespace": "default" },
        "spec": {
            "module": { "source": "git::https://example.com/modules/cluster.git" },
            "drift": { "interval": "0" },
        },
    })
}

fn refusal(result: Result<(), kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{what}: {s:?}");
            s.message
        }
        Ok(()) => panic!("{what}: the API server accepted it"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The controller, as the chart runs it and under the chart's account only, takes a new
/// TerraformCluster to its first Job: the runner's ServiceAccount, Role and RoleBinding, the
/// inputs, outputs and state Secrets, the Leases and the Job itself, each owned by the object
/// with `blockOwnerDeletion` (OwnerReferencesPermissionEnforcement is on), pass RBAC and the
/// admission policy; the Job controller then makes its pod as the runner's own account.
#[tokio::test]
async fn the_controller_under_the_charts_rbac_and_admission_policy_starts_a_first_job_on_the_real_api_server() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    crds(&admin).await;
    install_controller_rights(&cp, &admin).await;

    // OwnerReferencesPermissionEnforcement is on: an account that may create Secrets but not
    // update the owner's finalizers cannot own one with blockOwnerDeletion to the object.
    create(&admin, &terraform_cluster()).await.unwrap();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "default", &resource_of(&terraform_cluster()).0);
    let uid = clusters.get(OBJECT).await.unwrap().metadata.uid.unwrap();
    refuses_block_owner_deletion_without_the_finalizers_right(&cp, &admin, &uid).await;

    let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
    let log_path = cp.work_dir().join("captf-controller.log");
    let mut controller = common::spawn_controller(
        &kubeconfig,
        &log_path,
        &[
            "--namespace=default",
            "--runner-image=ghcr.io/captf/runner:0.1.0",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        &[("POD_NAMESPACE", NAMESPACE), ("RUST_LOG", "info")],
    );

    let clusters_ = clusters.clone();
    let active = wait_for("status.activeJob of the TerraformCluster", || {
        let clusters = clusters_.clone();
        async move {
            let c = clusters.get(OBJECT).await.ok()?;
            c.data["status"]["activeJob"].as_str().map(str::to_string)
        }
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let job = jobs.get(&active).await.unwrap();
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.block_owner_deletion),
        (uid.as_str(), Some(true))
    );
    let account = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.service_account_name.clone())
        .unwrap();
    assert!(account.starts_with("captf-runner-"), "{account}");
    let roles: Api<Role> = Api::namespaced(admin.clone(), "default");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "default");
    assert!(roles.get(&account).await.is_ok() && bindings.get(&account).await.is_ok());

    // The Job controller (kube-controller-manager) makes the pod, as the runner's account.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let selector = format!("job-name={active}");
    let pod = wait_for("the Job's pod", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&ListParams::default().labels(&selector))
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        }
    })
    .await;
    assert_eq!(
        pod.spec.unwrap().service_account_name.as_deref(),
        Some(account.as_str())
    );

    // The person on call reads the same object live, through the real API (events.k8s.io
    // Events, Leases, Jobs, pods): the running Job, its start Event, the tree.
    let captf = |args: &[&str]| {
        let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
            .arg("--kubeconfig")
            .arg(cp.admin_kubeconfig())
            .args(["-n", "default"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let explain = captf(&["explain", &format!("tfc/{OBJECT}")]);
    assert!(
        explain.contains(&format!("Running:      apply Job {active} running since ")),
        "{explain}"
    );
    let events = wait_for("the JobStarted Event through kubectl captf events", || {
        let text = captf(&["events", &format!("tfc/{OBJECT}")]);
        async move { text.contains("JobStarted").then_some(text) }
    })
    .await;
    assert!(events.contains(&active), "{events}");
    let tree = captf(&["tree", &format!("tfc/{OBJECT}")]);
    assert!(
        tree.contains(&format!("TerraformCluster/{OBJECT}")) && tree.contains("apply #1 running"),
        "{tree}"
    );
    let status = captf(&["status", "-o", "wide"]);
    assert!(status.contains(OBJECT) && status.contains(&active), "{status}");

    assert!(
        controller.try_wait().unwrap().is_none(),
        "the controller exited: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    controller.kill().await.unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !text.contains("forbidden") && !text.contains("Forbidden"),
        "the controller was refused a call:\n{text}"
    );
    // Its Events are accepted too (kube-apiserver validates their generated names).
    assert!(!text.contains("failed to publish event"), "{text}");
}

async fn refuses_block_owner_deletion_without_the_finalizers_right(cp: &ControlPlane, admin: &kube::Client, uid: &str) {
    for doc in [
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "tenant", "namespace": "default" } }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": "tenant", "namespace": "default" },
            "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": "tenant", "namespace": "default" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant" },
            "subjects": [{ "kind": "ServiceAccount", "name": "tenant", "namespace": "default" }],
        }),
    ] {
        create(admin, &doc).await.unwrap();
    }
    let tenant = cp.service_account_client("default", "tenant").await.unwrap();
    let owned = |block: bool| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": format!("owned-{block}"), "namespace": "default",
                "ownerReferences": [{
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
                    "name": OBJECT, "uid": uid, "controller": true, "blockOwnerDeletion": block,
                }],
            },
        })
    };
    let secrets: Api<Secret> = Api::namespaced(tenant, "default");
    let create_owned = |block: bool| {
        let secrets = secrets.clone();
        let doc = owned(block);
        async move {
            let s: Secret = serde_json::from_value(doc).unwrap();
            secrets.create(&PostParams::default(), &s).await.map(drop)
        }
    };
    // Without blockOwnerDeletion the tenant may (once its binding is cached).
    wait_for("the tenant's Role in force", || {
        let f = create_owned(false);
        async move { f.await.ok() }
    })
    .await;
    let message = refusal(
        create_owned(true).await,
        "blockOwnerDeletion without the finalizers right",
    );
    assert!(message.contains("cannot set blockOwnerDeletion"), "{message}");
}

/// Whatever RBAC lets the controller's account do, the admission policy refuses it anything but
/// CAPTF's own names and shapes: another Secret or Lease, a runner Role that grants more than
/// the runner's rules, a binding to another account, a Job not owned by a CAPTF object or
/// running as the controller or with host access.
#[tokio::test]
async fn the_controllers_account_is_refused_what_the_admission_policy_forbids_on_the_real_api_server() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    crds(&admin).await;
    let controller = install_controller_rights(&cp, &admin).await;
    create(&admin, &terraform_cluster()).await.unwrap();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "default", &resource_of(&terraform_cluster()).0);
    let uid = clusters.get(OBJECT).await.unwrap().metadata.uid.unwrap();

    let suffix = "rights-tc";
    let owner = json!([{
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "name": OBJECT, "uid": uid, "controller": true, "blockOwnerDeletion": true,
    }]);
    let runner_role = |name: &str, rules: Value| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": name, "namespace": "default" }, "rules": rules,
        })
    };
    let own_rules = json!([
        { "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "update", "patch"],
          "resourceNames": [format!("tfstate-default-{suffix}"), format!("captf-outputs-{suffix}")] },
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
          "resourceNames": [format!("lock-tfstate-default-{suffix}")] },
    ]);
    let job = |account: &str, host_network: bool, owner: Value| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": format!("probe-{account}-{host_network}"), "namespace": "default", "ownerReferences": owner },
            "spec": { "template": { "spec": {
                "serviceAccountName": account, "hostNetwork": host_network, "restartPolicy": "Never",
                "containers": [{ "name": "runner", "image": "ghcr.io/captf/runner:0.1.0" }],
            } } },
        })
    };
    // An owned runner Job of the object's own account with `change` merged into it: what a
    // stolen controller token would try to get node root with.
    let runner_job = |change: Value| {
        let mut j = job(&format!("captf-runner-{suffix}"), false, owner.clone());
        merge(&mut j, &change);
        j
    };
    let pod = |spec: Value| runner_job(json!({ "spec": { "template": { "spec": spec } } }));
    let container = |c: Value| {
        let mut base = json!({ "name": "runner", "image": "ghcr.io/captf/runner:0.1.0" });
        merge(&mut base, &c);
        pod(json!({ "containers": [base] }))
    };
    let owned_secret = |name: &str, type_: &str| {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": { "name": name, "namespace": "default", "ownerReferences": owner.clone(),
                          "annotations": { "kubernetes.io/service-account.name": "default" } },
        })
    };
    // (what, document, a part of the policy's message)
    // What the controller makes passes: the runner Role with the runner's rules.
    create(
        &controller,
        &runner_role(&format!("captf-runner-{suffix}"), own_rules.clone()),
    )
    .await
    .unwrap();
    let other = "captf-runner-other-tc";
    let refused = [
        (
            "a Secret outside CAPTF's names",
            json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "db-password", "namespace": "default" } }),
            "writes only captf-inputs-*, captf-outputs-* and tfstate-default-* Secrets, not db-password",
        ),
        (
            "another component's Lease",
            json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": "kube-scheduler", "namespace": "kube-system" } }),
            "Leases and its leader Leases, not kube-system/kube-scheduler",
        ),
        (
            "a Role outside the runner names",
            runner_role("admin", own_rules.clone()),
            "writes only captf-runner-* ServiceAccounts, Roles and RoleBindings, not admin",
        ),
        (
            "a runner Role granting every Secret",
            runner_role(
                other,
                json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "update", "patch"] }]),
            ),
            "a runner Role may grant only",
        ),
        (
            "a runner Role naming another object's state",
            runner_role(
                other,
                json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["tfstate-default-victim-tc"] }]),
            ),
            "a runner Role may grant only",
        ),
        (
            "a runner Role that may create",
            runner_role(
                other,
                json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"], "resourceNames": ["tfstate-default-other-tc"] }]),
            ),
            "a runner Role may grant only",
        ),
        (
            "a runner RoleBinding to another account",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": { "name": format!("captf-runner-{suffix}"), "namespace": "default" },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("captf-runner-{suffix}") },
                "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": "default" }],
            }),
            "must bind the Role captf-runner-rights-tc to the ServiceAccount captf-runner-rights-tc",
        ),
        (
            "a Job no CAPTF object owns",
            job(&format!("captf-runner-{suffix}"), false, json!([])),
            "must be controlled by a TerraformCluster",
        ),
        (
            "a Job running as the controller",
            job(CONTROLLER, false, owner.clone()),
            "must run as a runner account",
        ),
        (
            "a Job on the host's network",
            job(&format!("captf-runner-{suffix}"), true, owner.clone()),
            "may not use the host's network",
        ),
        (
            "an inputs-named Secret of type service-account-token (the API server would mint a token into it)",
            owned_secret(&format!("captf-inputs-{suffix}"), "kubernetes.io/service-account-token"),
            "writes only Secrets of type Opaque, not kubernetes.io/service-account-token",
        ),
        (
            "an Opaque inputs-named Secret without CAPTF's marks",
            json!({ "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": { "name": "captf-inputs-unmarked-tc", "namespace": "default" } }),
            "must be owned by a TerraformCluster, TerraformMachinePool or TerraformMachine or labelled tfstate=true",
        ),
        (
            "a Job pinned to a node",
            pod(json!({ "nodeName": "node-1" })),
            "may not choose its node by nodeName",
        ),
        (
            "a Job opening a host port",
            container(json!({ "ports": [{ "containerPort": 80, "hostPort": 80 }] })),
            "may not open host ports",
        ),
        (
            "a Job adding a capability",
            container(json!({ "securityContext": { "capabilities": { "add": ["SYS_ADMIN"] } } })),
            "may not add Linux capabilities",
        ),
        (
            "a Job running as root",
            pod(json!({ "securityContext": { "runAsUser": 0 } })),
            "may not run as user 0",
        ),
        (
            "a Job whose container runs as root",
            container(json!({ "securityContext": { "runAsUser": 0 } })),
            "may not run as user 0",
        ),
        (
            "a Job without seccomp",
            pod(json!({ "securityContext": { "seccompProfile": { "type": "Unconfined" } } })),
            "may not run Unconfined by seccomp or AppArmor",
        ),
        (
            "a Job without AppArmor",
            container(json!({ "securityContext": { "appArmorProfile": { "type": "Unconfined" } } })),
            "may not run Unconfined by seccomp or AppArmor",
        ),
        (
            "a Job without AppArmor by annotation",
            runner_job(json!({ "spec": { "template": { "metadata": { "annotations": {
                "container.apparmor.security.beta.kubernetes.io/runner": "unconfined" } } } } })),
            "may not run Unconfined by seccomp or AppArmor",
        ),
        (
            "a Job mounting an NFS volume",
            pod(json!({ "volumes": [{ "name": "n", "nfs": { "server": "10.0.0.1", "path": "/" } }] })),
            "may use only the volume kinds",
        ),
    ];
    for (what, doc, message) in refused {
        let got = refusal(create(&controller, &doc).await, what);
        assert!(
            got.contains("ValidatingAdmissionPolicy") && got.contains(message),
            "{what}: {got}"
        );
    }

    // And a runner Job of the object.
    create(&controller, &job(&format!("captf-runner-{suffix}"), false, owner))
        .await
        .unwrap();
}

/// `change` merged into `doc`: objects key by key, anything else replaced.
fn merge(doc: &mut Value, change: &Value) {
    match (doc, change) {
        (Value::Object(d), Value::Object(c)) => {
            for (k, v) in c {
                merge(d.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (d, c) => *d = c.clone(),
    }
}

/// The values of the namespaced install: the controller is bound in two namespaces.
const TWO_NAMESPACES: [&str; 2] = ["--set", "controller.watchNamespaces={ns-a,ns-b}"];

/// What kube-apiserver's authorizer answers for the controller's account (a SubjectAccessReview
/// the admin asks).
async fn controller_may(admin: &kube::Client, verb: &str, resource: &str, group: &str, ns: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{NAMESPACE}:{CONTROLLER}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{NAMESPACE}"), "system:authenticated"],
            "resourceAttributes": { "namespace": ns, "verb": verb, "group": group, "resource": resource },
        },
    }))
    .unwrap();
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    answer.status.unwrap().allowed
}

/// A 403 from the RBAC authorizer itself (not the admission policy, which only sees writes RBAC
/// let through): the message names the account, the verb, the resource and the namespace.
fn refused_by_rbac<T: std::fmt::Debug>(result: Result<T, kube::Error>, verb: &str, resource: &str, ns: &str) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{verb} {resource} in {ns}: {s:?}");
            let want = format!("cannot {verb} resource \"{resource}\"");
            assert!(
                s.message
                    .contains(&format!("system:serviceaccount:{NAMESPACE}:{CONTROLLER}"))
                    && s.message.contains(&want)
                    && s.message.contains(&format!("in the namespace \"{ns}\""))
                    && !s.message.contains("ValidatingAdmissionPolicy"),
                "{verb} {resource} in {ns}: {}",
                s.message
            );
        }
        other => panic!("{verb} {resource} in {ns}: not refused: {other:?}"),
    }
}

/// With `controller.watchNamespaces={ns-a,ns-b}` the chart binds the controller's ClusterRole in
/// those two namespaces only. The shipped binary, run with the Deployment's own arguments under
/// that RBAC (leader election through the chart's Role in the release namespace), takes an object
/// in `ns-a` to its first Job and leaves one in `ns-c` alone; kube-apiserver's authorizer refuses
/// the controller's token Secrets and Jobs in `ns-c`, which it does not watch.
#[tokio::test]
async fn a_controller_watching_listed_namespaces_starts_a_job_there_and_its_token_is_refused_secrets_and_jobs_elsewhere_on_the_real_api_server()
 {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    crds(&admin).await;
    for ns in ["ns-a", "ns-b", "ns-c"] {
        namespace(&admin, ns).await;
    }
    let rendered = helm_template(&TWO_NAMESPACES).unwrap();
    assert!(
        rendered
            .of_kind("ClusterRoleBinding")
            .iter()
            .all(|b| b["roleRef"]["name"] != CONTROLLER),
        "no cluster-wide binding of the controller's rules"
    );
    let deployment = rendered.get("Deployment", CONTROLLER).unwrap();
    let chart_args = captf_chart_tests::strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    let namespace_flag = chart_args
        .iter()
        .find(|a| a.starts_with("--namespace="))
        .cloned()
        .unwrap();
    assert_eq!(namespace_flag, "--namespace=ns-a,ns-b");
    assert!(chart_args.iter().any(|a| a == "--leader-elect"));
    let controller = install_controller_rights_with(
        &cp,
        &admin,
        &TWO_NAMESPACES,
        &[
            "ServiceAccount",
            "ClusterRole",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
        "ns-a",
    )
    .await;

    let in_ns = |ns: &str| {
        let mut doc = terraform_cluster();
        doc["metadata"]["namespace"] = json!(ns);
        doc
    };
    for ns in ["ns-a", "ns-c"] {
        create(&admin, &in_ns(ns)).await.unwrap();
    }
    let resource = resource_of(&terraform_cluster()).0;
    let clusters_a: Api<DynamicObject> = Api::namespaced_with(admin.clone(), "ns-a", &resource);
    let clusters_c: Api<DynamicObject> = Api::namespaced_with(admin.clone(), "ns-c", &resource);
    let uid = clusters_a.get(OBJECT).await.unwrap().metadata.uid.unwrap();

    let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
    let log_path = cp.work_dir().join("captf-controller-namespaces.log");
    let mut process = common::spawn_controller(
        &kubeconfig,
        &log_path,
        &[
            namespace_flag.as_str(),
            "--leader-elect",
            "--runner-image=ghcr.io/captf/runner:0.1.0",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        &[
            ("POD_NAMESPACE", NAMESPACE),
            ("POD_NAME", "captf-controller-0"),
            ("RUST_LOG", "info"),
        ],
    );

    let clusters = clusters_a.clone();
    let active = wait_for("status.activeJob of the TerraformCluster in ns-a", || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get(OBJECT).await.ok()?;
            c.data["status"]["activeJob"].as_str().map(str::to_string)
        }
    })
    .await;
    let job = Api::<Job>::namespaced(admin.clone(), "ns-a")
        .get(&active)
        .await
        .unwrap();
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, uid);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "ns-a");
    let selector = format!("job-name={active}");
    wait_for("the Job's pod in ns-a", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&ListParams::default().labels(&selector))
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        }
    })
    .await;
    // The leader Lease, in the release namespace through the chart's leader-election Role.
    let leases: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        NAMESPACE,
        &resource_of(&json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"})).0,
    );
    let holder = leases.get("captf-controller-leader").await.unwrap().data["spec"]["holderIdentity"].clone();
    assert_eq!(holder, json!("captf-controller-0"));
    // A shard (its own label selector) elects its own leader through its own Lease, which the
    // chart's RBAC and admission policy let it write beside the first.
    let shard_log = cp.work_dir().join("captf-controller-shard.log");
    let mut shard = common::spawn_controller(
        &kubeconfig,
        &shard_log,
        &[
            namespace_flag.as_str(),
            "--leader-elect",
            "--watch-label-selector=sharding.captf.io/key=blue",
            "--runner-image=ghcr.io/captf/runner:0.1.0",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        &[
            ("POD_NAMESPACE", NAMESPACE),
            ("POD_NAME", "captf-controller-shard-0"),
            ("RUST_LOG", "info"),
        ],
    );
    let shard_lease = wait_for("the shard's own leader Lease", || {
        let leases = leases.clone();
        async move {
            leases
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|l| {
                    l.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("captf-controller-leader-"))
                        && l.data["spec"]["holderIdentity"] == json!("captf-controller-shard-0")
                })
        }
    })
    .await;
    assert_ne!(shard_lease.metadata.name.as_deref(), Some("captf-controller-leader"));
    let holder = leases.get("captf-controller-leader").await.unwrap().data["spec"]["holderIdentity"].clone();
    assert_eq!(
        holder,
        json!("captf-controller-0"),
        "the first instance still leads its own"
    );
    assert!(
        shard.try_wait().unwrap().is_none(),
        "{}",
        std::fs::read_to_string(&shard_log).unwrap_or_default()
    );
    shard.kill().await.unwrap();

    // The object in ns-c: never looked at.
    let ignored = clusters_c.get(OBJECT).await.unwrap();
    assert!(
        ignored.metadata.finalizers.as_ref().is_none_or(Vec::is_empty),
        "{ignored:?}"
    );
    assert!(ignored.data.get("status").is_none_or(Value::is_null), "{ignored:?}");
    assert!(
        Api::<Job>::namespaced(admin.clone(), "ns-c")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The authorizer: allowed where the chart binds the controller, refused in ns-c.
    for (verb, resource, group) in [
        ("get", "secrets", ""),
        ("list", "secrets", ""),
        ("create", "secrets", ""),
        ("create", "jobs", "batch"),
        ("list", "jobs", "batch"),
    ] {
        for ns in ["ns-a", "ns-b"] {
            assert!(
                controller_may(&admin, verb, resource, group, ns).await,
                "{verb} {resource} in {ns}"
            );
        }
        assert!(
            !controller_may(&admin, verb, resource, group, "ns-c").await,
            "{verb} {resource} in ns-c"
        );
    }
    // And the controller's own token, directly: a Secret there to read, one under CAPTF's names
    // (which the admission policy would let through) to write, a runner-shaped Job to start.
    create(
        &admin,
        &json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "cloud-credentials", "namespace": "ns-c" } }),
    )
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(controller.clone(), "ns-c");
    refused_by_rbac(secrets.get("cloud-credentials").await, "get", "secrets", "ns-c");
    refused_by_rbac(secrets.list(&ListParams::default()).await, "list", "secrets", "ns-c");
    let captf_secret: Secret =
        serde_json::from_value(json!({ "metadata": { "name": "captf-inputs-rights-tc" } })).unwrap();
    refused_by_rbac(
        secrets.create(&PostParams::default(), &captf_secret).await,
        "create",
        "secrets",
        "ns-c",
    );
    let jobs: Api<Job> = Api::namespaced(controller.clone(), "ns-c");
    refused_by_rbac(jobs.list(&ListParams::default()).await, "list", "jobs", "ns-c");
    let runner_job: Job = serde_json::from_value(json!({
        "metadata": { "name": "probe" },
        "spec": { "template": { "spec": {
            "serviceAccountName": "captf-runner-rights-tc", "restartPolicy": "Never",
            "containers": [{ "name": "runner", "image": "ghcr.io/captf/runner:0.1.0" }],
        } } },
    }))
    .unwrap();
    refused_by_rbac(
        jobs.create(&PostParams::default(), &runner_job).await,
        "create",
        "jobs",
        "ns-c",
    );

    assert!(
        process.try_wait().unwrap().is_none(),
        "the controller exited: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    process.kill().await.unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !text.contains("forbidden") && !text.contains("Forbidden"),
        "the controller was refused a call (it should never call outside ns-a and ns-b):\n{text}"
    );
}

/// Each object's runner runs under its own account, made by the controller under the chart's
/// rights: the real authorizer lets it read and write its own state, lock and outputs, and
/// refuses another object's, by name (`resourceNames`), with a 403.
#[tokio::test]
async fn one_objects_runner_is_refused_another_objects_state_lock_and_outputs_on_the_real_api_server() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    crds(&admin).await;
    install_controller_rights(&cp, &admin).await;
    for name in ["iso-a", "iso-b"] {
        let mut doc = terraform_cluster();
        doc["metadata"]["name"] = json!(name);
        create(&admin, &doc).await.unwrap();
    }
    let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
    let log_path = cp.work_dir().join("captf-controller-isolation.log");
    let mut controller = common::spawn_controller(
        &kubeconfig,
        &log_path,
        &[
            "--namespace=default",
            "--runner-image=ghcr.io/captf/runner:0.1.0",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        &[("POD_NAMESPACE", NAMESPACE), ("RUST_LOG", "info")],
    );
    // Both objects get their first Job, so each runner identity and state object exists.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "default", &resource_of(&terraform_cluster()).0);
    for name in ["iso-a", "iso-b"] {
        let clusters = clusters.clone();
        wait_for(&format!("the first Job of {name}"), || {
            let clusters = clusters.clone();
            async move {
                let c = clusters.get(name).await.ok()?;
                c.data["status"]["activeJob"].as_str().map(|_| ())
            }
        })
        .await;
    }
    let runner_a = cp
        .service_account_client("default", "captf-runner-iso-a-tc")
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(runner_a.clone(), "default");
    let leases: Api<DynamicObject> = Api::namespaced_with(
        runner_a,
        "default",
        &ApiResource {
            group: "coordination.k8s.io".into(),
            version: "v1".into(),
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
            plural: "leases".into(),
        },
    );
    // Its own: allowed.
    secrets.get("tfstate-default-iso-a-tc").await.unwrap();
    secrets.get("captf-outputs-iso-a-tc").await.unwrap();
    leases.get("lock-tfstate-default-iso-a-tc").await.unwrap();
    // The other object's: refused by the authorizer, by name.
    for (what, result) in [
        (
            "the other state",
            secrets.get("tfstate-default-iso-b-tc").await.map(|_| ()),
        ),
        (
            "the other outputs",
            secrets.get("captf-outputs-iso-b-tc").await.map(|_| ()),
        ),
        (
            "the other inputs",
            secrets.get("captf-inputs-iso-b-tc").await.map(|_| ()),
        ),
        (
            "the other lock",
            leases.get("lock-tfstate-default-iso-b-tc").await.map(|_| ()),
        ),
    ] {
        let message = refusal(result, what);
        assert!(
            message.contains("system:serviceaccount:default:captf-runner-iso-a-tc"),
            "{what}: {message}"
        );
    }
    // Nor may it list Secrets to find them.
    let listed = secrets.list(&ListParams::default()).await.map(|_| ());
    refusal(listed, "listing Secrets");
    controller.kill().await.unwrap();
}
