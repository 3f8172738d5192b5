//! Reading the simulated clock from another process over HTTP (e.g. the controller in a
//! test-only mode): `GET /sim/v1/clock` → `{"now": "<RFC 3339>"}`, and
//! `GET /sim/v1/clock?watch=true` → one such JSON line now and on every change.

use futures::{AsyncBufReadExt, Stream, StreamExt};
use jiff::Timestamp;
use serde::Deserialize;

/// The path of the clock endpoint.
pub const CLOCK_PATH: &str = "/sim/v1/clock";

/// Failed to read the simulated clock.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("failed to request the simulated clock: {0}")]
    Request(#[from] kube::Error),
    #[error("failed to build the clock request: {0}")]
    Build(#[from] http::Error),
    #[error("failed to read the simulated clock stream: {0}")]
    Read(#[from] std::io::Error),
    #[error("failed to parse the simulated clock answer {0:?}: {1}")]
    Parse(String, String),
}

#[derive(Deserialize)]
struct Now {
    now: String,
}

fn parse(line: &str) -> Result<Timestamp, ClockError> {
    let n: Now = serde_json::from_str(line).map_err(|e| ClockError::Parse(line.into(), e.to_string()))?;
    n.now
        .parse()
        .map_err(|e: jiff::Error| ClockError::Parse(line.into(), e.to_string()))
}

/// The simulator's current time.
pub async fn remote_now(client: &kube::Client) -> Result<Timestamp, ClockError> {
    let req = http::Request::get(CLOCK_PATH).body(Vec::new())?;
    let text = client.request_text(req).await?;
    parse(&text)
}

/// The simulator's time now and at every change.
pub async fn remote_clock(
    client: &kube::Client,
) -> Result<impl Stream<Item = Result<Timestamp, ClockError>> + use<>, ClockError> {
    let req = http::Request::get(format!("{CLOCK_PATH}?watch=true")).body(Vec::new())?;
    let lines = client.request_stream(req).await?.lines();
    Ok(lines.map(|l| parse(&l?)))
}
