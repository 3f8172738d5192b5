//! API semantics of the simulator, exercised through kube-rs over HTTP.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use captf_sim::{FaultRule, Sim, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::{ApiResource, Discovery};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn tc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster"),
        "terraformclusters",
    )
}

fn tc(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": {"name": name},
        "spec": {"module": {"source": "git::https://example.com/m.git"}},
    }))
    .unwrap()
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn starts_and_serves_the_version() {
    // Start-up time is measured by `cargo run -p captf-sim --example figures`, not asserted here.
    let t = Instant::now();
    let sim = Sim::start().await.unwrap();
    println!("sim start: {:?}", t.elapsed());
    let v = sim.client().unwrap().apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
}

#[tokio::test]
async fn create_fills_uid_timestamps_and_generate_name_and_get_reads_it_back() {
    let sim = Sim::builder()
        .start_time("2026-01-02T03:04:05Z".parse().unwrap())
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    let mut obj = cm("");
    obj.metadata.name = None;
    obj.metadata.generate_name = Some("cfg-".into());
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    let name = made.metadata.name.clone().unwrap();
    assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");
    assert!(made.metadata.uid.is_some());
    assert!(made.metadata.resource_version.is_some());
    assert_eq!(
        made.metadata.creation_timestamp.clone().unwrap().0.to_string(),
        "2026-01-02T03:04:05Z"
    );
    assert_eq!(api.get(&name).await.unwrap().data.unwrap()["k"], "v");
    let dup = api_err(api.create(&PostParams::default(), &made).await.unwrap_err());
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    let missing = api_err(api.get("nope").await.unwrap_err());
    assert_eq!(missing.code, 404);
    assert_eq!(missing.message, "configmaps \"nope\" not found");
}

#[tokio::test]
async fn creating_in_a_missing_namespace_is_not_found() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "ghost");
    let e = api_err(api.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert_eq!((e.code, e.message.as_str()), (404, "namespaces \"ghost\" not found"));
    let ns: Api<Namespace> = Api::all(sim.client().unwrap());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "ghost"}})).unwrap(),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
}

#[tokio::test]
async fn update_with_a_stale_resource_version_is_a_409_conflict() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    let first = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut second = first.clone();
    second.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &second).await.unwrap();
    assert_ne!(updated.metadata.resource_version, first.metadata.resource_version);
    let e = api_err(api.replace("a", &PostParams::default(), &first).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.contains("the object has been modified"), "{}", e.message);
}

#[tokio::test]
async fn merge_json_and_server_side_apply_patches() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let p = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "1", "k": null}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.clone().unwrap(), [("x".to_string(), "1".to_string())].into());
    let jp = serde_json::from_value(json!([{"op": "add", "path": "/data/y", "value": "2"}])).unwrap();
    let p = api
        .patch("a", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["y"], "2");
    let ssa = PatchParams::apply("test").force();
    let applied = api
        .patch(
            "b",
            &ssa,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"z": "3"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["z"], "3");
    let applied = api
        .patch(
            "b",
            &ssa,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"w": "4"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap().len(), 2);
    let bad = serde_json::from_value(json!([{"op": "test", "path": "/data/y", "value": "9"}])).unwrap();
    assert_eq!(
        api_err(
            api.patch("a", &PatchParams::default(), &Patch::Json::<()>(bad))
                .await
                .unwrap_err()
        )
        .code,
        422
    );
}

#[tokio::test]
async fn status_subresource_is_separate_and_spec_changes_bump_generation() {
    let sim = Sim::start().await.unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(sim.client().unwrap(), &tc_resource());
    let mut obj = tc("prod");
    obj.data["status"] = json!({"observedGeneration": 1});
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(made.data.get("status"), None, "status is dropped on create");
    assert_eq!(made.metadata.generation, Some(1));
    let s = api
        .patch_status(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 2}, "spec": {"paused": true}})),
        )
        .await
        .unwrap();
    assert_eq!(s.data["status"]["observedGeneration"], 2);
    assert_eq!(s.data["spec"].get("paused"), None, "a status write cannot change spec");
    assert_eq!(s.metadata.generation, Some(1));
    let m = api
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 3}, "spec": {"paused": true}})),
        )
        .await
        .unwrap();
    assert_eq!(
        m.data["status"]["observedGeneration"], 2,
        "a main write cannot change status"
    );
    assert_eq!(m.data["spec"]["paused"], true);
    assert_eq!(m.metadata.generation, Some(2));
    let l = api
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, Some(2), "metadata changes keep the generation");
}

#[tokio::test]
async fn finalizers_hold_a_delete_until_the_last_one_goes() {
    let sim = Sim::start().await.unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(sim.client().unwrap(), &tc_resource());
    let mut obj = tc("prod");
    obj.metadata.finalizers = Some(vec!["captf.io/destroy".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    let d = api.delete("prod", &DeleteParams::default()).await.unwrap();
    let held = d.left().unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(api.get("prod").await.unwrap().metadata.deletion_timestamp.is_some());
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_err(api.get("prod").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn no_new_finalizer_can_be_added_to_an_object_being_deleted() {
    let sim = Sim::start().await.unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(sim.client().unwrap(), &tc_resource());
    let mut obj = tc("prod");
    obj.metadata.finalizers = Some(vec!["captf.io/destroy".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    // Before the delete, a finalizer may be added.
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["captf.io/destroy", "example.com/a"]}})),
    )
    .await
    .unwrap();
    api.delete("prod", &DeleteParams::default()).await.unwrap();
    let e = api_err(
        api.patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["captf.io/destroy", "example.com/a", "example.com/b"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.ends_with(
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}"
        ),
        "{}",
        e.message
    );
    // Removing one is still allowed.
    let kept = api
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["captf.io/destroy"]}})),
        )
        .await
        .unwrap();
    assert_eq!(kept.metadata.finalizers.unwrap(), ["captf.io/destroy"]);
}

#[tokio::test]
async fn a_strategic_merge_patch_is_415_for_a_custom_resource_only() {
    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let tcs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &tc_resource());
    tcs.create(&PostParams::default(), &tc("prod")).await.unwrap();
    let e = api_err(
        tcs.patch(
            "prod",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    assert!(tcs.get("prod").await.unwrap().data["spec"].get("paused").is_none());
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let p = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"x": "y"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["x"], "y");
}

fn owned_secret(name: &str, owner: &DynamicObject) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "name": owner.metadata.name, "uid": owner.metadata.uid}]}}))
    .unwrap()
}

#[tokio::test]
async fn owner_deletion_propagates_background_foreground_and_orphan() {
    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let tcs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &tc_resource());
    let secrets: Api<Secret> = Api::default_namespaced(client);
    for (i, policy) in [
        PropagationPolicy::Background,
        PropagationPolicy::Foreground,
        PropagationPolicy::Orphan,
    ]
    .into_iter()
    .enumerate()
    {
        let owner = tcs.create(&PostParams::default(), &tc(&format!("o{i}"))).await.unwrap();
        secrets
            .create(&PostParams::default(), &owned_secret(&format!("s{i}"), &owner))
            .await
            .unwrap();
        let dp = DeleteParams {
            propagation_policy: Some(policy.clone()),
            ..Default::default()
        };
        tcs.delete(&format!("o{i}"), &dp).await.unwrap();
        assert_eq!(api_err(tcs.get(&format!("o{i}")).await.unwrap_err()).code, 404);
        let left = secrets.get_opt(&format!("s{i}")).await.unwrap();
        match policy {
            PropagationPolicy::Orphan => {
                assert!(left.unwrap().metadata.owner_references.unwrap_or_default().is_empty())
            }
            _ => assert!(left.is_none(), "{policy:?} leaves the dependent"),
        }
    }
}

#[tokio::test]
async fn a_dependent_created_after_its_owner_went_is_collected_at_once() {
    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let tcs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &tc_resource());
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let owner = tcs.create(&PostParams::default(), &tc("o")).await.unwrap();
    let alive = tcs.create(&PostParams::default(), &tc("p")).await.unwrap();
    tcs.delete("o", &DeleteParams::default()).await.unwrap();
    // The create succeeds, as on a real API server; the collector deletes it.
    let created = secrets
        .create(&PostParams::default(), &owned_secret("dangling", &owner))
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("dangling"));
    assert!(secrets.get_opt("dangling").await.unwrap().is_none());
    // One owner still there is enough to keep it.
    let mut both = owned_secret("kept", &owner);
    let refs = both.metadata.owner_references.get_or_insert_default();
    let mut second = refs[0].clone();
    second.name = alive.metadata.name.clone().unwrap();
    second.uid = alive.metadata.uid.clone().unwrap();
    refs.push(second);
    secrets.create(&PostParams::default(), &both).await.unwrap();
    assert!(secrets.get_opt("kept").await.unwrap().is_some());
}

#[tokio::test]
async fn list_filters_by_label_and_field_selectors() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    for (n, op) in [("a", "apply"), ("b", "drift"), ("c", "apply")] {
        let mut c = cm(n);
        c.metadata.labels = Some([("captf.io/op".to_string(), op.to_string())].into());
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("captf.io/op=apply"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("captf.io/op in (drift)"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=c,metadata.namespace=default"))
                .await
                .unwrap()
        ),
        ["c"]
    );
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_later_changes_and_410_when_too_old() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let events: Vec<_> = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .take(3)
        .try_collect()
        .await
        .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            _ => "OTHER",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    sim.compact();
    let mut s = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    match s.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn a_kube_runtime_watcher_sees_live_changes_and_survives_dropped_watches() {
    use kube::runtime::{WatchStreamExt, watcher};
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    sim.faults().drop_watches();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    let mut seen = vec![];
    while !seen.contains(&"b".to_string()) {
        let o = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(o.metadata.name.unwrap());
    }
}

#[tokio::test]
async fn kube_event_recorder_events_are_one_store_seen_through_both_event_apis() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "captf".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "JobFailed".into(),
        note: Some("boom".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&c, &());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events = sim.events("default");
    assert_eq!(events.len(), 1, "the second publish patches the series");
    assert_eq!(events[0]["reason"], "JobFailed");
    assert_eq!(events[0]["series"]["count"], 2);
    assert_eq!(events[0]["note"], "boom");
    // One store, two views: the core/v1 API shows the same Event.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(sim.client().unwrap());
    let listed = core
        .list(&ListParams::default().fields("involvedObject.name=a"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].message.as_deref(), Some("boom"));
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(sim.client().unwrap());
    let listed = v1
        .list(&ListParams::default().fields("regarding.name=a"))
        .await
        .unwrap();
    assert_eq!(listed.items[0].note.as_deref(), Some("boom"));
}

#[tokio::test]
async fn discovery_lists_builtins_and_the_captf_crds() {
    let sim = Sim::start().await.unwrap();
    let d = Discovery::new(sim.client().unwrap()).run().await.unwrap();
    let groups: Vec<String> = d.groups().map(|g| g.name().to_string()).collect();
    for g in [
        "",
        "batch",
        "coordination.k8s.io",
        "events.k8s.io",
        "infrastructure.cluster.x-k8s.io",
    ] {
        assert!(groups.contains(&g.to_string()), "{g} missing from {groups:?}");
    }
    let (ar, caps) = d
        .resolve_gvk(&GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1beta1",
            "TerraformCluster",
        ))
        .unwrap();
    assert_eq!(ar.plural, "terraformclusters");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
}

#[tokio::test]
async fn injected_faults_answer_500_429_409_then_recover() {
    let sim = Sim::start().await.unwrap();
    let api: Api<Job> = Api::default_namespaced(sim.client().unwrap());
    for code in [500u16, 409] {
        sim.faults().inject(FaultRule::new(Verb::List, "jobs", code, 1));
        let e = api_err(api.list(&ListParams::default()).await.unwrap_err());
        assert_eq!(e.code, code);
    }
    api.list(&ListParams::default()).await.unwrap();
    // A create is matched by the name in its body.
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    sim.faults()
        .inject(FaultRule::new(Verb::Create, "configmaps", 500, 1).named("b"));
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(
        api_err(cms.create(&PostParams::default(), &cm("b")).await.unwrap_err()).code,
        500
    );
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    // kube-rs retries 429 (Retry-After) by itself: the fault is consumed and the list succeeds.
    sim.faults().inject(FaultRule::new(Verb::List, "jobs", 429, 1));
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(sim.faults().remaining(), 0);
    let pods: Api<Pod> = Api::default_namespaced(sim.client().unwrap());
    sim.faults().set_latency(Duration::from_millis(50));
    let t = Instant::now();
    pods.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn the_clock_is_served_over_http_and_streams_every_change() {
    let sim = Sim::builder()
        .start_time("2026-01-01T00:00:00Z".parse().unwrap())
        .start()
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let now: serde_json::Value = client
        .request(http::Request::get("/sim/v1/clock").body(vec![]).unwrap())
        .await
        .unwrap();
    assert_eq!(now, json!({"now": "2026-01-01T00:00:00Z"}));
    use futures::AsyncBufReadExt;
    let mut lines = client
        .request_stream(http::Request::get("/sim/v1/clock?watch=true").body(vec![]).unwrap())
        .await
        .unwrap()
        .lines();
    assert_eq!(
        lines.next().await.unwrap().unwrap(),
        r#"{"now":"2026-01-01T00:00:00Z"}"#
    );
    sim.advance(Duration::from_secs(90));
    assert_eq!(
        lines.next().await.unwrap().unwrap(),
        r#"{"now":"2026-01-01T00:01:30Z"}"#
    );
}

#[tokio::test]
async fn foreground_deletion_waits_for_a_dependent_held_by_a_finalizer() {
    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let tcs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &tc_resource());
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let owner = tcs.create(&PostParams::default(), &tc("o")).await.unwrap();
    let mut dep = owned_secret("held", &owner);
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    secrets.create(&PostParams::default(), &dep).await.unwrap();
    tcs.delete("o", &DeleteParams::foreground()).await.unwrap();
    let o = tcs.get("o").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.finalizers.unwrap(), ["foregroundDeletion"]);
    assert!(secrets.get("held").await.unwrap().metadata.deletion_timestamp.is_some());
    secrets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(secrets.get_opt("held").await.unwrap().is_none());
    assert!(
        tcs.get_opt("o").await.unwrap().is_none(),
        "the owner goes when its last dependent does"
    );
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_contents() {
    let sim = Sim::start().await.unwrap();
    sim.create_namespace("team");
    let client = sim.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let nss: Api<Namespace> = Api::all(client);
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    assert!(nss.get_opt("team").await.unwrap().is_none());
    assert!(sim.list("/configmaps", Some("team")).is_empty());
}

#[tokio::test]
async fn a_selector_watch_across_namespaces_sees_only_matching_objects() {
    let sim = Sim::start().await.unwrap();
    sim.create_namespace("other");
    let client = sim.client().unwrap();
    let all: Api<ConfigMap> = Api::all(client.clone());
    let mut s = all
        .watch(&WatchParams::default().labels("pick=me").timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    for (ns, name, pick) in [("default", "a", false), ("other", "b", true), ("default", "c", true)] {
        let mut c = cm(name);
        if pick {
            c.metadata.labels = Some([("pick".to_string(), "me".to_string())].into());
        }
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &c)
            .await
            .unwrap();
    }
    let mut names = vec![];
    while names.len() < 2 {
        let event = s
            .next()
            .await
            .unwrap_or_else(|| panic!("the watch ended (5 s) having seen only {names:?} of two matching ConfigMaps"));
        if let WatchEvent::Added(o) = event.unwrap() {
            names.push(o.metadata.name.unwrap());
        }
    }
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn job_status_writes_go_through_the_status_subresource_only() {
    let sim = Sim::start().await.unwrap();
    sim.set_default_script(captf_sim::RunnerScript::hang());
    let jobs: Api<Job> = Api::default_namespaced(sim.client().unwrap());
    let j: Job = serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}))
    .unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let annotated = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"captf.io/outcome": "failed"}}, "status": {"active": 7}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(annotated.status.unwrap().active, Some(1));
    assert_eq!(annotated.metadata.annotations.unwrap()["captf.io/outcome"], "failed");
    assert_eq!(annotated.metadata.generation, Some(1));
}

#[tokio::test]
async fn a_change_that_makes_an_object_stop_matching_a_selector_watch_is_deleted_for_that_watch() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    let mut s = api
        .watch(&WatchParams::default().labels("pick=me").timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let label = |v: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"pick": v}}}));
    api.patch("a", &PatchParams::default(), &label(Some("me")))
        .await
        .unwrap();
    api.patch("a", &PatchParams::default(), &label(Some("other")))
        .await
        .unwrap();
    let mut kinds = vec![];
    while kinds.len() < 2 {
        let event = s
            .next()
            .await
            .unwrap_or_else(|| panic!("the watch ended (5 s) having seen only {kinds:?}, not ADDED then DELETED"));
        match event.unwrap() {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            _ => {}
        }
    }
    assert_eq!(kinds, ["ADDED", "DELETED"]);
}

#[tokio::test]
async fn a_list_with_a_limit_comes_in_pages_of_one_snapshot_with_410_after_compaction() {
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    for n in ["a", "b", "c", "d", "e"] {
        api.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let names = |l: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items.iter().map(|c| c.metadata.name.clone().unwrap()).collect()
    };
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    // What changes after the first page does not show in the pages after it.
    api.delete("c", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &cm("f")).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c", "d"]);
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let last = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&last), ["e"]);
    assert_eq!(last.metadata.continue_, None);
    // A fresh list sees the changes; a token from before a compaction is 410 Expired.
    let fresh = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(names(&fresh), ["a", "b", "d"]);
    sim.compact();
    let e = api_err(
        api.list(
            &ListParams::default()
                .limit(3)
                .continue_token(fresh.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    let e = api_err(
        api.list(&ListParams::default().continue_token("nonsense"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
}

#[tokio::test]
async fn a_kube_runtime_watcher_with_small_pages_sees_every_object() {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let sim = Sim::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client().unwrap());
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("cm{i}")))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store();
    let stream = watcher(api.clone(), watcher::Config::default().page_size(2))
        .reflect(writer)
        .applied_objects()
        .boxed();
    tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    let mut names: Vec<String> = reader
        .state()
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, (0..7).map(|i| format!("cm{i}")).collect::<Vec<_>>());
}
