//! The webhook configurations point at the rendered Service, on the webhook's own routes, and
//! the API server can trust the certificate (cert-manager chain or your own).

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::{OWN_CERTIFICATE, OWN_ISSUER, WEBHOOK_LOCKDOWN};
use captf_chart_tests::{NAMESPACE, Rendered, helm_template, helm_template_error, strings};
use serde_json::Value;

const KINDS: [&str; 6] = [
    "terraformclusters",
    "terraformmachinepools",
    "terraformmachines",
    "terraformmachinetemplates",
    "terraformclustertemplates",
    "terraformmachinepooltemplates",
];

fn configurations(r: &Rendered) -> Vec<(&'static str, &Value)> {
    let m = r.get("MutatingWebhookConfiguration", "captf-webhook").unwrap();
    let v = r.get("ValidatingWebhookConfiguration", "captf-webhook").unwrap();
    vec![(captf_webhook::MUTATE_PATH, m), (captf_webhook::VALIDATE_PATH, v)]
}

/// The port of an `addr` like `0.0.0.0:9443`.
fn port_of(addr: &str) -> u64 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// The container port a Service port's targetPort names.
fn container_port(pod: &Value, target: &Value) -> u64 {
    match target {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(name) => pod["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
            .as_u64()
            .unwrap(),
        other => panic!("targetPort {other}"),
    }
}

/// The entry of a list (volumes, volume mounts) with this name.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn arg<'a>(args: &'a [String], flag: &str) -> &'a str {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .unwrap_or_else(|| panic!("{flag} missing from {args:?}"))
}

#[test]
fn webhook_configurations_call_the_rendered_service_on_the_webhooks_own_routes() {
    let r = helm_template(&[]).unwrap();
    let svc = r.get("Service", "captf-webhook").unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    for (path, conf) in configurations(&r) {
        let hooks = conf["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 1);
        let cc = &hooks[0]["clientConfig"]["service"];
        assert_eq!(cc["name"], svc["metadata"]["name"]);
        assert_eq!(cc["namespace"], NAMESPACE);
        assert_eq!(cc["namespace"], svc["metadata"]["namespace"]);
        assert_eq!(cc["path"], path, "the route constant of captf_webhook");
        let port = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == cc["port"])
            .unwrap_or_else(|| panic!("the Service has no port {}", cc["port"]));
        // The Service forwards to the port the webhook listens on by default.
        let target = container_port(pod, &port["targetPort"]);
        assert_eq!(target, port_of(captf_webhook::DEFAULT_ADDR));
        let args = strings(&pod["containers"][0]["args"]);
        assert_eq!(port_of(arg(&args, "--addr")), target);
    }
    // The Service selects the webhook pods.
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels(deploy)[k], v, "selector {k}");
    }
}

fn pod_labels(deploy: &Value) -> &Value {
    &deploy["spec"]["template"]["metadata"]["labels"]
}

#[test]
fn webhook_configurations_match_the_six_kinds_on_create_and_update_and_fail_closed() {
    let r = helm_template(&[]).unwrap();
    for (_, conf) in configurations(&r) {
        let hook = &conf["webhooks"][0];
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(strings(&hook["admissionReviewVersions"]), ["v1"]);
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["timeoutSeconds"], 5);
        let rules = hook["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 1);
        let rule = &rules[0];
        assert_eq!(strings(&rule["apiGroups"]), [captf_shared::keys::GROUP]);
        assert_eq!(strings(&rule["apiVersions"]), [captf_shared::keys::VERSION]);
        assert_eq!(strings(&rule["operations"]), ["CREATE", "UPDATE"]);
        assert_eq!(strings(&rule["resources"]), KINDS);
        let served: Vec<String> = captf_shared::types::SERVED_KINDS
            .iter()
            .map(|k| format!("{}s", k.to_lowercase()))
            .collect();
        assert_eq!(strings(&rule["resources"]), served, "every kind the webhook serves");
    }
}

#[test]
fn webhook_pods_mount_the_certificate_secret_and_are_ready_on_readyz() {
    let r = helm_template(&[]).unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], captf_webhook::READYZ_PATH);
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], captf_webhook::HEALTHZ_PATH);
    let args = strings(&c["args"]);
    let mount = named(&c["volumeMounts"], "tls");
    let dir = mount["mountPath"].as_str().unwrap();
    assert_eq!(mount["readOnly"], true);
    assert_eq!(arg(&args, "--tls-cert-file"), format!("{dir}/tls.crt"));
    assert_eq!(arg(&args, "--tls-key-file"), format!("{dir}/tls.key"));
    let volume = named(&pod["volumes"], "tls");
    let cert = r.get("Certificate", "captf-webhook").unwrap();
    assert_eq!(volume["secret"]["secretName"], cert["spec"]["secretName"]);
    // The metrics port is plain HTTP on the default metrics address.
    assert_eq!(
        port_of(arg(&args, "--metrics-addr")),
        port_of(captf_webhook::DEFAULT_METRICS_ADDR)
    );
}

#[test]
fn cert_manager_chain_goes_from_self_signed_to_ca_to_the_serving_certificate_for_the_service() {
    let r = helm_template(&[]).unwrap();
    let selfsigned = r.get("Issuer", "captf-selfsigned").unwrap();
    assert!(selfsigned["spec"]["selfSigned"].is_object());
    let ca = r.get("Certificate", "captf-ca").unwrap();
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(ca["spec"]["issuerRef"]["name"], "captf-selfsigned");
    assert_eq!(ca["spec"]["issuerRef"]["kind"], "Issuer");
    let ca_issuer = r.get("Issuer", "captf-ca").unwrap();
    assert_eq!(ca_issuer["spec"]["ca"]["secretName"], ca["spec"]["secretName"]);
    let serving = r.get("Certificate", "captf-webhook").unwrap();
    assert_eq!(serving["spec"]["issuerRef"]["name"], "captf-ca");
    assert_ne!(serving["spec"]["isCA"], true);
    let dns = strings(&serving["spec"]["dnsNames"]);
    let svc = r.get("Service", "captf-webhook").unwrap();
    let name = svc["metadata"]["name"].as_str().unwrap();
    assert!(dns.contains(&format!("{name}.{NAMESPACE}.svc")), "{dns:?}");
    assert!(
        dns.contains(&format!("{name}.{NAMESPACE}.svc.cluster.local")),
        "{dns:?}"
    );
    for doc in [selfsigned, ca, ca_issuer, serving] {
        assert_eq!(doc["metadata"]["namespace"], NAMESPACE);
    }
    // Both configurations get the CA injected from the serving Certificate.
    for (_, conf) in configurations(&r) {
        assert_eq!(
            conf["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/captf-webhook")
        );
        assert!(conf["webhooks"][0]["clientConfig"].get("caBundle").is_none());
    }
}

#[test]
fn own_certificate_replaces_cert_manager_with_the_given_secret_and_ca_bundle() {
    let r = helm_template(OWN_CERTIFICATE).unwrap();
    assert!(r.of_kind("Certificate").is_empty());
    assert!(r.of_kind("Issuer").is_empty());
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    assert!(volumes.iter().any(|v| v["secret"]["secretName"] == "my-webhook-tls"));
    for (_, conf) in configurations(&r) {
        assert!(
            conf["metadata"]["annotations"]
                .get("cert-manager.io/inject-ca-from")
                .is_none()
        );
        assert_eq!(conf["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=");
    }
}

#[test]
fn an_issuer_you_run_signs_the_serving_certificate_and_the_charts_own_ca_is_not_rendered() {
    let r = helm_template(OWN_ISSUER).unwrap();
    assert!(r.of_kind("Issuer").is_empty(), "no self-signed or CA Issuer");
    let certificates = r.of_kind("Certificate");
    assert_eq!(certificates.len(), 1, "only the serving certificate");
    let serving = certificates[0];
    assert_eq!(serving["metadata"]["name"], "captf-webhook");
    assert_eq!(
        serving["spec"]["issuerRef"],
        serde_json::json!({ "group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca" })
    );
    let dns = strings(&serving["spec"]["dnsNames"]);
    assert!(dns.contains(&format!("captf-webhook.{NAMESPACE}.svc")), "{dns:?}");
    // cainjector still copies the issuer's CA (the Secret's ca.crt) into both configurations.
    for (_, conf) in configurations(&r) {
        assert_eq!(
            conf["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/captf-webhook")
        );
    }
    // An external issuer keeps its own group.
    let r = helm_template(&[
        "--set",
        "webhook.tls.certManager.issuerRef.name=vault",
        "--set",
        "webhook.tls.certManager.issuerRef.kind=VaultIssuer",
        "--set",
        "webhook.tls.certManager.issuerRef.group=vault.example.com",
    ])
    .unwrap();
    let serving = r.get("Certificate", "captf-webhook").unwrap();
    assert_eq!(serving["spec"]["issuerRef"]["group"], "vault.example.com");
    assert_eq!(serving["spec"]["issuerRef"]["kind"], "VaultIssuer");
}

#[test]
fn ports_two_servers_would_share_refuse_to_render_naming_both_values() {
    let err = helm_template_error(&["--set", "webhook.metricsPort=9443"])
        .unwrap()
        .expect("rendering fails");
    assert!(
        err.contains("webhook.port and webhook.metricsPort are both 9443"),
        "{err}"
    );
    let err = helm_template_error(&["--set", "webhook.port=8080"])
        .unwrap()
        .expect("rendering fails");
    assert!(err.contains("are both 8080"), "{err}");
    let err = helm_template_error(&["--set", "controller.healthPort=8080"])
        .unwrap()
        .expect("rendering fails");
    assert!(
        err.contains("controller.metricsPort and controller.healthPort are both 8080"),
        "{err}"
    );
}

/// Every rule bound to the webhook's account, as (group, resource, verbs).
fn webhook_grants(r: &Rendered) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
    let mut grants = Vec::new();
    for binding in r
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .chain(r.of_kind("RoleBinding"))
    {
        if !binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "captf-webhook")
        {
            continue;
        }
        let role = r
            .get(
                binding["roleRef"]["kind"].as_str().unwrap(),
                binding["roleRef"]["name"].as_str().unwrap(),
            )
            .unwrap();
        for rule in role["rules"].as_array().unwrap() {
            grants.push((
                strings(&rule["apiGroups"]),
                strings(&rule["resources"]),
                strings(&rule["verbs"]),
            ));
        }
    }
    grants
}

#[test]
fn the_webhooks_one_right_is_to_ask_who_may_approve() {
    let r = helm_template(&[]).unwrap();
    let sa = r.get("ServiceAccount", "captf-webhook").unwrap();
    assert_eq!(
        sa["automountServiceAccountToken"], false,
        "mounted only into the webhook's pod"
    );
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    assert_eq!(deploy["spec"]["template"]["spec"]["automountServiceAccountToken"], true);
    assert_eq!(
        webhook_grants(&r),
        [(
            vec!["authorization.k8s.io".to_string()],
            vec!["subjectaccessreviews".to_string()],
            vec!["create".to_string()]
        )]
    );
    let config = webhook_config(&[]);
    assert_eq!(config.approvals.approver_role, "captf-approver");
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.contains(&"--authorize-approvals=true".to_string()), "{args:?}");
    assert!(args.contains(&"--authorize-timeout=3s".to_string()), "{args:?}");

    // The approver ClusterRole: the verb and nothing else, bound to nobody, not aggregated.
    let approver = r.get("ClusterRole", "captf-approver").unwrap();
    let rules = approver["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(strings(&rules[0]["verbs"]), ["approve"]);
    assert_eq!(strings(&rules[0]["apiGroups"]), ["infrastructure.cluster.x-k8s.io"]);
    assert_eq!(strings(&rules[0]["resources"]).len(), 6);
    assert!(
        approver["metadata"]["labels"]
            .get("rbac.authorization.k8s.io/aggregate-to-admin")
            .is_none()
    );
    for binding in r
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .chain(r.of_kind("RoleBinding"))
    {
        assert_ne!(
            binding["roleRef"]["name"], "captf-approver",
            "the chart binds approvers to nobody"
        );
    }
    let aggregated = helm_template(&["--set", "approvals.aggregateToAdmin=true"]).unwrap();
    assert_eq!(
        aggregated.get("ClusterRole", "captf-approver").unwrap()["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
}

#[test]
fn with_approvals_unchecked_the_webhook_needs_no_api_access() {
    let r = helm_template(&["--set", "approvals.authorize=false"]).unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    assert_eq!(
        deploy["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    assert!(webhook_grants(&r).is_empty(), "the webhook is bound to nothing");
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.contains(&"--authorize-approvals=false".to_string()), "{args:?}");
    assert!(
        r.get("ClusterRole", "captf-approver").is_some(),
        "the role is there to bind anyway"
    );
}

/// The webhook's container args, parsed by the binary's own flags into its config.
fn webhook_config(extra: &[&str]) -> captf_webhook::Config {
    use clap::Parser;
    let r = helm_template(extra).unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    let cli = captf_webhook::cli::Cli::try_parse_from(std::iter::once("captf-webhook".to_string()).chain(args))
        .unwrap_or_else(|e| panic!("the rendered args do not parse: {e}"));
    cli.serve.to_config().unwrap()
}

#[test]
fn the_webhook_limit_values_default_to_the_binarys_own_defaults() {
    use clap::Parser;
    let chart = webhook_config(&[]);
    let binary = captf_webhook::cli::Cli::try_parse_from(["captf-webhook", "--tls-cert-file=c", "--tls-key-file=k"])
        .unwrap()
        .serve
        .to_config()
        .unwrap();
    assert_eq!(chart.limits, binary.limits);
    assert_eq!(chart.max_connections, binary.max_connections);
    assert_eq!(chart.max_connections_per_peer, binary.max_connections_per_peer);
    assert_eq!(chart.reserved_connections, binary.reserved_connections);
    assert_eq!(chart.api_server_addresses, binary.api_server_addresses);
    assert_eq!(chart.header_read_timeout, binary.header_read_timeout);
    assert_eq!(chart.body_timeout, binary.body_timeout);
    assert_eq!(chart.idle_timeout, binary.idle_timeout);
    assert_eq!(chart.max_connection_age, binary.max_connection_age);
    assert_eq!(chart.max_requests_per_connection, binary.max_requests_per_connection);
    assert_eq!(chart.http2_max_streams, binary.http2_max_streams);
}

#[test]
fn each_webhook_limit_value_reaches_its_flag() {
    use std::time::Duration;
    let c = webhook_config(&[
        "--set",
        "webhook.limits.maxBodyBytes=3Mi",
        "--set",
        "webhook.limits.maxInFlightRequests=5000000",
        "--set",
        "webhook.limits.maxInFlightBytes=64Mi",
        "--set",
        "webhook.limits.largeReviews=3",
        "--set",
        "webhook.limits.largeReviewWait=2s",
        "--set",
        "webhook.limits.maxConnections=1000",
        "--set",
        "webhook.limits.headerReadTimeout=4s",
        "--set",
        "webhook.limits.bodyTimeout=6s",
        "--set",
        "webhook.limits.idleTimeout=2m",
        "--set",
        "webhook.limits.maxConnectionAge=1h",
        "--set",
        "webhook.limits.maxRequestsPerConnection=7",
        "--set",
        "webhook.limits.http2MaxStreams=8",
        "--set",
        "webhook.limits.maxPeerInFlightRequests=9",
        "--set",
        "webhook.limits.maxPeerInFlightBytes=3Mi",
        "--set",
        "webhook.limits.minBodyRate=16Ki",
        "--set",
        "webhook.limits.minBodyRateGrace=3s",
        "--set",
        "webhook.limits.maxConnectionsPerPeer=11",
        "--set",
        "webhook.limits.reservedInFlightRequests=12",
        "--set",
        "webhook.limits.reservedInFlightBytes=5Mi",
        "--set",
        "webhook.limits.reservedConnections=13",
        "--set",
        "webhook.apiServerCIDRs={10.0.0.0/24,192.0.2.7}",
    ]);
    assert_eq!(c.limits.max_body_bytes, 3 * 1024 * 1024);
    // Large numbers are written as integers, not in exponent form.
    assert_eq!(c.limits.max_in_flight_requests, 5_000_000);
    assert_eq!(c.limits.max_in_flight_bytes, 64 * 1024 * 1024);
    assert_eq!(c.limits.large_reviews, 3);
    assert_eq!(c.limits.large_review_wait, Duration::from_secs(2));
    assert_eq!(c.max_connections, 1000);
    assert_eq!(c.header_read_timeout, Duration::from_secs(4));
    assert_eq!(c.body_timeout, Duration::from_secs(6));
    assert_eq!(c.idle_timeout, Duration::from_secs(120));
    assert_eq!(c.max_connection_age, Duration::from_secs(3600));
    assert_eq!(c.max_requests_per_connection, 7);
    assert_eq!(c.http2_max_streams, 8);
    assert_eq!(c.limits.max_peer_in_flight_requests, 9);
    assert_eq!(c.limits.max_peer_in_flight_bytes, 3 * 1024 * 1024);
    assert_eq!(c.limits.min_body_rate.bytes_per_sec, 16 * 1024);
    assert_eq!(c.limits.min_body_rate.grace, Duration::from_secs(3));
    assert_eq!(c.max_connections_per_peer, 11);
    assert_eq!(c.limits.reserved_in_flight_requests, 12);
    assert_eq!(c.limits.reserved_in_flight_bytes, 5 * 1024 * 1024);
    assert_eq!(c.reserved_connections, 13);
    let blocks: Vec<String> = c.api_server_addresses.0.iter().map(ToString::to_string).collect();
    assert_eq!(blocks, ["10.0.0.0/24", "192.0.2.7/32"]);
}

#[test]
fn the_webhook_hands_freed_memory_back_at_once() {
    let r = helm_template(&[]).unwrap();
    let d = r.get("Deployment", "captf-webhook").unwrap();
    let env = &d["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(named(env, "MIMALLOC_PURGE_DELAY")["value"], "0", "{env}");
}

#[test]
fn by_default_there_is_no_network_policy_and_no_client_certificate_is_asked_for() {
    let r = helm_template(&[]).unwrap();
    assert!(r.of_kind("NetworkPolicy").is_empty());
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(!args.iter().any(|a| a.starts_with("--client-ca-file")), "{args:?}");
}

#[test]
fn the_network_policy_admits_only_the_api_server_peers_to_the_webhook_port_and_scrapers_to_metrics() {
    let r = helm_template(WEBHOOK_LOCKDOWN).unwrap();
    let np = r.get("NetworkPolicy", "captf-webhook").unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    // It selects exactly the webhook pods.
    let selector = np["spec"]["podSelector"]["matchLabels"].as_object().unwrap();
    for (k, v) in selector {
        assert_eq!(&pod_labels(deploy)[k], v, "selector {k}");
    }
    assert_eq!(selector, deploy["spec"]["selector"]["matchLabels"].as_object().unwrap());
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress"]);
    let rules = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert_eq!(
        rules[0]["ports"][0]["port"].as_u64().unwrap(),
        port_of(arg(&args, "--addr"))
    );
    assert_eq!(
        rules[0]["from"],
        serde_json::json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}])
    );
    assert_eq!(
        rules[1]["ports"][0]["port"].as_u64().unwrap(),
        port_of(arg(&args, "--metrics-addr"))
    );
    assert_eq!(
        rules[1]["from"],
        serde_json::json!([{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}])
    );
    // Every rule names its peers: a rule without `from` would admit everyone.
    assert!(rules.iter().all(|r| !r["from"].as_array().unwrap().is_empty()));
}

#[test]
fn a_network_policy_without_api_server_peers_refuses_to_render() {
    let err = helm_template_error(&["--set", "webhook.networkPolicy.enabled=true"])
        .unwrap()
        .expect("rendering fails");
    assert!(err.contains("apiServerPeers must select the API server"), "{err}");
}

#[test]
fn client_auth_mounts_the_ca_secret_hands_it_to_the_binary_and_probes_the_plain_port() {
    let r = helm_template(WEBHOOK_LOCKDOWN).unwrap();
    let deploy = r.get("Deployment", "captf-webhook").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args = strings(&c["args"]);
    let mount = named(&c["volumeMounts"], "client-ca");
    assert_eq!(mount["readOnly"], true);
    let dir = mount["mountPath"].as_str().unwrap();
    assert_eq!(arg(&args, "--client-ca-file"), format!("{dir}/ca.crt"));
    let volume = named(&pod["volumes"], "client-ca");
    assert_eq!(volume["secret"]["secretName"], "apiserver-webhook-client-ca");
    assert_eq!(volume["secret"]["items"][0]["key"], "ca.crt");
    // The binary takes the rendered arguments.
    let argv = std::iter::once("captf-webhook".to_string()).chain(args.iter().cloned());
    let cli = <captf_webhook::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
    let config = cli.serve.to_config().unwrap();
    assert_eq!(
        config.client_ca_file.unwrap().to_str(),
        Some(format!("{dir}/ca.crt").as_str())
    );
    // The kubelet presents no client certificate: the probes use the plain metrics port.
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTP", "{probe}");
    }
    let err = helm_template_error(&["--set", "webhook.clientAuth.enabled=true"])
        .unwrap()
        .expect("rendering fails without the Secret");
    assert!(err.contains("webhook.clientAuth.caSecret is required"), "{err}");
}
