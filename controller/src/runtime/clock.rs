//! Where `now` comes from. Production uses the system clock; tests and the demo use the
//! simulator's clock, and a jump of that clock re-reconciles every object (so nothing waits
//! for wall-clock minutes).

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use captf_read::sim_clock::{ClockError, clock_request, parse_clock, read_sim_clock};

/// A source of the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
    /// A stream that yields whenever time jumps (the controllers then reconcile the objects
    /// whose wake the clock reached). The system clock never jumps.
    fn jumps(&self) -> BoxStream<'static, ()>;
    /// Whether wakes at a time follow this clock's jumps instead of real-time requeues.
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

/// A clock fed by a watch channel: the simulator's in-process clock, or its clock watch over HTTP.
#[derive(Clone, Debug)]
pub struct WatchClock {
    rx: watch::Receiver<Timestamp>,
}

impl WatchClock {
    pub fn new(rx: watch::Receiver<Timestamp>) -> Self {
        WatchClock { rx }
    }

    /// Follow the simulator's clock over HTTP: read it once (`GET <url>/sim/v1/clock`), then
    /// follow `?watch=true`, which sends the time at once and on every change. A watch that ends
    /// or fails is opened again after `reconnect`. The hidden `--sim-clock-url` flag uses this.
    ///
    /// A watch rather than a poll: the controller learns of a jump as soon as it happens, and an
    /// idle controller sends the simulator nothing, so "no request arrived" means it is idle.
    pub async fn from_sim_url(client: kube::Client, url: &str, reconnect: Duration) -> Result<Self, ClockError> {
        let first = read_sim_clock(&client, url).await?;
        let (tx, rx) = watch::channel(first);
        let url = url.to_string();
        tokio::spawn(async move {
            while !tx.is_closed() {
                if let Err(e) = follow_sim_clock(&client, &url, &tx).await {
                    tracing::warn!(error = %e, "the simulator clock watch failed; opening it again");
                }
                tokio::time::sleep(reconnect).await;
            }
        });
        Ok(WatchClock { rx })
    }
}

/// One watch of the simulator clock: every time it sends goes to `tx`, until the stream ends.
async fn follow_sim_clock(client: &kube::Client, url: &str, tx: &watch::Sender<Timestamp>) -> Result<(), ClockError> {
    use futures::{AsyncBufReadExt, TryStreamExt};
    let req = clock_request(url, true)?;
    let body = client.request_stream(req).await.map_err(|e| ClockError::Read {
        url: url.to_string(),
        source: Box::new(e),
    })?;
    let mut lines = body.lines();
    loop {
        let line = match lines.try_next().await {
            Ok(Some(line)) => line,
            // Ended: the simulator stops or drops its watches.
            Ok(None) => return Ok(()),
            Err(e) => {
                return Err(ClockError::Stream {
                    url: url.to_string(),
                    source: e,
                });
            }
        };
        let now = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .as_ref()
            .and_then(parse_clock)
            .ok_or_else(|| ClockError::Parse {
                url: url.to_string(),
                why: format!("expected {{\"now\": <RFC 3339>}} lines, got {line:?}"),
            })?;
        tx.send_if_modified(|t| {
            let changed = *t != now;
            *t = now;
            changed
        });
    }
}

impl Clock for WatchClock {
    fn now(&self) -> Timestamp {
        *self.rx.borrow()
    }
    fn jumps(&self) -> BoxStream<'static, ()> {
        changes(self.rx.clone())
    }
    fn simulated(&self) -> bool {
        true
    }
}

/// A stream that yields each time the value behind `rx` changes from now on (ends when its
/// sender is gone).
pub fn changes<T: Send + Sync + 'static>(mut rx: watch::Receiver<T>) -> BoxStream<'static, ()> {
    rx.mark_unchanged();
    stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
    .boxed()
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

    #[tokio::test]
    async fn the_sim_clock_is_followed_by_watch_over_http_jump_by_jump() {
        let sim = captf_sim::Sim::builder()
            .start_time("2026-03-01T10:00:00Z".parse().unwrap())
            .start()
            .await
            .unwrap();
        let c = WatchClock::from_sim_url(sim.client().unwrap(), "", Duration::from_millis(50))
            .await
            .unwrap();
        assert_eq!(c.now(), sim.now());
        let mut jumps = c.jumps();
        for minutes in [5, 60, 1] {
            sim.advance(Duration::from_secs(minutes * 60));
            tokio::time::timeout(Duration::from_secs(10), jumps.next())
                .await
                .expect("the jump arrives over the watch")
                .unwrap();
            assert_eq!(c.now(), sim.now(), "after a jump of {minutes}m");
        }
        // One GET, then one watch: following the clock is not polling it.
        assert_eq!(sim.requests(), 2);
    }
}
