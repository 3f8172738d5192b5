//! Where `now` comes from. Production uses the system clock; tests and the demo use the
//! simulator's clock, and a jump of that clock re-reconciles every object (so nothing waits
//! for wall-clock minutes).

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

/// A source of the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
    /// A stream that yields whenever time jumps (the controllers re-reconcile everything).
    /// The system clock never jumps.
    fn jumps(&self) -> BoxStream<'static, ()>;
    /// Whether requeue delays are simulated time (so real-time requeues should be short).
    fn simulated(&self) -> bool {
        false
    }
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn jumps(&self) -> BoxStream<'static, ()> {
        stream::pending().boxed()
    }
}

/// A clock fed by a watch channel: the simulator's in-process clock, or the HTTP poller below.
#[derive(Clone, Debug)]
pub struct WatchClock {
    rx: watch::Receiver<Timestamp>,
}

impl WatchClock {
    pub fn new(rx: watch::Receiver<Timestamp>) -> Self {
        WatchClock { rx }
    }

    /// Follow the simulator's clock over HTTP (`GET <url>/sim/v1/clock`), polled every
    /// `every`. The hidden `--sim-clock-url` flag uses this.
    pub async fn from_sim_url(client: kube::Client, url: &str, every: Duration) -> Result<Self, ClockError> {
        let first = read_sim_clock(&client, url).await?;
        let (tx, rx) = watch::channel(first);
        let url = url.to_string();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if tx.is_closed() {
                    return;
                }
                match read_sim_clock(&client, &url).await {
                    Ok(now) => {
                        tx.send_if_modified(|t| {
                            let changed = *t != now;
                            *t = now;
                            changed
                        });
                    }
                    Err(e) => tracing::warn!(error = %e, "failed to read the simulator clock"),
                }
            }
        });
        Ok(WatchClock { rx })
    }
}

impl Clock for WatchClock {
    fn now(&self) -> Timestamp {
        *self.rx.borrow()
    }
    fn jumps(&self) -> BoxStream<'static, ()> {
        let mut rx = self.rx.clone();
        rx.mark_unchanged();
        stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
        .boxed()
    }
    fn simulated(&self) -> bool {
        true
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("failed to read the simulator clock at {url}: {source}")]
    Read {
        url: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("failed to parse the simulator clock at {url}: {why}")]
    Parse { url: String, why: String },
}

/// The simulator's time, read once from `<url>/sim/v1/clock` (`url` empty: the client's server).
pub async fn read_sim_clock(client: &kube::Client, url: &str) -> Result<Timestamp, ClockError> {
    let path = format!("{}/sim/v1/clock", url.trim_end_matches('/'));
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| ClockError::Parse {
            url: url.to_string(),
            why: e.to_string(),
        })?;
    let v: serde_json::Value = client.request(req).await.map_err(|e| ClockError::Read {
        url: url.to_string(),
        source: Box::new(e),
    })?;
    parse_clock(&v).ok_or_else(|| ClockError::Parse {
        url: url.to_string(),
        why: format!("expected {{\"now\": <RFC 3339>}}, got {v}"),
    })
}

/// `{"now": "<RFC 3339>"}` → the time.
pub fn parse_clock(v: &serde_json::Value) -> Option<Timestamp> {
    v.get("now")?.as_str()?.parse().ok()
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_sim_clock_document_parses() {
        let t = parse_clock(&serde_json::json!({"now": "2026-01-01T00:00:00Z"})).unwrap();
        assert_eq!(t, "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(parse_clock(&serde_json::json!({"now": 3})), None);
    }

    #[tokio::test]
    async fn a_watch_clock_reports_jumps_and_the_new_time() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let (tx, rx) = watch::channel(t0);
        let c = WatchClock::new(rx);
        let mut jumps = c.jumps();
        assert_eq!(c.now(), t0);
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        tx.send(t1).unwrap();
        assert_eq!(jumps.next().await, Some(()));
        assert_eq!(c.now(), t1);
    }
}
