//! The simulator's clock, read once (the demo's and the tests' time): what `kubectl captf` reads
//! when it talks to the simulator, and what the controller's clock follows (`runtime/clock.rs`).

use k8s_openapi::jiff::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("failed to read the simulator clock at {url}: {source}")]
    Read {
        url: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("the simulator clock watch at {url} broke: {source}")]
    Stream {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse the simulator clock at {url}: {why}")]
    Parse { url: String, why: String },
}

/// The request for the simulator's clock at `<url>/sim/v1/clock` (`url` empty: the client's
/// server), once or (`watch`) as a stream of its changes.
pub fn clock_request(url: &str, watch: bool) -> Result<http::Request<Vec<u8>>, ClockError> {
    let query = if watch { "?watch=true" } else { "" };
    http::Request::get(format!("{}/sim/v1/clock{query}", url.trim_end_matches('/')))
        .body(Vec::new())
        .map_err(|e| ClockError::Parse {
            url: url.to_string(),
            why: e.to_string(),
        })
}

/// The simulator's time, read once from `<url>/sim/v1/clock` (`url` empty: the client's server).
pub async fn read_sim_clock(client: &kube::Client, url: &str) -> Result<Timestamp, ClockError> {
    let req = clock_request(url, false)?;
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
