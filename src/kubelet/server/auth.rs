//! Who may call a simulated kubelet, decided as a kubelet in webhook mode decides it: a client
//! certificate from the API server's client CA names a user (CN) and groups (O); a bearer
//! token is checked with a TokenReview; every request is then authorised with a
//! SubjectAccessReview on the node's subresource (`nodes/proxy`, `log`, `metrics`, `stats`,
//! `pods`, `healthz`). Answers are cached as the kubelet caches them (two minutes for tokens,
//! five for allowed, thirty seconds for denied). No identity: 401; no right: 403.
//!
//! One process answers for thousands of nodes, so a caller's right is first asked for every
//! node at once (a review without a name): metrics-server scraping 5,000 nodes costs one review,
//! not 5,000 at the start of a scrape round. Only a caller without that right is asked about
//! the one node (RBAC may name nodes). Reviews in flight are bounded, TokenReviews apart from
//! SubjectAccessReviews (unknown tokens never hold up the API server's own calls, which come
//! with its client certificate and need only a cached SubjectAccessReview), and each source
//! address has at most a few TokenReviews in flight: a caller spraying random tokens is
//! answered 429 at once beyond them. The caches keep the most recently used answers.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use lru::LruCache;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries a cache holds (the least recently used go first).
const CACHE_LIMIT: NonZeroUsize = match NonZeroUsize::new(20_000) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};
/// TokenReviews in flight at once, and SubjectAccessReviews (apart).
const REVIEWS_IN_FLIGHT: usize = 8;
/// TokenReviews in flight at once for one source address.
pub const TOKEN_REVIEWS_PER_SOURCE: usize = 2;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The caller a verified client certificate names (DER).
pub fn from_certificate(der: &[u8]) -> Option<Caller> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
    Some(Caller { user, groups, uid: None, extra: BTreeMap::new() })
}

/// The verb and the node subresources (tried in order) a request needs, as the kubelet maps
/// them: `/stats/*` → stats, `/metrics/*` → metrics, `/logs/*` → log, `/pods` → pods,
/// `/healthz` → healthz, the rest (logs of containers, exec, attach, port-forward) → proxy;
/// the fine-grained ones fall back to proxy.
pub fn attributes(method: &str, path: &str) -> (&'static str, &'static [&'static str]) {
    let verb = match method {
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "get",
    };
    let first = path.trim_start_matches('/').split('/').next().unwrap_or_default();
    let subresources: &'static [&'static str] = match first {
        "stats" => &["stats"],
        "metrics" => &["metrics"],
        "logs" => &["log"],
        "pods" => &["pods", "proxy"],
        "healthz" => &["healthz", "proxy"],
        _ => &["proxy"],
    };
    (verb, subresources)
}

type Decision = (bool, Instant);
/// A token's reviewed caller (none: refused), by the token's hash.
type TokenCache = LruCache<[u8; 32], (Option<Caller>, Instant)>;
/// (caller, verb, subresource, node) → whether allowed.
type DecisionCache = LruCache<(Caller, &'static str, &'static str, String), Decision>;

/// TokenReviews and SubjectAccessReviews, cached.
pub struct Authorizer {
    client: Client,
    tokens: Mutex<TokenCache>,
    decisions: Mutex<DecisionCache>,
    token_reviews: tokio::sync::Semaphore,
    access_reviews: tokio::sync::Semaphore,
    /// TokenReviews in flight per source address.
    by_source: Mutex<HashMap<IpAddr, usize>>,
}

/// One source's TokenReview in flight, given back when dropped.
struct SourceSlot<'a> {
    by_source: &'a Mutex<HashMap<IpAddr, usize>>,
    source: IpAddr,
}

impl Drop for SourceSlot<'_> {
    fn drop(&mut self) {
        let mut all = crate::sync::lock(self.by_source);
        if let Some(n) = all.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.source);
            }
        }
    }
}

/// Why a caller could not be judged (the kubelet API answers 500 with it, as a kubelet whose
/// webhook authentication fails does).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed: {0} (the operator needs create on tokenreviews.authentication.k8s.io)")]
    Token(#[source] kube::Error),
    #[error("SubjectAccessReview failed: {0} (the operator needs create on subjectaccessreviews.authorization.k8s.io)")]
    Access(#[source] kube::Error),
    #[error("the operator is shutting down")]
    ShuttingDown,
    /// The source has its share of TokenReviews in flight: the caller is told to come back.
    #[error("too many token reviews in flight from this address; try again")]
    Busy,
}

impl Authorizer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            tokens: Mutex::new(LruCache::new(CACHE_LIMIT)),
            decisions: Mutex::new(LruCache::new(CACHE_LIMIT)),
            token_reviews: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
            access_reviews: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
            by_source: Mutex::default(),
        }
    }

    /// A slot for a TokenReview from `source`, if it has fewer than its share in flight.
    fn source_slot(&self, source: IpAddr) -> Option<SourceSlot<'_>> {
        let mut all = crate::sync::lock(&self.by_source);
        let n = all.entry(source).or_default();
        if *n >= TOKEN_REVIEWS_PER_SOURCE {
            return None;
        }
        *n += 1;
        Some(SourceSlot { by_source: &self.by_source, source })
    }

    /// The caller a bearer token from `source` belongs to (`None`: not a valid token).
    pub async fn token(&self, token: &str, source: IpAddr) -> Result<Option<Caller>, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = || {
            crate::sync::lock(&self.tokens)
                .get(&key)
                .filter(|(_, at)| at.elapsed() < TOKEN_TTL)
                .map(|(caller, _)| caller.clone())
        };
        if let Some(caller) = cached() {
            return Ok(caller);
        }
        let Some(_source) = self.source_slot(source) else { return Err(ReviewError::Busy) };
        // One review at a time per slot; a caller that waited finds the answer cached.
        let _slot = self.token_reviews.acquire().await.map_err(|_| ReviewError::ShuttingDown)?;
        if let Some(caller) = cached() {
            return Ok(caller);
        }
        let review =
            TokenReview { spec: TokenReviewSpec { token: token.to_string(), audiences: None }, ..Default::default() };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::Token)?;
        let status = answer.status.unwrap_or_default();
        let caller = status.user.filter(|_| status.authenticated == Some(true)).map(|u| Caller {
            user: u.username.unwrap_or_default(),
            groups: u.groups.unwrap_or_default(),
            uid: u.uid,
            extra: u.extra.unwrap_or_default(),
        });
        crate::sync::lock(&self.tokens).put(key, (caller.clone(), Instant::now()));
        Ok(caller)
    }

    /// Whether `caller` may `verb` one of `subresources` of node `node`.
    pub async fn allowed(
        &self,
        caller: &Caller,
        verb: &'static str,
        subresources: &[&'static str],
        node: &str,
    ) -> Result<bool, ReviewError> {
        for sub in subresources {
            if self.allowed_one(caller, verb, sub, node).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn allowed_one(
        &self,
        caller: &Caller,
        verb: &'static str,
        sub: &'static str,
        node: &str,
    ) -> Result<bool, ReviewError> {
        // Every node at once first (an empty name), then this one.
        if self.decided(caller, verb, sub, "").await? {
            return Ok(true);
        }
        self.decided(caller, verb, sub, node).await
    }

    /// The cached decision, else a SubjectAccessReview (`node` empty: every node).
    async fn decided(
        &self,
        caller: &Caller,
        verb: &'static str,
        sub: &'static str,
        node: &str,
    ) -> Result<bool, ReviewError> {
        let key = (caller.clone(), verb, sub, node.to_string());
        let cached = || {
            crate::sync::lock(&self.decisions)
                .get(&key)
                .filter(|(allowed, at)| at.elapsed() < if *allowed { ALLOWED_TTL } else { DENIED_TTL })
                .map(|(allowed, _)| *allowed)
        };
        if let Some(allowed) = cached() {
            return Ok(allowed);
        }
        let _slot = self.access_reviews.acquire().await.map_err(|_| ReviewError::ShuttingDown)?;
        if let Some(allowed) = cached() {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.user.clone()),
                groups: Some(caller.groups.clone()),
                uid: caller.uid.clone(),
                extra: (!caller.extra.is_empty()).then(|| caller.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    resource: Some("nodes".into()),
                    subresource: Some(sub.into()),
                    name: (!node.is_empty()).then(|| node.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::Access)?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        crate::sync::lock(&self.decisions).put(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_source_gets_a_few_token_reviews_at_once_and_the_others_theirs() {
        let (client, _) = crate::pool::fixtures::mock_api(|_| crate::pool::fixtures::Reply(500, String::new()));
        let auth = Authorizer::new(client);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let held: Vec<_> = (0..TOKEN_REVIEWS_PER_SOURCE).map(|_| auth.source_slot(a).unwrap()).collect();
        assert!(auth.source_slot(a).is_none(), "a's share is taken");
        assert!(matches!(auth.token("random", a).await, Err(ReviewError::Busy)), "answered at once, not queued");
        assert!(auth.source_slot(b).is_some(), "another source is not held up");
        drop(held);
        assert!(auth.source_slot(a).is_some(), "given back");
        assert!(crate::sync::lock(&auth.by_source).len() <= 1, "no entry kept for idle sources");
    }

    #[test]
    fn the_caches_forget_the_least_recently_used_first() {
        let mut c: TokenCache = LruCache::new(NonZeroUsize::new(2).unwrap());
        let now = Instant::now();
        c.put([1; 32], (None, now));
        c.put([2; 32], (None, now));
        c.get(&[1; 32]);
        c.put([3; 32], (None, now));
        assert!(c.contains(&[1; 32]) && !c.contains(&[2; 32]), "a full cache drops one entry, not all");
    }

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        assert_eq!(attributes("GET", "/stats/summary"), ("get", &["stats"][..]));
        assert_eq!(attributes("GET", "/metrics/resource"), ("get", &["metrics"][..]));
        assert_eq!(attributes("GET", "/metrics/nodes/n/metrics/resource"), ("get", &["metrics"][..]));
        assert_eq!(attributes("GET", "/containerLogs/d/p/c"), ("get", &["proxy"][..]));
        assert_eq!(attributes("POST", "/exec/d/p/c"), ("create", &["proxy"][..]));
        assert_eq!(attributes("GET", "/pods"), ("get", &["pods", "proxy"][..]));
        assert_eq!(attributes("GET", "/healthz"), ("get", &["healthz", "proxy"][..]));
        assert_eq!(attributes("GET", "/logs/"), ("get", &["log"][..]));
    }

    #[test]
    fn a_certificate_names_the_user_and_groups() {
        let ca = crate::certs::Authority::new("ca").unwrap();
        let leaf = ca
            .issue(&crate::certs::LeafSpec {
                common_name: "kube-apiserver-kubelet-client",
                organization: Some("system:masters"),
                sans: vec![],
                server: false,
                client: true,
            })
            .unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(leaf.cert_pem.as_bytes()).unwrap();
        let caller = from_certificate(&pem.contents).unwrap();
        assert_eq!(caller.user, "kube-apiserver-kubelet-client");
        assert_eq!(caller.groups, vec!["system:masters"]);
    }
}
