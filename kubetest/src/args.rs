//! The command lines of the three components, from where their files are and which ports they
//! have: data in, arguments out.

use std::path::{Path, PathBuf};

use crate::pki::KUBERNETES_SERVICE_IP;

/// The controllers kube-controller-manager runs: what CAPTF's objects rely on (Jobs, owner
/// references, namespace deletion, service accounts and their tokens, the `kube-root-ca.crt`
/// ConfigMap a projected token volume reads, finished-Job clean-up), the aggregation of
/// ClusterRoles that Cluster API's manager role is built by, the Deployments and ReplicaSets that
/// make an installed chart's pods, and the EndpointSlices that put ready pods behind their
/// Services (pods on the host's network have addresses an EndpointSlice may hold; a loopback
/// pod's is refused, and a component run as a process, not a pod, is routed by the test:
/// `route::route_service`).
pub const CONTROLLERS: [&str; 11] = [
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",
];

/// The controllers added when the control plane lets nodes join (`Options::node_joins`), as a
/// cluster `kubeadm init` made runs them: the CertificateSigningRequest approver (it approves a
/// kubelet's client certificate request when RBAC lets the requester create
/// `certificatesigningrequests/nodeclient` or `/selfnodeclient`) and signer (with the control
/// plane's CA), the bootstrap signer (it signs the `cluster-info` ConfigMap with each bootstrap
/// token meant for signing) and the token cleaner (it deletes expired bootstrap tokens), and the
/// node lifecycle controller (it marks a Node whose heartbeats stopped `Ready=Unknown`).
pub const NODE_JOIN_CONTROLLERS: [&str; 5] = [
    "certificatesigningrequest-approving-controller",
    "certificatesigningrequest-signing-controller",
    "bootstrap-signer-controller",
    "token-cleaner-controller",
    "node-lifecycle-controller",
];

/// How long a Node may go without a heartbeat (its Lease renewed, or its Ready condition posted)
/// before the node lifecycle controller marks it `Ready=Unknown`, when nodes join: 20 s instead of
/// 50 s, so that a test sees a dead node quickly. Nothing in the API enforces a lower bound, but
/// the grace must be a few times the interval at which nodes renew their Lease (a kubelet's and
/// the process kubelet's by default: 10 s; the node agent's: 5 s), or a live but slow node flaps
/// to `Unknown`.
pub const NODE_MONITOR_GRACE_PERIOD: &str = "20s";

/// How often the node lifecycle controller looks at the Nodes' heartbeats when nodes join (its
/// default is 5 s): a dead node is `Unknown` at most this long after its grace ended.
pub const NODE_MONITOR_PERIOD: &str = "2s";

/// The admission plugins the API server runs, beyond which it would run by default: the
/// webhook plugins are named so that a change of upstream defaults cannot drop them, and
/// OwnerReferencesPermissionEnforcement (off by default, on in many hardened and managed
/// clusters) so that an owner reference with `blockOwnerDeletion` needs the right to update the
/// owner's finalizers, as it does there.
pub const ADMISSION_PLUGINS: [&str; 10] = [
    "NamespaceLifecycle",
    "ServiceAccount",
    "NodeRestriction",
    "LimitRanger",
    "ResourceQuota",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "OwnerReferencesPermissionEnforcement",
];

/// The issuer written into service-account tokens (and the default audience).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Where one start keeps its files, and the ports it was given.
#[derive(Clone, Debug)]
pub struct Layout {
    pub dir: PathBuf,
    pub etcd_client_port: u16,
    pub etcd_peer_port: u16,
    pub apiserver_port: u16,
    pub controller_manager_port: u16,
    /// The etcd the API server stores in; `None`: the one started here.
    pub etcd_servers: Option<String>,
    /// Nodes may join with bootstrap tokens (`Options::node_joins`).
    pub node_joins: bool,
}

impl Layout {
    pub fn pki(&self, file: &str) -> PathBuf {
        self.dir.join("pki").join(file)
    }

    pub fn etcd_data(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    pub fn log(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.log"))
    }

    pub fn etcd_client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_client_port)
    }

    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    pub fn controller_manager_kubeconfig(&self) -> PathBuf {
        self.dir.join("controller-manager.kubeconfig")
    }
}

fn flag(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// etcd: one member on loopback, no fsync (the data is thrown away after the test).
pub fn etcd(l: &Layout) -> Vec<String> {
    let peer = format!("http://127.0.0.1:{}", l.etcd_peer_port);
    vec![
        flag("name", "kubetest"),
        flag("data-dir", path(&l.etcd_data())),
        flag("listen-client-urls", l.etcd_client_url()),
        flag("advertise-client-urls", l.etcd_client_url()),
        flag("listen-peer-urls", &peer),
        flag("initial-advertise-peer-urls", &peer),
        flag("initial-cluster", format!("kubetest={peer}")),
        "--unsafe-no-fsync".to_string(),
        flag("log-level", "warn"),
    ]
}

/// kube-apiserver: secure port on loopback only, client certificates and service-account
/// tokens, Node and RBAC authorization, admission with the webhook plugins; bootstrap tokens too
/// when nodes join.
pub fn apiserver(l: &Layout) -> Vec<String> {
    let etcd = l.etcd_servers.clone().unwrap_or_else(|| l.etcd_client_url());
    let mut args = vec![
        flag("etcd-servers", etcd),
        flag("bind-address", "127.0.0.1"),
        flag("advertise-address", "127.0.0.1"),
        flag("secure-port", l.apiserver_port),
        flag("cert-dir", path(&l.dir.join("apiserver-certs"))),
        flag("tls-cert-file", path(&l.pki("apiserver.crt"))),
        flag("tls-private-key-file", path(&l.pki("apiserver.key"))),
        flag("client-ca-file", path(&l.pki("ca.crt"))),
        flag("service-account-issuer", SERVICE_ACCOUNT_ISSUER),
        flag("service-account-key-file", path(&l.pki("sa.pub"))),
        flag("service-account-signing-key-file", path(&l.pki("sa.key"))),
        flag("api-audiences", SERVICE_ACCOUNT_ISSUER),
        flag("authorization-mode", "Node,RBAC"),
        flag("enable-admission-plugins", ADMISSION_PLUGINS.join(",")),
        flag("service-cluster-ip-range", format!("{KUBERNETES_SERVICE_IP}/24")),
        flag("enable-aggregator-routing", "true"),
        // No kubelets or other API servers to reconcile the `kubernetes` endpoints with.
        flag("endpoint-reconciler-type", "none"),
        flag("allow-privileged", "true"),
        flag("profiling", "false"),
        flag("v", "1"),
    ];
    if l.node_joins {
        args.push(flag("enable-bootstrap-token-auth", "true"));
    }
    args
}

/// kube-controller-manager: the [`CONTROLLERS`], each under its own service account, no
/// leader election (there is one); when nodes join, the [`NODE_JOIN_CONTROLLERS`] too, signing
/// with the control plane's CA, and the node lifecycle controller's
/// [`NODE_MONITOR_GRACE_PERIOD`].
pub fn controller_manager(l: &Layout) -> Vec<String> {
    let kubeconfig = path(&l.controller_manager_kubeconfig());
    let mut controllers = CONTROLLERS.to_vec();
    if l.node_joins {
        controllers.extend(NODE_JOIN_CONTROLLERS);
    }
    let mut args = vec![
        flag("kubeconfig", &kubeconfig),
        flag("authentication-kubeconfig", &kubeconfig),
        flag("authorization-kubeconfig", &kubeconfig),
        flag("controllers", controllers.join(",")),
        flag("use-service-account-credentials", "true"),
        flag("service-account-private-key-file", path(&l.pki("sa.key"))),
        flag("root-ca-file", path(&l.pki("ca.crt"))),
        flag("leader-elect", "false"),
        flag("bind-address", "127.0.0.1"),
        flag("secure-port", l.controller_manager_port),
        flag("cert-dir", path(&l.dir.join("controller-manager-certs"))),
        flag("profiling", "false"),
        flag("v", "1"),
    ];
    if l.node_joins {
        args.extend([
            flag("cluster-signing-cert-file", path(&l.pki("ca.crt"))),
            flag("cluster-signing-key-file", path(&l.pki("ca.key"))),
            flag("node-monitor-grace-period", NODE_MONITOR_GRACE_PERIOD),
            flag("node-monitor-period", NODE_MONITOR_PERIOD),
        ]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/w"),
            etcd_client_port: 2001,
            etcd_peer_port: 2002,
            apiserver_port: 6443,
            controller_manager_port: 10257,
            etcd_servers: None,
            node_joins: false,
        }
    }

    fn controllers(args: &[String]) -> Vec<String> {
        args.iter()
            .find_map(|a| a.strip_prefix("--controllers="))
            .unwrap_or_default()
            .split(',')
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_api_server_stores_in_the_etcd_started_beside_it_unless_told_otherwise() {
        let mut l = layout();
        assert!(apiserver(&l).contains(&"--etcd-servers=http://127.0.0.1:2001".to_string()));
        l.etcd_servers = Some("http://127.0.0.1:9".into());
        let args = apiserver(&l);
        assert!(args.contains(&"--etcd-servers=http://127.0.0.1:9".to_string()));
        assert!(!args.iter().any(|a| a.contains(":2001")), "{args:?}");
    }

    #[test]
    fn the_api_server_authorizes_with_node_and_rbac_and_admits_through_webhooks() {
        let args = apiserver(&layout());
        assert!(args.contains(&"--authorization-mode=Node,RBAC".to_string()));
        let admission = args
            .iter()
            .find_map(|a| a.strip_prefix("--enable-admission-plugins="))
            .unwrap_or_default();
        for plugin in [
            "MutatingAdmissionWebhook",
            "ValidatingAdmissionWebhook",
            "ServiceAccount",
        ] {
            assert!(admission.split(',').any(|p| p == plugin), "{plugin} not in {admission}");
        }
    }

    #[test]
    fn every_component_listens_on_loopback_only() {
        let l = layout();
        for a in etcd(&l).iter().filter(|a| a.starts_with("--listen-")) {
            assert!(a.contains("//127.0.0.1:"), "{a}");
        }
        assert!(apiserver(&l).contains(&"--bind-address=127.0.0.1".to_string()));
        assert!(controller_manager(&l).contains(&"--bind-address=127.0.0.1".to_string()));
    }

    #[test]
    fn the_controller_manager_runs_the_job_gc_namespace_and_service_account_controllers() {
        let args = controller_manager(&layout());
        let list = args
            .iter()
            .find_map(|a| a.strip_prefix("--controllers="))
            .unwrap_or_default();
        for c in [
            "job-controller",
            "garbage-collector-controller",
            "namespace-controller",
            "serviceaccount-controller",
            "serviceaccount-token-controller",
        ] {
            assert!(list.split(',').any(|x| x == c), "{c} not in {list}");
        }
    }

    #[test]
    fn without_node_joins_there_are_no_bootstrap_tokens_signers_or_node_lifecycle() {
        let l = layout();
        let apiserver = apiserver(&l);
        assert!(
            !apiserver.iter().any(|a| a.contains("bootstrap-token")),
            "{apiserver:?}"
        );
        let cm = controller_manager(&l);
        let list = controllers(&cm);
        for c in NODE_JOIN_CONTROLLERS {
            assert!(!list.iter().any(|x| x == c), "{c} in {list:?}");
        }
        assert!(!cm.iter().any(|a| a.starts_with("--cluster-signing-")), "{cm:?}");
        assert!(!cm.iter().any(|a| a.starts_with("--node-monitor-")), "{cm:?}");
    }

    #[test]
    fn with_node_joins_the_api_server_authenticates_bootstrap_tokens() {
        let mut l = layout();
        l.node_joins = true;
        assert!(apiserver(&l).contains(&"--enable-bootstrap-token-auth=true".to_string()));
    }

    #[test]
    fn with_node_joins_the_controller_manager_approves_signs_with_the_ca_and_watches_node_health() {
        let mut l = layout();
        l.node_joins = true;
        let args = controller_manager(&l);
        let list = controllers(&args);
        for c in CONTROLLERS.iter().chain(NODE_JOIN_CONTROLLERS.iter()) {
            assert!(list.iter().any(|x| x == c), "{c} not in {list:?}");
        }
        assert_eq!(
            args.iter().filter(|a| a.starts_with("--controllers=")).count(),
            1,
            "{args:?}"
        );
        assert!(args.contains(&"--cluster-signing-cert-file=/w/pki/ca.crt".to_string()));
        assert!(args.contains(&"--cluster-signing-key-file=/w/pki/ca.key".to_string()));
        assert!(args.contains(&"--node-monitor-grace-period=20s".to_string()));
    }
}
