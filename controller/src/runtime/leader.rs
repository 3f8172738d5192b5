//! Lease-based leader election: the Lease `captf-controller-leader` (a shard's own, see
//! `captf_core::sharding::leader_lease_name`) in the controller's own namespace. One replica holds it and writes; a standby takes over when the holder stops
//! renewing for `LEASE_DURATION`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use captf_read::errors::{self, ApiAction, Error};

/// Default lease duration; the holder renews every third of it.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// What the elector should do with the Lease it read (PURE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write ourselves as holder (create, renew, or take over a lapsed lease).
    Acquire { transition: bool },
    /// Somebody else holds a live lease.
    Follow(String),
}

pub fn step(spec: Option<&LeaseSpec>, me: &str, now: Timestamp, default_duration: Duration) -> Step {
    let Some(spec) = spec else {
        return Step::Acquire { transition: true };
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return Step::Acquire { transition: true };
    }
    if holder == me {
        return Step::Acquire { transition: false };
    }
    let secs = spec
        .lease_duration_seconds
        .map_or(i64::try_from(default_duration.as_secs()).unwrap_or(i64::MAX), i64::from);
    let renewed = spec.renew_time.as_ref().map(|t| t.0);
    let lapsed = renewed.is_none_or(|r| r + SignedDuration::from_secs(secs) < now);
    if lapsed {
        Step::Acquire { transition: true }
    } else {
        Step::Follow(holder.to_string())
    }
}

/// Try once; returns whether we lead afterwards.
pub async fn try_lead(api: &Api<Lease>, ns: &str, name: &str, me: &str, duration: Duration) -> Result<bool, Error> {
    let now = Timestamp::now();
    let current = api
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetLease, format!("{ns}/{name}"), e))?;
    let Step::Acquire { transition } = step(current.as_ref().and_then(|l| l.spec.as_ref()), me, now, duration) else {
        return Ok(false);
    };
    let mut lease = current.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: None,
    });
    let exists = lease.metadata.resource_version.is_some();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(me.into());
    spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(now));
    if transition {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    let res = if exists {
        api.replace(name, &PostParams::default(), &lease).await
    } else {
        api.create(&PostParams::default(), &lease).await
    };
    match res {
        Ok(_) => Ok(true),
        Err(e) if errors::is_conflict(&e) => Ok(false),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
    }
}

/// Where the elector tells the rest of the controller how the election goes.
pub struct Signals {
    /// True while this replica leads.
    pub leader: Arc<AtomicBool>,
    /// `captf_leader`.
    pub gauge: prometheus_client::metrics::gauge::Gauge,
    /// Counts the times this replica became the leader (the controllers then look at every
    /// object: what they decided in an earlier term, or as a standby, may be stale).
    pub terms: watch::Sender<u64>,
}

/// Keep electing until `shutdown`; `signals` follow the outcome. On shutdown a leader gives the
/// lease up so a standby takes over at once.
pub async fn run(
    client: kube::Client,
    ns: String,
    name: String,
    me: String,
    duration: Duration,
    signals: Signals,
    mut shutdown: watch::Receiver<bool>,
) {
    let Signals { leader, gauge, terms } = signals;
    let api: Api<Lease> = Api::namespaced(client, &ns);
    loop {
        let leading = match try_lead(&api, &ns, &name, &me, duration).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("leader election: {e}");
                false
            }
        };
        if leader.swap(leading, Ordering::SeqCst) != leading {
            tracing::info!(identity = %me, leading, "leader election changed");
            gauge.set(i64::from(leading));
            if leading {
                terms.send_modify(|n| *n += 1);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(duration / 3) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    gauge.set(0);
    if leader.swap(false, Ordering::SeqCst)
        && let Ok(Some(mut lease)) = api.get_opt(&name).await
        && lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(me.as_str())
    {
        if let Some(s) = lease.spec.as_mut() {
            s.holder_identity = None;
        }
        let _ = api.replace(&name, &PostParams::default(), &lease).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn a_standby_takes_over_only_when_the_lease_lapses() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert_eq!(step(None, "b", now, LEASE_DURATION), Step::Acquire { transition: true });
        assert_eq!(
            step(Some(&spec("a", 990)), "b", now, LEASE_DURATION),
            Step::Follow("a".into())
        );
        assert_eq!(
            step(Some(&spec("a", 984)), "b", now, LEASE_DURATION),
            Step::Acquire { transition: true }
        );
        assert_eq!(
            step(Some(&spec("b", 990)), "b", now, LEASE_DURATION),
            Step::Acquire { transition: false }
        );
    }
}
