//! `captf-webhook`: the admission webhook (docs/operating.md).
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`admission`] | the pure part: an AdmissionReview body in, a response out (calls `captf-shared`) |
//! | [`approval`] | who may approve: a plan approval or a guard set to `Allow` needs the `approve` verb (a SubjectAccessReview) |
//! | [`patch`] | the defaults as an RFC 6902 JSON Patch under `/spec` |
//! | [`routes`] | the axum router: `/mutate`, `/validate`, `/convert`, `/healthz`, `/readyz`, bad-input status codes |
//! | [`convert`] | `/convert`: ConversionReviews over `captf_shared::conversion` |
//! | [`conn`] | per-connection limits counted in requests, not bytes: first-request and idle timeouts, age, request count; connections per source address and reserved for the API server, idle ones closed to make room |
//! | [`budget`] | requests and body bytes in flight, in all, reserved for the API server, and per source address (429 past them) |
//! | [`trust`] | who is the API server: a verified client certificate, or a configured address |
//! | [`watched`] | the namespaces a controller watches, and the warning for an object created elsewhere |
//! | [`rate`] | the minimum rate a request body must arrive at (408 below it) |
//! | [`fuzzing`] | the fuzz entry point, also replayed over the committed corpus by `cargo test` |
//! | [`tls`] | rustls configuration and the certificate resolver that follows file contents |
//! | [`metrics`] | prometheus-client metrics and the plain `/metrics` router |
//! | [`server`] | binding, the TLS accept loop, timeouts, graceful shutdown |
//! | [`cli`] | clap flags (each with an env var) and logging setup |
//! | [`devcerts`] | a development CA and serving certificate (rcgen) |

pub mod admission;
pub mod approval;
pub mod budget;
pub mod cli;
pub mod conn;
pub mod convert;
pub mod devcerts;
pub mod fuzzing;
pub mod metrics;
pub mod patch;
pub mod rate;
pub mod routes;
pub mod server;
pub mod tls;
pub mod trust;
pub mod watched;

pub use routes::{AppState, router};
pub use server::{Bound, Config, ServeError, bind, serve};

/// The route that returns defaults as a JSON patch.
pub const MUTATE_PATH: &str = "/mutate";
/// The route that validates.
pub const VALIDATE_PATH: &str = "/validate";
/// The route that converts objects between API versions (the CRDs' conversion webhook).
pub const CONVERT_PATH: &str = captf_shared::crd::CONVERT_PATH;
/// Liveness, on the TLS port.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Readiness, on the TLS port (503 once shutdown has begun).
pub const READYZ_PATH: &str = "/readyz";
/// Prometheus metrics, on the plain metrics port.
pub const METRICS_PATH: &str = "/metrics";
/// Where the TLS server listens by default (the chart's Service targets this port).
pub const DEFAULT_ADDR: &str = "0.0.0.0:9443";
/// Where the plain metrics server listens by default.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:8080";
/// The largest AdmissionReview body accepted by default (7 MiB, as controller-runtime accepts): an
/// UPDATE carries the object and its old version, each up to etcd's 1.5 MiB, with room for the
/// JSON escaping of both. Larger ones get 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
