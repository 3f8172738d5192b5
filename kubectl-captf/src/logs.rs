//! `logs`: the runner's log of an object's newest Job, or of the one before it.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};

use captf_core::ident::Ident;
use captf_core::snapshot::pods_by_job;
use captf_read::api as gather;
use captf_shared::names;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube, from_runtime};
use crate::live_read::get_object;
use crate::printed::Printed;
use crate::target::Target;

/// The pod whose runner log `logs` shows: of the object's newest Job (of `op`), or the one
/// before it.
pub struct LogPod {
    pub job: String,
    pub op: captf_shared::Op,
    pub seq: u32,
    pub pod: String,
}

impl LogPod {
    /// The line `logs` prints on stderr above the log.
    pub fn banner(&self) -> String {
        format!(
            "==> Job {} ({}, #{}), pod {} <==\n",
            self.job, self.op, self.seq, self.pod
        )
    }
}

pub(crate) async fn log_pod(
    conn: &Conn,
    t: &Target,
    op: Option<captf_shared::Op>,
    previous: bool,
) -> Result<LogPod, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    let id = Ident::of(&object, t.kind).map_err(|e| from_runtime(e.into(), Some(ns)))?;
    let (jobs, pods) = gather::live_jobs_and_pods(&conn.client, &id)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))?;
    let mut ours: Vec<(u32, captf_shared::Op, String)> = jobs
        .iter()
        .filter_map(|j| {
            let name = j.metadata.name.clone()?;
            let (jop, seq) = names::parse_job_name(id.kind, &id.namespace, &id.name, &name)?;
            op.is_none_or(|o| o == jop).then_some((seq, jop, name))
        })
        .collect();
    ours.sort_by_key(|o| std::cmp::Reverse(o.0));
    let which = if previous { "the Job before the newest" } else { "a Job" };
    let of_op = op.map(|o| format!(" {o}")).unwrap_or_default();
    let Some((seq, jop, job)) = ours.get(usize::from(previous)).cloned() else {
        return Err(PluginError::Refused(format!(
            "{} has no{of_op} Job{}: {which} was never run or was pruned (the history keeps the newest Jobs per op). `kubectl captf explain {}/{}` says what runs next.",
            id.what(),
            if previous { " before the newest" } else { "" },
            t.kind.short(),
            t.name
        )));
    };
    let by_job = pods_by_job(&pods);
    let Some(pod) = by_job.get(job.as_str()).and_then(|p| p.metadata.name.clone()) else {
        return Err(PluginError::Refused(format!(
            "the pod of Job {job} is gone, and its log with it (the Job's result is booked on the Job: `kubectl get job -n {ns} {job} -o yaml`)"
        )));
    };
    Ok(LogPod { job, op: jop, seq, pod })
}

pub(crate) async fn logs(
    conn: &Conn,
    t: &Target,
    op: Option<captf_shared::Op>,
    previous: bool,
) -> Result<Printed, PluginError> {
    let ns = conn.namespace.as_str();
    let picked = log_pod(conn, t, op, previous).await?;
    let pod = picked.pod.clone();
    let lp = LogParams {
        container: Some("runner".into()),
        ..Default::default()
    };
    let log = Api::<Pod>::namespaced(conn.client.clone(), ns)
        .logs(&pod, &lp)
        .await
        .map_err(|e| {
            from_kube(
                e,
                &format!("read the log of pod {ns}/{pod}"),
                ("get", "pods/log", ""),
                Some(ns),
            )
        })?;
    Ok(Printed {
        stdout: log,
        stderr: picked.banner(),
        partial: false,
    })
}
