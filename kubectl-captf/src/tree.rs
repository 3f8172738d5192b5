//! `kubectl captf tree`: a cluster's objects as a tree, as `clusterctl describe cluster` draws
//! it: the Cluster API `Cluster`, its TerraformCluster, the cluster's TerraformMachinePools and
//! TerraformMachines (its members as the controller counts them when it decides on the
//! cluster's deletion: labelled `cluster.x-k8s.io/cluster-name` and verified,
//! `captf_read::api::is_member`; a TerraformMachine owned by a TerraformMachinePool under that
//! pool), each with its `Ready` condition, the controller's next step (the decision `explain`
//! and `status` show) and its runner Jobs (the active one, the newest of each op). Objects that
//! carry the label without being verified members are drawn apart: they do not hold the
//! cluster's deletion.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;

use captf_core::ident::Ident;
use captf_core::record::JobRecord;
use captf_read::api::is_member;
use captf_read::live::{self, LiveRead};
use captf_shared::types::CaptfObject;
use captf_shared::{Kind, keys};

use crate::cli::Output;
use crate::conn::Conn;
use crate::errors::{PluginError, from_kube, from_runtime};
use crate::live_read::explanation;
use crate::printed::{Printed, pretty};
use crate::status::{observed, row};
use crate::target::parse_target;

/// One runner Job of a node: the active one, or the newest of an op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeJob {
    pub name: String,
    pub op: String,
    pub seq: u32,
    /// `running` while the Job is not finished, else its outcome (`succeeded`, `failed`, ...).
    pub outcome: String,
    pub active: bool,
}

/// One object of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The `Ready` condition's status (`True`, `False`, `Unknown`).
    pub ready: Option<String>,
    /// The `Ready` condition's reason.
    pub ready_reason: Option<String>,
    /// What the controller does next (`None` for a Cluster API Cluster: CAPTF does not run it).
    pub next: Option<String>,
    /// When, in words.
    pub when: Option<String>,
    /// When a wait ends, as a time that does not move with the clock (a backoff's end).
    #[serde(skip)]
    pub not_before: Option<Timestamp>,
    pub jobs: Vec<TreeJob>,
    /// Why part of this node is missing, or what else to know about it.
    pub note: Option<String>,
    pub children: Vec<TreeNode>,
    /// Of a TerraformCluster: the objects labelled with its cluster that are not verified
    /// members ([`UNVERIFIED`]), arranged as its children are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<TreeNode>,
}

impl TreeNode {
    /// The tree without what moves with the clock alone: the words counted from now (a wait's
    /// fixed end stays, as `not_before`) (PURE). Two looks whose steady trees are equal show
    /// nothing new.
    pub fn steady(&self) -> TreeNode {
        TreeNode {
            when: None,
            children: self.children.iter().map(TreeNode::steady).collect(),
            unverified: self.unverified.iter().map(TreeNode::steady).collect(),
            ..self.clone()
        }
    }
}

/// What `tree` prints (PURE): the tree drawn, or as a document.
pub fn print_tree(tree: &TreeNode, output: Option<Output>) -> Printed {
    Printed::out(if Output::is_document(output) {
        pretty(&serde_json::json!(tree))
    } else {
        render_tree(tree, output == Some(Output::Wide))
    })
}

/// What a tree says of the objects labelled with a cluster that are not its verified members.
pub const UNVERIFIED: &str = "Labelled with this cluster but not verified members: they do not hold its deletion (neither owned by its TerraformCluster nor controlled by a Cluster API Machine or MachinePool of the cluster)";

impl TreeNode {
    /// A node with nothing known of it but its name.
    pub fn bare(kind: &str, namespace: &str, name: &str) -> TreeNode {
        TreeNode {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            ready: None,
            ready_reason: None,
            next: None,
            when: None,
            not_before: None,
            jobs: vec![],
            note: None,
            children: vec![],
            unverified: vec![],
        }
    }
}

/// A Job record as a tree shows it.
fn job_of(r: &JobRecord) -> TreeJob {
    TreeJob {
        name: r.name.clone(),
        op: r.op.to_string(),
        seq: r.seq,
        outcome: r
            .outcome
            .map_or_else(|| "running".to_string(), |o| o.as_str().to_string()),
        active: false,
    }
}

/// The Jobs a node shows (PURE): the active Job, then the newest Job of each op (newest first).
pub fn shown_jobs(jobs: &[TreeJob], active: Option<&str>) -> Vec<TreeJob> {
    let mut sorted: Vec<&TreeJob> = jobs.iter().collect();
    sorted.sort_by_key(|j| std::cmp::Reverse(j.seq));
    let mut out: Vec<TreeJob> = Vec::new();
    let mut ops: Vec<&str> = Vec::new();
    for j in sorted {
        let is_active = active == Some(j.name.as_str());
        if !is_active && ops.contains(&j.op.as_str()) {
            continue;
        }
        ops.push(&j.op);
        out.push(TreeJob {
            active: is_active,
            ..j.clone()
        });
    }
    // The active Job first.
    out.sort_by_key(|j| !j.active);
    out
}

/// An object's `Ready` status and the reason worth showing beside it (PURE): `UpToDate`'s when
/// that is False (a provisioned object stays Ready while a change waits), else `Ready`'s.
fn ready_and_reason(object: &CaptfObject) -> (Option<String>, Option<String>) {
    let cs = captf_core::snapshot::object_status(object).and_then(|s| s.conditions.as_deref());
    let find = |t: &str| cs.and_then(|cs| captf_shared::conditions::find(cs, t));
    let ready = find(captf_shared::conditions::READY);
    let reason = find(captf_shared::conditions::UP_TO_DATE)
        .filter(|c| c.status == "False")
        .or(ready)
        .map(|c| c.reason.clone())
        .filter(|r| !r.is_empty());
    (ready.map(|c| c.status.clone()), reason)
}

/// The node of one object read live (PURE).
pub fn node_of(r: &LiveRead, now: Timestamp) -> TreeNode {
    let e = explanation(r, now);
    let seen = observed(&r.object);
    let row = row(&e, seen, r.waited_on.as_ref(), now);
    let mut node = TreeNode::bare(&row.kind, &row.namespace, &row.name);
    (node.ready, node.ready_reason) = ready_and_reason(&r.object);
    node.next = Some(row.next);
    node.when = Some(row.when_words);
    node.not_before = row.not_before;
    let jobs: Vec<TreeJob> = r.snap.jobs.iter().map(job_of).collect();
    node.jobs = shown_jobs(&jobs, r.snap.active_job());
    let stored = r
        .inputs_secret
        .as_ref()
        .and_then(captf_core::inputs_secret::stored_inputs);
    let flow = crate::words::exports_words(&r.object, stored.as_ref());
    node.note = [row.foreign_lock_holder.map(|h| format!("state lock held by {h}")), flow]
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a}; {b}"));
    node
}

/// The node of an object whose reads failed: what its listing shows, and why.
fn unread_node(object: &CaptfObject, kind: Kind, why: String) -> TreeNode {
    let meta = object.metadata();
    let mut node = TreeNode::bare(
        kind.as_str(),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    (node.ready, node.ready_reason) = ready_and_reason(object);
    node.note = Some(format!("cannot read: {why}"));
    node
}

/// The node of a Cluster API `Cluster` (as JSON; PURE): its `Ready` condition (v1beta1), else
/// its `Available` one (v1beta2's summary), and its pause.
pub fn cluster_node(cluster: &Value, namespace: &str, name: &str) -> TreeNode {
    let mut node = TreeNode::bare("Cluster", namespace, name);
    let ready = cluster
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            let of = |t: &str| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(t));
            // v1beta1's Ready, else v1beta2's summary, Available.
            of("Ready").or_else(|| of("Available"))
        });
    node.ready = ready
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .map(String::from);
    node.ready_reason = ready
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(String::from);
    if captf_core::pause::cluster_paused(cluster) {
        node.note = Some("paused: no Job of its objects starts".to_string());
    }
    node
}

/// The name of the TerraformCluster a Cluster API `Cluster` (as JSON) names as its
/// infrastructure (PURE); `None` when it names another kind or none.
pub fn infrastructure_cluster(cluster: &Value) -> Option<String> {
    let r = cluster.pointer("/spec/infrastructureRef")?;
    (r.get("kind").and_then(Value::as_str) == Some(Kind::TerraformCluster.as_str()))
        .then(|| r.get("name").and_then(Value::as_str).map(String::from))
        .flatten()
        .filter(|n| !n.is_empty())
}

/// The TerraformMachinePool that owns a machine (by owner reference), if any (PURE).
pub fn owning_pool(object: &CaptfObject) -> Option<String> {
    object
        .metadata()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == Kind::TerraformMachinePool.as_str())
        .map(|o| o.name.clone())
}

/// Whether a labelled object is a verified member of the cluster, by the controller's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    Verified,
    Unverified,
}

/// Put each verified member under the TerraformCluster node and each unverified one among its
/// `unverified`, a machine owned by a pool listed alongside under that pool (PURE). `members`:
/// (node, the pool that owns it, its membership).
pub fn assemble(mut top: TreeNode, members: Vec<(TreeNode, Option<String>, Membership)>) -> TreeNode {
    let (verified, unverified): (Vec<_>, Vec<_>) =
        members.into_iter().partition(|(_, _, m)| *m == Membership::Verified);
    let strip = |v: Vec<(TreeNode, Option<String>, Membership)>| v.into_iter().map(|(n, p, _)| (n, p)).collect();
    top.children.extend(arrange(strip(verified)));
    top.unverified.extend(arrange(strip(unverified)));
    top
}

/// Pools first (by name), each with the machines it owns; then the others (PURE).
fn arrange(members: Vec<(TreeNode, Option<String>)>) -> Vec<TreeNode> {
    let (pools, rest): (Vec<_>, Vec<_>) = members
        .into_iter()
        .partition(|(n, _)| n.kind == Kind::TerraformMachinePool.as_str());
    let mut pools: Vec<TreeNode> = pools.into_iter().map(|(n, _)| n).collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut direct = Vec::new();
    for (node, pool) in rest {
        match pool.and_then(|p| pools.iter_mut().find(|n| n.name == p)) {
            Some(p) => p.children.push(node),
            None => direct.push(node),
        }
    }
    for p in &mut pools {
        p.children.sort_by(|a, b| a.name.cmp(&b.name));
    }
    direct.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    pools.extend(direct);
    pools
}

fn jobs_cell(jobs: &[TreeJob]) -> String {
    if jobs.is_empty() {
        return "-".to_string();
    }
    jobs.iter()
        .map(|j| format!("{} #{} {}", j.op, j.seq, j.outcome))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tree as text (PURE): one line per object, drawn as `clusterctl describe cluster` draws
/// it; `wide` adds the active Job's name.
pub fn render_tree(root: &TreeNode, wide: bool) -> String {
    fn walk(node: &TreeNode, prefix: &str, branch: &str, wide: bool, rows: &mut Vec<Vec<String>>) {
        let ready = match (&node.ready, &node.ready_reason) {
            (Some(s), Some(r)) if s != "True" => format!("{s} ({r})"),
            (Some(s), _) => s.clone(),
            (None, _) => "-".to_string(),
        };
        let mut row = vec![
            format!("{prefix}{branch}{}/{}", node.kind, node.name),
            ready,
            node.next.clone().unwrap_or_else(|| "-".into()),
            node.when
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "-".into()),
            jobs_cell(&node.jobs),
        ];
        if wide {
            row.push(
                node.jobs
                    .iter()
                    .find(|j| j.active)
                    .map_or_else(|| "-".to_string(), |j| j.name.clone()),
            );
        }
        row.push(node.note.clone().unwrap_or_default());
        rows.push(row);
        let child_prefix = match branch {
            "├─" => format!("{prefix}│ "),
            "└─" => format!("{prefix}  "),
            _ => prefix.to_string(),
        };
        let last = node.children.len().saturating_sub(1);
        for (i, c) in node.children.iter().enumerate() {
            walk(c, &child_prefix, if i == last { "└─" } else { "├─" }, wide, rows);
        }
    }
    fn unverified(node: &TreeNode) -> Vec<&TreeNode> {
        node.unverified
            .iter()
            .chain(node.children.iter().flat_map(unverified))
            .collect()
    }
    let mut rows = Vec::new();
    walk(root, "", "", wide, &mut rows);
    let mut header = vec!["NAME", "READY", "NEXT", "WHEN", "JOBS"];
    if wide {
        header.push("ACTIVE JOB");
    }
    header.push("NOTE");
    let mut out = format!("Namespace: {}\n{}", root.namespace, crate::words::table(&header, &rows));
    let apart = unverified(root);
    if !apart.is_empty() {
        let mut rows = Vec::new();
        for n in apart {
            walk(n, "", "", wide, &mut rows);
        }
        out.push_str(&format!("\n{UNVERIFIED}:\n{}", crate::words::table(&header, &rows)));
    }
    out
}

/// `cluster/<name>` (a Cluster API `Cluster`, by any of its names) → the name (PURE).
pub fn parse_capi_cluster(s: &str) -> Option<&str> {
    let (kind, name) = s.split_once('/')?;
    let kind = kind.to_ascii_lowercase();
    let bare = kind.strip_suffix(".cluster.x-k8s.io").unwrap_or(&kind);
    matches!(bare, "cluster" | "clusters")
        .then_some(name)
        .filter(|n| !n.is_empty())
}

/// A Cluster API `Cluster`, read live as JSON, in the newest served version of the two Cluster
/// API serves (`None`: not found, or Cluster API not installed).
async fn get_capi_cluster(conn: &Conn, name: &str) -> Result<Option<Value>, PluginError> {
    let ns = conn.namespace.as_str();
    for version in ["v1beta2", "v1beta1"] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(captf_core::pause::CAPI_GROUP, version, "Cluster"),
            "clusters",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), ns, &ar);
        match api.get(name).await {
            Ok(c) => return Ok(Some(serde_json::to_value(c).unwrap_or(Value::Null))),
            // Not served in this version, or no such object: try the other.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(from_kube(
                    e,
                    &format!("read Cluster {ns}/{name}"),
                    ("get", "clusters", captf_core::pause::CAPI_GROUP),
                    Some(ns),
                ));
            }
        }
    }
    Ok(None)
}

/// The TerraformCluster of cluster `cluster`: the one labelled with it, else the one of that
/// name (an unlabelled TerraformCluster's cluster name is its own name).
async fn find_cluster_tfc(conn: &Conn, cluster: &str) -> Result<Option<CaptfObject>, PluginError> {
    let ns = conn.namespace.as_str();
    let lp = ListParams::default().labels(&format!("{}={cluster}", keys::LABEL_CLUSTER_NAME));
    let labelled = live::list_objects(&conn.client, Kind::TerraformCluster, Some(ns), &lp)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))?;
    if let Some(o) = labelled.into_iter().next() {
        return Ok(Some(o));
    }
    live::get_object(&conn.client, Kind::TerraformCluster, ns, cluster)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))
}

async fn read_node(conn: &Conn, object: CaptfObject, kind: Kind, now: Timestamp) -> TreeNode {
    let ns = object.metadata().namespace.clone().unwrap_or_default();
    match live::read(&conn.client, object.clone()).await {
        Ok(r) => node_of(&r, now),
        Err(e) => unread_node(&object, kind, from_runtime(e, Some(&ns)).to_string()),
    }
}

/// Read the tree of `typed` live. An object that cannot be read is a node that says why; a
/// root that does not exist is an error.
pub async fn read_tree(conn: &Conn, typed: &str, now: Timestamp) -> Result<TreeNode, PluginError> {
    let ns = conn.namespace.as_str();
    let (capi, tfc, cluster_name) = if let Some(name) = parse_capi_cluster(typed) {
        let Some(cluster) = get_capi_cluster(conn, name).await? else {
            return Err(PluginError::NotFound {
                kind: "Cluster (cluster.x-k8s.io)".into(),
                name: name.to_string(),
                namespace: ns.to_string(),
            });
        };
        let tfc = match infrastructure_cluster(&cluster) {
            Some(tfc) => live::get_object(&conn.client, Kind::TerraformCluster, ns, &tfc)
                .await
                .map_err(|e| from_runtime(e, Some(ns)))?,
            None => find_cluster_tfc(conn, name).await?,
        };
        (Some(cluster_node(&cluster, ns, name)), tfc, name.to_string())
    } else {
        let t = parse_target(typed)
            .map_err(|e| PluginError::Usage(format!("{e}; or cluster/<name> for a Cluster API Cluster")))?;
        let object = crate::live_read::get_object(conn, &t).await?;
        if t.kind != Kind::TerraformCluster {
            let label = captf_core::inputs::cluster_name(t.kind, object.metadata());
            return Err(PluginError::Usage(match label {
                Some(c) => format!(
                    "a tree starts at a cluster: {} {ns}/{} belongs to cluster {c:?}; run `kubectl captf tree cluster/{c}` or name its TerraformCluster",
                    t.kind, t.name
                ),
                None => format!(
                    "a tree starts at a cluster, and {} {ns}/{} has no {} label: it belongs to none; `kubectl captf explain {typed}` shows it alone",
                    t.kind,
                    t.name,
                    keys::LABEL_CLUSTER_NAME
                ),
            }));
        }
        let cluster_name =
            captf_core::inputs::cluster_name(Kind::TerraformCluster, object.metadata()).unwrap_or(t.name.clone());
        (None, Some(object), cluster_name)
    };
    // Whom the members must belong to: the TerraformCluster's UID (none without one: then only
    // a Cluster API owner makes a member).
    let tfc_meta = tfc.as_ref().map(CaptfObject::metadata);
    let owner = Ident::new(
        Kind::TerraformCluster,
        ns.to_string(),
        tfc_meta
            .and_then(|m| m.name.clone())
            .unwrap_or_else(|| cluster_name.clone()),
        tfc_meta.and_then(|m| m.uid.clone()).unwrap_or_default(),
        Some(cluster_name.clone()),
    );
    let top = match tfc {
        Some(o) => read_node(conn, o, Kind::TerraformCluster, now).await,
        None => {
            let mut n = TreeNode::bare(Kind::TerraformCluster.as_str(), ns, "?");
            n.note = Some(format!(
                "no TerraformCluster of cluster {cluster_name:?} in namespace {ns:?}"
            ));
            n
        }
    };
    let lp = ListParams::default().labels(&format!("{}={cluster_name}", keys::LABEL_CLUSTER_NAME));
    let mut members = Vec::new();
    for kind in [Kind::TerraformMachinePool, Kind::TerraformMachine] {
        let objects = live::list_objects(&conn.client, kind, Some(ns), &lp)
            .await
            .map_err(|e| from_runtime(e, Some(ns)))?;
        for o in objects {
            let pool = owning_pool(&o);
            let membership = if is_member(&conn.client, &owner, &cluster_name, o.metadata())
                .await
                .map_err(|e| from_runtime(e, Some(ns)))?
            {
                Membership::Verified
            } else {
                Membership::Unverified
            };
            members.push((read_node(conn, o, kind, now).await, pool, membership));
        }
    }
    let tree = assemble(top, members);
    Ok(match capi {
        Some(mut c) => {
            c.children.push(tree);
            c
        }
        None => tree,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, op: &str, seq: u32, outcome: &str) -> TreeJob {
        TreeJob {
            name: name.into(),
            op: op.into(),
            seq,
            outcome: outcome.into(),
            active: false,
        }
    }

    fn node(kind: &str, name: &str) -> TreeNode {
        let mut n = TreeNode::bare(kind, "default", name);
        n.ready = Some("True".into());
        n.next = Some("wait (Idle)".into());
        n
    }

    #[test]
    fn a_node_shows_the_active_job_first_then_the_newest_job_of_each_op() {
        let records = vec![
            record("a1", "apply", 1, "failed"),
            record("a2", "apply", 2, "succeeded"),
            record("d3", "drift", 3, "succeeded"),
            record("a4", "apply", 4, "running"),
        ];
        let jobs = shown_jobs(&records, Some("a4"));
        let got: Vec<(&str, &str, bool)> = jobs
            .iter()
            .map(|j| (j.name.as_str(), j.outcome.as_str(), j.active))
            .collect();
        assert_eq!(got, [("a4", "running", true), ("d3", "succeeded", false)]);
        let idle = shown_jobs(&records[..3], None);
        let names: Vec<&str> = idle.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["d3", "a2"], "the newest of each op, newest first");
    }

    #[test]
    fn machines_owned_by_a_pool_hang_under_it_and_the_others_under_the_cluster() {
        let top = node("TerraformCluster", "c");
        let v = Membership::Verified;
        let tree = assemble(
            top,
            vec![
                (node("TerraformMachine", "m-1"), Some("p".into()), v),
                (node("TerraformMachine", "solo"), None, v),
                (node("TerraformMachinePool", "p"), None, v),
                (node("TerraformMachine", "m-0"), Some("p".into()), v),
                (node("TerraformMachine", "lost"), Some("gone".into()), v),
            ],
        );
        let shape: Vec<(String, Vec<String>)> = tree
            .children
            .iter()
            .map(|c| (c.name.clone(), c.children.iter().map(|m| m.name.clone()).collect()))
            .collect();
        assert_eq!(
            shape,
            [
                ("p".to_string(), vec!["m-0".to_string(), "m-1".to_string()]),
                ("lost".to_string(), vec![]),
                ("solo".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn a_tree_draws_only_verified_members_under_the_cluster_and_the_labelled_others_apart() {
        let (v, u) = (Membership::Verified, Membership::Unverified);
        let mut cluster = TreeNode::bare("Cluster", "default", "c");
        let tfc = assemble(
            node("TerraformCluster", "c"),
            vec![
                (node("TerraformMachinePool", "owned"), None, v),
                (node("TerraformMachinePool", "squatter"), None, u),
                (
                    node("TerraformMachine", "squatters-machine"),
                    Some("squatter".into()),
                    u,
                ),
                (node("TerraformMachine", "capi-machine"), None, v),
            ],
        );
        let names = |ns: &[TreeNode]| ns.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&tfc.children), ["owned", "capi-machine"]);
        assert_eq!(names(&tfc.unverified), ["squatter"]);
        assert_eq!(names(&tfc.unverified[0].children), ["squatters-machine"]);
        cluster.children.push(tfc);
        let text = render_tree(&cluster, false);
        let (members, apart) = text
            .split_once(&format!("{UNVERIFIED}:\n"))
            .unwrap_or_else(|| panic!("no unverified section in\n{text}"));
        assert!(members.contains("├─TerraformMachinePool/owned"), "{text}");
        assert!(!members.contains("squatter"), "{text}");
        let apart: Vec<&str> = apart
            .lines()
            .map(|l| l.split("   ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            apart,
            [
                "NAME",
                "TerraformMachinePool/squatter",
                "└─TerraformMachine/squatters-machine"
            ],
            "{text}"
        );
        assert!(UNVERIFIED.contains("they do not hold its deletion"));
        // Without unverified objects, no section and no key in the document.
        let plain = assemble(
            node("TerraformCluster", "c"),
            vec![(node("TerraformMachine", "m"), None, v)],
        );
        assert!(!render_tree(&plain, false).contains(UNVERIFIED));
        assert!(
            serde_json::to_value(&plain)
                .unwrap_or_default()
                .get("unverified")
                .is_none()
        );
    }

    #[test]
    fn the_tree_is_drawn_with_branches_and_one_line_per_object() {
        let mut cluster = TreeNode::bare("Cluster", "default", "c");
        cluster.ready = Some("False".into());
        cluster.ready_reason = Some("WaitingForInfrastructure".into());
        let mut tfc = node("TerraformCluster", "c");
        tfc.jobs = vec![TreeJob {
            name: "tc-c-1".into(),
            op: "apply".into(),
            seq: 1,
            outcome: "succeeded".into(),
            active: false,
        }];
        let mut pool = node("TerraformMachinePool", "p");
        pool.children.push(node("TerraformMachine", "m"));
        tfc.children = vec![pool, node("TerraformMachine", "solo")];
        cluster.children.push(tfc);
        let text = render_tree(&cluster, false);
        let names: Vec<&str> = text
            .lines()
            .skip(2)
            .map(|l| l.split("   ").next().unwrap_or_default().trim_end())
            .collect();
        assert_eq!(
            names,
            [
                "Cluster/c",
                "└─TerraformCluster/c",
                "  ├─TerraformMachinePool/p",
                "  │ └─TerraformMachine/m",
                "  └─TerraformMachine/solo",
            ],
            "{text}"
        );
        assert!(text.starts_with("Namespace: default\nNAME"), "{text}");
        assert!(text.contains("False (WaitingForInfrastructure)"), "{text}");
        assert!(text.contains("apply #1 succeeded"), "{text}");
        assert!(!text.contains("ACTIVE JOB"), "{text}");
        assert!(render_tree(&cluster, true).contains("ACTIVE JOB"));
    }

    #[test]
    fn a_cluster_api_cluster_is_named_as_kubectl_names_it_and_names_its_terraformcluster() {
        assert_eq!(parse_capi_cluster("cluster/prod"), Some("prod"));
        assert_eq!(parse_capi_cluster("clusters.cluster.x-k8s.io/prod"), Some("prod"));
        assert_eq!(parse_capi_cluster("tfc/prod"), None);
        assert_eq!(parse_capi_cluster("cluster/"), None);
        let c = serde_json::json!({"spec": {"infrastructureRef": {"kind": "TerraformCluster", "name": "prod-tf"}}});
        assert_eq!(infrastructure_cluster(&c).as_deref(), Some("prod-tf"));
        let other = serde_json::json!({"spec": {"infrastructureRef": {"kind": "AWSCluster", "name": "x"}}});
        assert_eq!(infrastructure_cluster(&other), None);
        let paused = serde_json::json!({"spec": {"paused": true},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": ""}]}});
        let n = cluster_node(&paused, "default", "prod");
        assert_eq!(n.ready.as_deref(), Some("True"));
        assert!(n.note.is_some_and(|w| w.contains("paused")));
        let v1beta2 = serde_json::json!({"status": {"conditions": [
            {"type": "Available", "status": "False", "reason": "NotAvailable"}]}});
        let n = cluster_node(&v1beta2, "default", "prod");
        assert_eq!(
            (n.ready.as_deref(), n.ready_reason.as_deref()),
            (Some("False"), Some("NotAvailable"))
        );
    }
}
