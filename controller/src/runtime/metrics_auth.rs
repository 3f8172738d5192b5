//! `--metrics-auth=kubernetes`: who may read `/metrics`, decided by the API server, as
//! controller-runtime's secure metrics and kube-rbac-proxy decide it (docs/operating.md,
//! "Metrics and alerts"; docs/trust.md).
//!
//! Each request must carry `Authorization: Bearer <token>`. The controller asks the API server
//! whose token it is (a TokenReview, authentication.k8s.io/v1) and whether that user may `get` the
//! non-resource URL `/metrics` (a SubjectAccessReview, authorization.k8s.io/v1, with the user's
//! name, uid, groups and extra). No token, or one the API server does not accept: 401; a user
//! who may not: 403; each with a one-line plain-text reason. A review the API server could not
//! answer: 503, not cached.
//!
//! Decisions, allowed and refused, are cached for [`CACHE_TTL`], at most [`CACHE_ENTRIES`] of
//! them, keyed by the SHA-256 of the token (the token itself is never kept, logged or answered),
//! so a scraper costs one review pair per [`CACHE_TTL`]. At most [`MAX_REVIEWS_IN_FLIGHT`] review
//! pairs run at once, at most [`MAX_REVIEWS_PER_PEER`] of them for one client address (more from
//! that address: 429 at once), so a client sending a new forged token with every request cannot
//! keep the real scraper waiting; an `Authorization` header longer than
//! [`MAX_AUTHORIZATION_BYTES`] is refused before any review.
//!
//! The decisions are pure ([`bearer_token`], [`token_key`], [`authenticated`], [`access_review`],
//! [`authorized`], [`Decision::status`], [`DecisionCache`]); the two API calls are
//! [`KubeReviewer`]'s, behind the [`Reviewer`] trait.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

/// How `/metrics` is protected (`--metrics-auth`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsAuth {
    /// Anyone who reaches the port reads the metrics (which name every object).
    #[default]
    None,
    /// A bearer token the API server authenticates (TokenReview) and authorizes for `get` on
    /// the non-resource URL `/metrics` (SubjectAccessReview).
    Kubernetes,
}

/// The non-resource URL a scraper must be allowed to `get`.
pub const METRICS_PATH: &str = "/metrics";
/// The verb of the SubjectAccessReview.
pub const METRICS_VERB: &str = "get";
/// The longest `Authorization` header reviewed (service-account tokens are 1–2 KiB; OIDC tokens
/// with many groups a few KiB).
pub const MAX_AUTHORIZATION_BYTES: usize = 16 * 1024;
/// How long a decision is reused for the same token.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// How many tokens' decisions are kept at most.
pub const CACHE_ENTRIES: usize = 1000;
/// Review pairs running at once; more wait up to [`REVIEW_WAIT`].
pub const MAX_REVIEWS_IN_FLIGHT: usize = 8;
/// Review pairs running or waiting at once for requests from one client address: a quarter of
/// [`MAX_REVIEWS_IN_FLIGHT`], so one address never holds every turn.
pub const MAX_REVIEWS_PER_PEER: usize = 2;
/// How long a request waits for its turn to be reviewed, and how long the reviews may take.
pub const REVIEW_WAIT: Duration = Duration::from_secs(5);

/// What a request to `/metrics` gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// 200: the user may get `/metrics`.
    Allowed { user: String },
    /// 401: no token, or one the API server does not accept.
    Unauthenticated(String),
    /// 403: the user may not get `/metrics`.
    Forbidden(String),
    /// 503: the API server could not be asked; never cached.
    Unavailable(String),
    /// 429: the client's address has [`MAX_REVIEWS_PER_PEER`] reviews going; never cached.
    Busy(String),
}

impl Decision {
    /// The HTTP status of the decision.
    pub fn status(&self) -> StatusCode {
        match self {
            Decision::Allowed { .. } => StatusCode::OK,
            Decision::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Decision::Forbidden(_) => StatusCode::FORBIDDEN,
            Decision::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Decision::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The one-line reason of a refusal (empty when allowed).
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allowed { .. } => "",
            Decision::Unauthenticated(r) | Decision::Forbidden(r) | Decision::Unavailable(r) | Decision::Busy(r) => r,
        }
    }

    /// Whether the decision may be reused for the same token.
    pub fn cacheable(&self) -> bool {
        !matches!(self, Decision::Unavailable(_) | Decision::Busy(_))
    }
}

/// The bearer token of a request: exactly one `Authorization` header of at most
/// [`MAX_AUTHORIZATION_BYTES`], `Bearer <token>` (the scheme in any case, RFC 7235), the token
/// non-empty and without blanks. Anything else is 401, before any review.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, Decision> {
    let unauthenticated = |why: &str| Decision::Unauthenticated(why.to_string());
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(unauthenticated("no bearer token: send Authorization: Bearer <token>"));
    };
    if values.next().is_some() {
        return Err(unauthenticated("more than one Authorization header"));
    }
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Err(Decision::Unauthenticated(format!(
            "the Authorization header is longer than {MAX_AUTHORIZATION_BYTES} bytes"
        )));
    }
    let not_bearer = || unauthenticated("the Authorization header is not Bearer <token>");
    let text = value.to_str().map_err(|_| not_bearer())?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(not_bearer)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(char::is_whitespace) {
        return Err(not_bearer());
    }
    Ok(token)
}

/// The cache key of a token: its SHA-256, so the cache never holds the token itself.
pub fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The user of a TokenReview's status, or 401 when the API server did not authenticate the
/// token (or named no user).
pub fn authenticated(status: Option<&TokenReviewStatus>) -> Result<UserInfo, Decision> {
    let refused = || Decision::Unauthenticated("the API server did not accept the bearer token".to_string());
    let status = status.ok_or_else(refused)?;
    if status.authenticated != Some(true) {
        return Err(refused());
    }
    match &status.user {
        Some(user) if user.username.as_deref().is_some_and(|n| !n.is_empty()) => Ok(user.clone()),
        _ => Err(Decision::Unauthenticated("the bearer token names no user".to_string())),
    }
}

/// The SubjectAccessReview for `get` on the non-resource URL `/metrics` as the token's user:
/// its name, uid, groups and extra, exactly as the TokenReview gave them.
pub fn access_review(user: &UserInfo) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.to_string()),
                verb: Some(METRICS_VERB.to_string()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    }
}

/// The decision of a SubjectAccessReview's status for `user`: allowed (and not denied), or 403.
pub fn authorized(user: &str, status: Option<&SubjectAccessReviewStatus>) -> Decision {
    match status {
        Some(s) if s.allowed && s.denied != Some(true) => Decision::Allowed { user: user.to_string() },
        _ => Decision::Forbidden(format!(
            "user {user:?} may not {METRICS_VERB} path {METRICS_PATH:?}: bind it to a ClusterRole that grants it (the chart's <release>-metrics-reader)"
        )),
    }
}

/// Decisions by token key, each for a while; bounded in size.
#[derive(Debug)]
pub struct DecisionCache {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<[u8; 32], (Decision, Instant)>,
}

impl DecisionCache {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        DecisionCache {
            ttl,
            capacity: capacity.max(1),
            entries: HashMap::new(),
        }
    }

    /// The decision for `key` if it was made less than the TTL before `now`.
    pub fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Decision> {
        match self.entries.get(key) {
            Some((d, expires)) if now < *expires => Some(d.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keep `decision` for `key` until the TTL after `now` (a decision that may not be cached is
    /// dropped). When full, expired entries go first, then the one that expires soonest.
    pub fn insert(&mut self, key: [u8; 32], decision: Decision, now: Instant) {
        if !decision.cacheable() {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, (_, expires)| now < *expires);
            if self.entries.len() >= self.capacity {
                let soonest = self.entries.iter().min_by_key(|(_, (_, e))| *e).map(|(k, _)| *k);
                if let Some(k) = soonest {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(key, (decision, now + self.ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A review the API server did not answer (its message never holds the token).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// The two API calls.
pub trait Reviewer: Send + Sync + 'static {
    /// A TokenReview of `token` (the API server's own audiences); its status.
    fn review_token(&self, token: &str) -> impl Future<Output = Result<Option<TokenReviewStatus>, ReviewError>> + Send;
    /// A SubjectAccessReview; its status.
    fn review_access(
        &self,
        review: SubjectAccessReview,
    ) -> impl Future<Output = Result<Option<SubjectAccessReviewStatus>, ReviewError>> + Send;
}

/// The reviews, created in the API server with the controller's client (the chart's ClusterRole
/// `<release>-metrics-auth` lets it create both).
#[derive(Clone)]
pub struct KubeReviewer {
    client: kube::Client,
}

impl KubeReviewer {
    pub fn new(client: kube::Client) -> Self {
        KubeReviewer { client }
    }
}

impl Reviewer for KubeReviewer {
    async fn review_token(&self, token: &str) -> Result<Option<TokenReviewStatus>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map(|r| r.status)
            .map_err(|e| ReviewError(format!("TokenReview: {e}")))
    }

    async fn review_access(
        &self,
        review: SubjectAccessReview,
    ) -> Result<Option<SubjectAccessReviewStatus>, ReviewError> {
        Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map(|r| r.status)
            .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))
    }
}

/// The decisions of one metrics server: the reviewer, the cache, the bounds on reviews in flight
/// (in all, and per client address).
pub struct Authorizer<R> {
    reviewer: R,
    cache: Mutex<DecisionCache>,
    reviews: Semaphore,
    /// Reviews running or waiting, per client address; an address leaves the map with its last.
    peers: Mutex<HashMap<IpAddr, usize>>,
}

/// One review of a client address's, counted in [`Authorizer::peers`] until dropped.
struct PeerTurn<'a> {
    peers: &'a Mutex<HashMap<IpAddr, usize>>,
    peer: IpAddr,
}

impl Drop for PeerTurn<'_> {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = peers.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

impl<R: Reviewer> Authorizer<R> {
    pub fn new(reviewer: R) -> Self {
        Authorizer {
            reviewer,
            cache: Mutex::new(DecisionCache::new(CACHE_TTL, CACHE_ENTRIES)),
            reviews: Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// A review turn for `peer`, counted until the turn is dropped, unless the address has
    /// [`MAX_REVIEWS_PER_PEER`] already.
    fn peer_turn(&self, peer: IpAddr) -> Option<PeerTurn<'_>> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let n = peers.entry(peer).or_insert(0);
        if *n >= MAX_REVIEWS_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerTurn {
            peers: &self.peers,
            peer,
        })
    }

    /// The decision for a request's headers: from the cache, else from a review pair, if the
    /// client's address (`peer`; `None`: not known, as in-process) has a turn left.
    pub async fn decide(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Decision {
        let token = match bearer_token(headers) {
            Ok(t) => t,
            Err(d) => return d,
        };
        let key = token_key(token);
        if let Some(d) = self.cached(&key) {
            return d;
        }
        let _peer_turn = match peer.map(|p| self.peer_turn(p)) {
            Some(None) => {
                return Decision::Busy(format!(
                    "{MAX_REVIEWS_PER_PEER} tokens from this address are being reviewed already, try again"
                ));
            }
            Some(Some(turn)) => Some(turn),
            None => None,
        };
        let reviewed = tokio::time::timeout(REVIEW_WAIT, async {
            let Ok(_turn) = self.reviews.acquire().await else {
                return Decision::Unavailable("the metrics server is shutting down".to_string());
            };
            // Another request with the same token may have been reviewed while this one waited.
            if let Some(d) = self.cached(&key) {
                return d;
            }
            self.review(token).await
        })
        .await
        .unwrap_or_else(|_| {
            Decision::Unavailable(format!(
                "the token could not be reviewed within {}s, try again",
                REVIEW_WAIT.as_secs()
            ))
        });
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, reviewed.clone(), Instant::now());
        reviewed
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Decision> {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key, Instant::now())
    }

    async fn review(&self, token: &str) -> Decision {
        let unavailable = |e: ReviewError| {
            // kube's errors carry the API server's message, never the request body.
            tracing::warn!(error = %e, "cannot review a /metrics request");
            Decision::Unavailable("the API server could not review the token, try again".to_string())
        };
        let status = match self.reviewer.review_token(token).await {
            Ok(s) => s,
            Err(e) => return unavailable(e),
        };
        let user = match authenticated(status.as_ref()) {
            Ok(u) => u,
            Err(d) => return d,
        };
        let name = user.username.clone().unwrap_or_default();
        match self.reviewer.review_access(access_review(&user)).await {
            Ok(s) => authorized(&name, s.as_ref()),
            Err(e) => unavailable(e),
        }
    }
}

/// `router` behind the authorizer: a request that is not allowed gets the decision's status and
/// reason as plain text and never reaches the router.
pub fn guard<R: Reviewer>(router: Router, authorizer: Arc<Authorizer<R>>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(authorizer, check::<R>))
}

async fn check<R: Reviewer>(State(authorizer): State<Arc<Authorizer<R>>>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    match authorizer.decide(request.headers(), peer).await {
        Decision::Allowed { .. } => next.run(request).await,
        refused => {
            tracing::debug!(
                status = refused.status().as_u16(),
                reason = refused.reason(),
                "refused a /metrics request"
            );
            (
                refused.status(),
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("{}\n", refused.reason()),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::body::Body;
    use axum::http::HeaderValue;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn is_401(r: Result<&str, Decision>) -> bool {
        matches!(r, Err(Decision::Unauthenticated(_)))
    }

    #[test]
    fn bearer_token_is_the_one_authorization_headers_bearer_credential_in_any_case() {
        assert_eq!(bearer_token(&headers(&["Bearer abc.def-1"])).unwrap(), "abc.def-1");
        assert_eq!(bearer_token(&headers(&["bearer abc"])).unwrap(), "abc");
        assert_eq!(bearer_token(&headers(&["BEARER   abc  "])).unwrap(), "abc");
    }

    #[test]
    fn a_request_without_exactly_one_bearer_token_is_401_before_any_review() {
        let none = bearer_token(&HeaderMap::new()).unwrap_err();
        assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
        assert!(none.reason().contains("no bearer token"), "{none:?}");
        for bad in [
            &["Basic dXNlcjpwYXNz"][..],
            &["Bearer"],
            &["Bearer "],
            &["Bearer a b"],
            &["abc"],
            &["Bearer a", "Bearer b"],
        ] {
            assert!(is_401(bearer_token(&headers(bad))), "{bad:?}");
        }
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_bytes(b"Bearer \xff").unwrap());
        assert!(is_401(bearer_token(&h)));
    }

    #[test]
    fn an_authorization_header_over_the_cap_is_401_and_at_the_cap_is_read() {
        let at_cap = format!("Bearer {}", "a".repeat(MAX_AUTHORIZATION_BYTES - 7));
        assert!(bearer_token(&headers(&[&at_cap])).is_ok());
        let over = format!("{at_cap}a");
        let d = bearer_token(&headers(&[&over])).unwrap_err();
        assert_eq!(d.status(), StatusCode::UNAUTHORIZED);
        assert!(d.reason().contains("longer than"), "{d:?}");
    }

    #[test]
    fn the_cache_key_is_the_tokens_sha256_never_the_token() {
        let token = "secret-token";
        let key = token_key(token);
        assert_eq!(key, token_key(token));
        assert_ne!(key, token_key("secret-tokeN"));
        assert!(!key.windows(token.len()).any(|w| w == token.as_bytes()));
        assert_eq!(
            key.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            captf_shared::inputs::sha256_hex(token.as_bytes())
        );
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            uid: Some("uid-1".into()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            extra: Some(BTreeMap::from([(
                "authentication.kubernetes.io/pod-name".to_string(),
                vec!["prometheus-0".to_string()],
            )])),
        }
    }

    #[test]
    fn a_token_review_gives_the_user_only_when_authenticated_otherwise_401() {
        let ok = TokenReviewStatus {
            authenticated: Some(true),
            user: Some(user("system:serviceaccount:monitoring:prometheus")),
            ..Default::default()
        };
        assert_eq!(
            authenticated(Some(&ok)).unwrap(),
            user("system:serviceaccount:monitoring:prometheus")
        );
        let refused = [
            None,
            Some(TokenReviewStatus::default()),
            Some(TokenReviewStatus {
                authenticated: Some(false),
                error: Some("invalid bearer token".into()),
                ..Default::default()
            }),
            Some(TokenReviewStatus {
                authenticated: Some(true),
                user: None,
                ..Default::default()
            }),
            Some(TokenReviewStatus {
                authenticated: Some(true),
                user: Some(user("")),
                ..Default::default()
            }),
        ];
        for status in refused {
            let d = authenticated(status.as_ref()).unwrap_err();
            assert_eq!(d.status(), StatusCode::UNAUTHORIZED, "{status:?}");
        }
    }

    #[test]
    fn the_access_review_asks_for_get_on_the_metrics_path_as_the_tokens_whole_identity() {
        let u = user("system:serviceaccount:monitoring:prometheus");
        let r = access_review(&u);
        assert_eq!(r.spec.user, u.username);
        assert_eq!(r.spec.uid, u.uid);
        assert_eq!(r.spec.groups, u.groups);
        assert_eq!(r.spec.extra, u.extra);
        assert!(r.spec.resource_attributes.is_none());
        let nr = r.spec.non_resource_attributes.unwrap();
        assert_eq!(
            (nr.path.as_deref(), nr.verb.as_deref()),
            (Some("/metrics"), Some("get"))
        );
    }

    #[test]
    fn an_access_review_allows_only_when_allowed_and_not_denied_otherwise_403() {
        let status = |allowed, denied| SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        };
        assert_eq!(
            authorized("u", Some(&status(true, None))),
            Decision::Allowed { user: "u".into() }
        );
        assert_eq!(authorized("u", Some(&status(true, None))).status(), StatusCode::OK);
        for s in [
            None,
            Some(status(false, None)),
            Some(status(false, Some(true))),
            Some(status(true, Some(true))),
        ] {
            let d = authorized("u", s.as_ref());
            assert_eq!(d.status(), StatusCode::FORBIDDEN, "{s:?}");
            assert!(d.reason().contains("\"u\"") && d.reason().contains("/metrics"), "{d:?}");
        }
    }

    #[test]
    fn decisions_map_to_200_401_403_429_and_503_and_only_429_and_503_are_never_cached() {
        let cases = [
            (Decision::Busy("x".into()), StatusCode::TOO_MANY_REQUESTS, false),
            (Decision::Allowed { user: "u".into() }, StatusCode::OK, true),
            (Decision::Unauthenticated("x".into()), StatusCode::UNAUTHORIZED, true),
            (Decision::Forbidden("x".into()), StatusCode::FORBIDDEN, true),
            (
                Decision::Unavailable("x".into()),
                StatusCode::SERVICE_UNAVAILABLE,
                false,
            ),
        ];
        for (d, status, cacheable) in cases {
            assert_eq!((d.status(), d.cacheable()), (status, cacheable), "{d:?}");
        }
    }

    #[test]
    fn cached_decisions_expire_after_the_ttl() {
        let t0 = Instant::now();
        let mut c = DecisionCache::new(Duration::from_secs(10), 10);
        let (a, b) = (token_key("a"), token_key("b"));
        c.insert(a, Decision::Allowed { user: "a".into() }, t0);
        c.insert(b, Decision::Forbidden("b".into()), t0);
        assert_eq!(
            c.get(&a, t0 + Duration::from_secs(9)),
            Some(Decision::Allowed { user: "a".into() })
        );
        assert_eq!(
            c.get(&b, t0 + Duration::from_secs(9)),
            Some(Decision::Forbidden("b".into()))
        );
        assert_eq!(c.get(&a, t0 + Duration::from_secs(10)), None);
        assert_eq!(c.len(), 1, "an expired entry is dropped when read");
        c.insert(a, Decision::Unavailable("down".into()), t0);
        assert_eq!(c.get(&a, t0), None, "a review that failed is not kept");
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity_dropping_expired_entries_then_the_oldest() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut c = DecisionCache::new(s(10), 3);
        for (i, t) in ["a", "b", "c"].iter().enumerate() {
            c.insert(token_key(t), Decision::Forbidden((*t).into()), t0 + s(i as u64));
        }
        // Full: "a" (the soonest to expire) makes room for "d".
        c.insert(token_key("d"), Decision::Forbidden("d".into()), t0 + s(5));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&token_key("a"), t0 + s(5)), None);
        assert!(c.get(&token_key("b"), t0 + s(5)).is_some());
        // Later, "b" and "c" have expired: both go, "d" stays.
        c.insert(token_key("e"), Decision::Forbidden("e".into()), t0 + s(12));
        assert_eq!(c.len(), 2);
        assert!(c.get(&token_key("d"), t0 + s(12)).is_some());
        // Replacing an entry never evicts another.
        c.insert(token_key("e"), Decision::Allowed { user: "e".into() }, t0 + s(12));
        assert_eq!(c.len(), 2);
        let mut big = DecisionCache::new(s(10), CACHE_ENTRIES);
        for i in 0..(CACHE_ENTRIES + 50) {
            big.insert(token_key(&i.to_string()), Decision::Forbidden(String::new()), t0);
        }
        assert_eq!(big.len(), CACHE_ENTRIES);
    }

    /// A reviewer that knows two tokens and counts its calls.
    #[derive(Default)]
    struct Fake {
        tokens: AtomicUsize,
        accesses: AtomicUsize,
        down: bool,
        /// Never answers for a token it does not know (an API server slow on forged tokens).
        hang_on_unknown: bool,
    }

    impl Reviewer for Arc<Fake> {
        async fn review_token(&self, token: &str) -> Result<Option<TokenReviewStatus>, ReviewError> {
            self.tokens.fetch_add(1, Ordering::SeqCst);
            if self.down {
                return Err(ReviewError("connection refused".into()));
            }
            let name = match token {
                "reader-token" => "system:serviceaccount:monitoring:reader",
                "other-token" => "system:serviceaccount:default:other",
                _ if self.hang_on_unknown => std::future::pending().await,
                _ => return Ok(Some(TokenReviewStatus::default())),
            };
            Ok(Some(TokenReviewStatus {
                authenticated: Some(true),
                user: Some(user(name)),
                ..Default::default()
            }))
        }

        async fn review_access(
            &self,
            review: SubjectAccessReview,
        ) -> Result<Option<SubjectAccessReviewStatus>, ReviewError> {
            self.accesses.fetch_add(1, Ordering::SeqCst);
            Ok(Some(SubjectAccessReviewStatus {
                allowed: review.spec.user.as_deref() == Some("system:serviceaccount:monitoring:reader"),
                ..Default::default()
            }))
        }
    }

    fn app(fake: &Arc<Fake>) -> Router {
        let metrics = Arc::new(super::super::metrics::Metrics::new());
        guard(
            super::super::http::metrics_router(metrics),
            Arc::new(Authorizer::new(fake.clone())),
        )
    }

    async fn get(app: &Router, authorization: Option<&str>) -> (StatusCode, String) {
        get_from(app, authorization, None).await
    }

    /// A request as the server receives it from the client at `peer`.
    async fn get_from(app: &Router, authorization: Option<&str>, peer: Option<SocketAddr>) -> (StatusCode, String) {
        let mut req = axum::http::Request::get("/metrics");
        if let Some(a) = authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        if let Some(p) = peer {
            req = req.extension(ConnectInfo(p));
        }
        let res = app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn guarded_metrics_answer_401_403_or_200_and_review_each_token_once_within_the_ttl() {
        let fake = Arc::new(Fake::default());
        let app = app(&fake);
        let (status, body) = get(&app, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(body.contains("no bearer token"), "{body}");
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 0, "no token, no review");

        let (status, body) = get(&app, Some("Bearer forged")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(!body.contains("forged"), "the answer never repeats the token: {body}");
        let (status, body) = get(&app, Some("Bearer other-token")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(
            body.contains("system:serviceaccount:default:other") && !body.contains("other-token"),
            "{body}"
        );
        for _ in 0..3 {
            let (status, body) = get(&app, Some("Bearer reader-token")).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert!(body.contains("captf_leader"), "{body}");
        }
        // Refusals are cached as well as the allowed token.
        get(&app, Some("Bearer forged")).await;
        get(&app, Some("Bearer other-token")).await;
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 3, "one TokenReview per token");
        assert_eq!(
            fake.accesses.load(Ordering::SeqCst),
            2,
            "one SubjectAccessReview per user"
        );
    }

    /// One client sends a new forged token with every request, and the API server is slow to
    /// answer for them: it gets [`MAX_REVIEWS_PER_PEER`] reviews going and 429 for the rest, so
    /// the review turns left serve the real scraper at once (without the bound it waited
    /// [`REVIEW_WAIT`] and got 503).
    #[tokio::test]
    async fn forged_tokens_from_one_address_cannot_keep_the_scraper_from_its_review() {
        let fake = Arc::new(Fake {
            hang_on_unknown: true,
            ..Fake::default()
        });
        let app = app(&fake);
        let attacker: SocketAddr = "10.0.0.66:40000".parse().unwrap();
        let scraper: SocketAddr = "10.0.0.9:40000".parse().unwrap();
        let forged: Vec<_> = (0..MAX_REVIEWS_IN_FLIGHT)
            .map(|i| {
                let app = app.clone();
                tokio::spawn(async move { get_from(&app, Some(&format!("Bearer forged-{i}")), Some(attacker)).await })
            })
            .collect();
        let over = MAX_REVIEWS_IN_FLIGHT - MAX_REVIEWS_PER_PEER;
        let deadline = Instant::now() + REVIEW_WAIT;
        while forged.iter().filter(|f| f.is_finished()).count() < over && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refused = forged.iter().filter(|f| f.is_finished()).count();
        assert_eq!(
            refused, over,
            "all but {MAX_REVIEWS_PER_PEER} forged tokens answered at once"
        );
        assert_eq!(fake.tokens.load(Ordering::SeqCst), MAX_REVIEWS_PER_PEER);
        let mut answers = Vec::new();
        for f in forged {
            if f.is_finished() {
                answers.push(f.await.unwrap());
            } else {
                f.abort();
            }
        }
        for (status, body) in &answers {
            assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
            assert!(
                body.contains("being reviewed already") && !body.contains("forged"),
                "{body}"
            );
        }

        let t = Instant::now();
        let (status, body) = get_from(&app, Some("Bearer reader-token"), Some(scraper)).await;
        assert_eq!(status, StatusCode::OK, "the scraper after {:?}: {body}", t.elapsed());
    }

    #[tokio::test]
    async fn a_review_the_api_server_cannot_answer_is_503_and_asked_again_next_time() {
        let fake = Arc::new(Fake {
            down: true,
            ..Fake::default()
        });
        let app = app(&fake);
        for _ in 0..2 {
            let (status, body) = get(&app, Some("Bearer reader-token")).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        }
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 2);
    }
}
