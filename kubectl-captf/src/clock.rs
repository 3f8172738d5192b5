//! The time the plugin decides at: `--now`, else the simulator's clock when the server is the
//! CAPTF simulator (it answers `GET /sim/v1/clock`), else the wall clock. A real API server
//! answers that path with 404 (or 403 when the user may not read non-resource URLs).

use k8s_openapi::jiff::Timestamp;

use captf_read::sim_clock::{ClockError, read_sim_clock};

use crate::errors::{PluginError, from_kube};

/// What the server answered to `GET /sim/v1/clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockAnswer {
    /// The simulator's time.
    Sim(Timestamp),
    /// An API error with this HTTP status.
    Status(u16),
    /// No answer (the server cannot be reached, or the answer was not a clock).
    Other,
}

/// The clock to decide at (PURE): the simulator's time when the server has one; the wall
/// clock when it answers 404 or 403 (a real API server); `None` when the probe failed
/// otherwise, and the failure is the answer to report.
pub fn now_from(answer: ClockAnswer, wall: Timestamp) -> Option<Timestamp> {
    match answer {
        ClockAnswer::Sim(t) => Some(t),
        ClockAnswer::Status(404 | 403) => Some(wall),
        ClockAnswer::Status(_) | ClockAnswer::Other => None,
    }
}

/// Ask the server for its simulated clock once, and choose the time to decide at.
pub async fn server_now(client: &kube::Client) -> Result<Timestamp, PluginError> {
    let (answer, err) = match read_sim_clock(client, "").await {
        Ok(t) => (ClockAnswer::Sim(t), None),
        Err(ClockError::Read { source, .. }) => match *source {
            kube::Error::Api(s) => (ClockAnswer::Status(s.code), Some(kube::Error::Api(s))),
            e => (ClockAnswer::Other, Some(e)),
        },
        Err(e) => {
            return Err(PluginError::Api(format!(
                "{e}; pass --now <RFC 3339 time> to decide at a time of your choosing"
            )));
        }
    };
    match (now_from(answer, Timestamp::now()), err) {
        (Some(t), _) => Ok(t),
        (None, Some(e)) => Err(from_kube(
            e,
            "ask the server for its clock",
            ("get", "/sim/v1/clock", ""),
            None,
        )),
        (None, None) => Err(PluginError::Api("cannot read the server's clock".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulators_clock_is_used_and_a_real_servers_404_or_403_means_the_wall_clock() {
        let sim: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap_or_default();
        let wall: Timestamp = "2026-12-03T06:00:00Z".parse().unwrap_or_default();
        assert_eq!(now_from(ClockAnswer::Sim(sim), wall), Some(sim));
        assert_eq!(now_from(ClockAnswer::Status(404), wall), Some(wall));
        assert_eq!(now_from(ClockAnswer::Status(403), wall), Some(wall));
    }

    #[test]
    fn any_other_failure_of_the_clock_probe_is_reported_not_guessed() {
        let wall: Timestamp = "2026-12-03T06:00:00Z".parse().unwrap_or_default();
        assert_eq!(now_from(ClockAnswer::Status(401), wall), None);
        assert_eq!(now_from(ClockAnswer::Status(500), wall), None);
        assert_eq!(now_from(ClockAnswer::Other, wall), None);
    }
}
