//! The CRDs' CEL rules (`x-kubernetes-validations`), evaluated with a CEL interpreter, give the
//! webhook's verdict on the rules they share. No API server runs here, so this is what shows the
//! rules compile and mean what the webhook means.
#![allow(clippy::unwrap_used)]

use captf_shared::crd::crds;
use captf_shared::types::{CaptfObject, TerraformSpec};
use captf_shared::validation::{validate_create, validate_update};
use proptest::prelude::*;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Value, json};

/// JSON as the API server hands it to CEL: every integer is an `int` (int64).
struct K8s<'a>(&'a Value);

impl Serialize for K8s<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => s.serialize_i64(i),
                None => s.serialize_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(v) => s.serialize_str(v),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(&K8s(i))?;
                }
                seq.end()
            }
            Value::Object(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, &K8s(v))?;
                }
                map.end()
            }
        }
    }
}

/// `(rule, message)` pairs.
type Rules = Vec<(String, String)>;

/// The rules of a kind's CRD at its root, and at `spec.jobs`.
fn rules(kind: &str) -> (Rules, Rules) {
    let crd = crds().into_iter().find(|c| c.spec.names.kind == kind).unwrap();
    let root = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref(),
    )
    .unwrap();
    let pick = |v: &Value| -> Rules {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["rule"].as_str().unwrap().to_string(),
                    r["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let mut spec = &root["properties"]["spec"];
    if kind.ends_with("Template") {
        spec = &spec["properties"]["template"]["properties"]["spec"];
    }
    (
        pick(&root["x-kubernetes-validations"]),
        pick(&spec["properties"]["jobs"]["x-kubernetes-validations"]),
    )
}

fn compile(rule: &str) -> cel::Program {
    cel::Program::compile(rule).unwrap_or_else(|e| panic!("rule does not compile: {rule}: {e:?}"))
}

/// Evaluate a rule: `true` admits; `false` or an evaluation error refuses (as the API server does).
fn eval(rule: &str, self_: &Value, old_self: Option<&Value>) -> bool {
    run(&compile(rule), self_, old_self)
}

fn run(program: &cel::Program, self_: &Value, old_self: Option<&Value>) -> bool {
    let mut ctx = cel::Context::default();
    ctx.add_variable("self", K8s(self_)).unwrap();
    if let Some(old) = old_self {
        ctx.add_variable("oldSelf", K8s(old)).unwrap();
    }
    matches!(program.execute(&ctx), Ok(cel::Value::Bool(true)))
}

fn rule_with(kind: &str, needle: &str) -> String {
    let (root, _) = rules(kind);
    root.into_iter()
        .map(|(r, _)| r)
        .find(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("{kind} has no rule with {needle}"))
}

fn object(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind, "metadata": {"name": "x"}, "spec": spec})
}

/// The webhook's verdict on one field of a spec.
fn webhook_rejects(kind: &str, value: &Value, field: &str) -> bool {
    let obj = CaptfObject::from_kind_value(kind, value.clone()).unwrap();
    validate_create(&obj).violation_at(field).is_some()
}

#[test]
fn every_rule_of_every_crd_compiles() {
    for crd in crds() {
        let kind = crd.spec.names.kind;
        let (root, jobs) = rules(&kind);
        for (rule, message) in root.iter().chain(&jobs) {
            assert!(cel::Program::compile(rule).is_ok(), "{kind}: {rule}");
            assert!(!message.is_empty(), "{kind}: {rule} has no message");
        }
        if !kind.ends_with("Template") {
            assert!(root.len() >= 3, "{kind}: {root:?}");
        }
        assert_eq!(jobs.len(), 1, "{kind}");
    }
}

static LOCK_RULES: std::sync::LazyLock<Vec<(&'static str, cel::Program)>> = std::sync::LazyLock::new(|| {
    ["TerraformCluster", "TerraformMachinePool", "TerraformMachine"]
        .into_iter()
        .map(|kind| (kind, compile(&rule_with(kind, "lockTimeoutSeconds"))))
        .collect()
});

fn jobs(deadline: Option<i64>, lock: Option<i64>) -> Value {
    let mut j = serde_json::Map::new();
    if let Some(d) = deadline {
        j.insert("activeDeadlineSeconds".into(), d.into());
    }
    if let Some(l) = lock {
        j.insert("lockTimeoutSeconds".into(), l.into());
    }
    json!({"module": {"source": "a/b/c"}, "jobs": j})
}

proptest! {
    // Each case evaluates three compiled rules; parsing CEL is the slow part, so it happens once.
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn lock_timeout_rule_agrees_with_the_webhook(
        deadline in prop::option::of(prop_oneof![60i64..=604_800, Just(600), Just(3600)]),
        lock in prop::option::of(prop_oneof![0i64..700_000, Just(599), Just(600), Just(3599), Just(3600)]),
    ) {
        for (kind, program) in LOCK_RULES.iter() {
            let kind = *kind;
            let v = object(kind, jobs(deadline, lock));
            prop_assert_eq!(
                run(program, &v, None),
                !webhook_rejects(kind, &v, "spec.jobs.lockTimeoutSeconds"),
                "{} {:?} {:?}", kind, deadline, lock
            );
        }
    }
}

#[test]
fn lock_timeout_rule_holds_without_jobs() {
    let rule = rule_with("TerraformCluster", "lockTimeoutSeconds");
    assert!(eval(
        &rule,
        &object("TerraformCluster", json!({"module": {"source": "a/b/c"}})),
        None
    ));
    assert!(!eval(&rule, &object("TerraformCluster", jobs(None, Some(4000))), None));
    assert!(eval(
        &rule,
        &object("TerraformCluster", jobs(Some(4001), Some(4000))),
        None
    ));
}

#[test]
fn drift_interval_rule_agrees_with_the_webhook() {
    let kind = "TerraformMachine";
    let rule = rule_with(kind, "drift.interval");
    for interval in [
        "0", "1m", "60s", "59s", "30m", "1h30m", "168h", "169h", "0s", "abc", "1d", "", "1.5h",
    ] {
        let v = object(
            kind,
            json!({"module": {"source": "a/b/c"}, "drift": {"interval": interval}}),
        );
        assert_eq!(
            eval(&rule, &v, None),
            !webhook_rejects(kind, &v, "spec.drift.interval"),
            "{interval:?}"
        );
    }
    assert!(eval(&rule, &object(kind, json!({"module": {"source": "a/b/c"}})), None));
}

#[test]
fn one_ref_per_entry_rule_agrees_with_the_webhook() {
    let kind = "TerraformMachinePool";
    let rule = rule_with(kind, "variablesFrom");
    for entry in [
        json!({"secretRef": {"name": "s"}}),
        json!({"configMapRef": {"name": "c"}}),
        json!({}),
        json!({"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}),
    ] {
        let v = object(
            kind,
            json!({"module": {"source": "a/b/c"}, "variablesFrom": [{"secretRef": {"name": "ok"}}, entry]}),
        );
        assert_eq!(
            eval(&rule, &v, None),
            !webhook_rejects(kind, &v, "spec.variablesFrom[1]"),
            "{entry}"
        );
    }
}

#[test]
fn env_rule_agrees_with_the_webhook() {
    let (_, jobs_rules) = rules("TerraformCluster");
    let rule = &jobs_rules[0].0;
    for (names, reserved) in [
        (vec![], false),
        (vec!["TF_LOG"], false),
        (vec!["captf_x", "CAPTF"], false),
        (vec!["TF_LOG", "CAPTF_PHASE"], true),
    ] {
        let env: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
        let jobs = json!({"env": env});
        let v = object("TerraformCluster", json!({"module": {"source": "a/b/c"}, "jobs": jobs}));
        assert_eq!(eval(rule, &jobs, None), !reserved, "{names:?}");
        let field = format!("spec.jobs.env[{}].name", names.len().saturating_sub(1));
        assert_eq!(webhook_rejects("TerraformCluster", &v, &field), reserved, "{names:?}");
    }
    assert!(eval(rule, &json!({}), None));
}

#[test]
fn immutability_rules_agree_with_the_webhook_on_update() {
    let spec = json!({"module": {"source": "a/b/c"}});
    let with = |kind: &str, extra: Value| {
        let mut s = spec.clone();
        if let (Some(s), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        object(kind, s)
    };
    let cases: Vec<(&str, &str, Value, Value)> = vec![
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({}),
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
        ),
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({"controlPlaneEndpoint": {"host": "", "port": 0}}),
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
        ),
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
        ),
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
            json!({"controlPlaneEndpoint": {"host": "b", "port": 6443}}),
        ),
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
            json!({"controlPlaneEndpoint": {"host": "a", "port": 443}}),
        ),
        (
            "TerraformCluster",
            "controlPlaneEndpoint",
            json!({"controlPlaneEndpoint": {"host": "a", "port": 6443}}),
            json!({}),
        ),
        (
            "TerraformMachine",
            "providerID",
            json!({}),
            json!({"providerID": "p-1"}),
        ),
        (
            "TerraformMachine",
            "providerID",
            json!({"providerID": ""}),
            json!({"providerID": "p-1"}),
        ),
        (
            "TerraformMachine",
            "providerID",
            json!({"providerID": "p-1"}),
            json!({"providerID": "p-1"}),
        ),
        (
            "TerraformMachine",
            "providerID",
            json!({"providerID": "p-1"}),
            json!({"providerID": "p-2"}),
        ),
        (
            "TerraformMachine",
            "providerID",
            json!({"providerID": "p-1"}),
            json!({}),
        ),
    ];
    for (kind, field, old, new) in cases {
        let rule = rule_with(kind, &format!("oldSelf.spec.{field}"));
        let (old_v, new_v) = (with(kind, old), with(kind, new));
        let old_o = CaptfObject::from_kind_value(kind, old_v.clone()).unwrap();
        let new_o = CaptfObject::from_kind_value(kind, new_v.clone()).unwrap();
        let webhook_ok = validate_update(&old_o, &new_o)
            .violation_at(&format!("spec.{field}"))
            .is_none();
        assert_eq!(
            eval(&rule, &new_v, Some(&old_v)),
            webhook_ok,
            "{kind} {old_v} -> {new_v}"
        );
    }
}

#[test]
fn the_defaulted_minimal_spec_passes_every_rule() {
    for kind in ["TerraformCluster", "TerraformMachinePool", "TerraformMachine"] {
        let mut spec: TerraformSpec = serde_json::from_value(json!({"module": {"source": "a/b/c"}})).unwrap();
        captf_shared::defaults::apply_spec_defaults(&mut spec);
        let v = object(kind, serde_json::to_value(&spec).unwrap());
        let (root, jobs) = rules(kind);
        for (rule, _) in root.iter().filter(|(r, _)| !r.contains("oldSelf")) {
            assert!(eval(rule, &v, None), "{kind}: {rule}");
        }
        for (rule, _) in &jobs {
            assert!(eval(rule, &v["spec"]["jobs"], None), "{kind}: {rule}");
        }
    }
}
