//! The validating admission webhook, served by `kwok-pools run` over TLS: AdmissionReview v1
//! in, allow or deny out, with messages that name the field by its manifest path.

pub mod cert;
pub mod creators;
pub mod error;
pub mod mutate;
pub mod policy;
pub mod register;
pub mod review;
pub mod secret;
pub mod serve;
pub mod storage_class;
pub mod tls;

use crate::telemetry::metrics::{AdmissionLabels, Metrics};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
pub use error::WebhookError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Where the webhook listens.
    pub addr: SocketAddr,
    /// The ValidatingWebhookConfiguration to create or patch (`kwok-pools-<instance>`).
    pub configuration_name: String,
    /// How the API server reaches us; default `https://<addr>/validate`.
    pub endpoint: Option<register::Endpoint>,
    /// Extra names for the generated certificate (for a Service).
    pub hosts: Vec<String>,
    /// tls.crt / tls.key / ca.crt from a directory instead of a generated certificate.
    pub cert_dir: Option<PathBuf>,
    /// A Secret (namespace, name) the operator makes and renews itself, shared by replicas.
    pub cert_secret: Option<(String, String)>,
    /// Only pools matching this selector are sent to the webhook.
    pub object_selector: Option<LabelSelector>,
    /// Connections, timeouts and body size a client may take.
    pub limits: serve::Limits,
    /// Who may call the webhook (only the API server, where its client certificate is known).
    pub clients: serve::ClientAuth,
    /// Whether the leader writes the webhook configurations or only checks them.
    pub registration: RegistrationMode,
}

/// What the leader does with the webhook configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationMode {
    /// Writes them (create or patch): an operator outside the cluster, whose URL and CA nobody
    /// else knows.
    Apply,
    /// Only reads them and says what is wrong: they are installed with the operator (the chart,
    /// config/) with their CA, and its identity may not write any webhook configuration.
    Check,
    /// Patches the installed configurations (its own, by name) with the CA of the certificate
    /// it keeps in `--webhook-cert-secret`; never creates one (dist/install.yaml ships them).
    Inject,
}

#[derive(Clone)]
struct AppState {
    judge: review::Judge,
    metrics: Arc<Metrics>,
    review_timeout: std::time::Duration,
}

/// Decodes (on a blocking thread: a body can be megabytes) and judges one review, in a task
/// of its own and within the time limit.
async fn judge_body(
    body: Bytes,
    judge: review::Judge,
    limit: std::time::Duration,
) -> Result<Result<review::Answer, review::BadReview>, String> {
    let mut task = tokio::spawn(async move {
        let decoded = tokio::task::spawn_blocking(move || review::decode(&body)).await;
        match decoded {
            Ok(Ok(review)) => Ok(review::answer_decoded(review, &judge).await),
            Ok(Err(bad)) => Ok(Err(bad)),
            Err(e) => Err(e),
        }
    });
    match tokio::time::timeout(limit, &mut task).await {
        Ok(Ok(Ok(judged))) => Ok(judged),
        Ok(Ok(Err(e)) | Err(e)) if e.is_panic() => Err(crate::pool::reconcile::panic_message(e.into_panic().as_ref())),
        Ok(Ok(Err(_)) | Err(_)) => Err("the review was cancelled".to_string()),
        Err(_) => {
            // The work stops with the answer (a decode already on a blocking thread finishes
            // there, and its result is dropped).
            task.abort();
            Err(format!("judging took longer than {limit:?}"))
        }
    }
}

async fn validate(State(state): State<AppState>, body: Bytes) -> Response {
    // Judged in a task of its own: a panic (a bug met by one object) refuses that object with
    // the reason, and the webhook goes on serving.
    let judged = match judge_body(body.clone(), state.judge.clone(), state.review_timeout).await {
        Ok(judged) => judged,
        Err(message) => {
            tracing::error!(panic = %message, "judging an AdmissionReview panicked; the object is refused");
            state
                .metrics
                .admission_reviews
                .get_or_create(&AdmissionLabels { kind: "panicked".into(), allowed: "false".into() })
                .inc();
            return match review::refused_after_panic(&body, &message) {
                Some(review) => axum::Json(review).into_response(),
                None => (StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n")).into_response(),
            };
        }
    };
    match judged {
        Ok((kind, allowed, review)) => {
            state
                .metrics
                .admission_reviews
                .get_or_create(&AdmissionLabels { kind: kind.into(), allowed: allowed.to_string() })
                .inc();
            axum::Json(review).into_response()
        }
        Err(e) => {
            state
                .metrics
                .admission_reviews
                .get_or_create(&AdmissionLabels { kind: "invalid".into(), allowed: "false".into() })
                .inc();
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
    }
}

/// Rewrites float quantities as strings (see [`mutate`]): decoded and rewritten on a blocking
/// thread (a body can be megabytes), within the review time limit.
async fn mutate(State(state): State<AppState>, body: Bytes) -> Response {
    let work = tokio::task::spawn_blocking(move || {
        let review = serde_json::from_slice::<kube::core::admission::AdmissionReview<kube::core::DynamicObject>>(&body)
            .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
        mutate::answer(review).map_err(|e| format!("the AdmissionReview has no request: {e}"))
    });
    match tokio::time::timeout(state.review_timeout, work).await {
        Ok(Ok(Ok(review))) => axum::Json(review).into_response(),
        Ok(Ok(Err(bad))) => (StatusCode::BAD_REQUEST, format!("{bad}\n")).into_response(),
        Ok(Err(e)) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("rewriting quantities failed: {e}\n")).into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, format!("rewriting took longer than {:?}\n", state.review_timeout))
            .into_response(),
    }
}

/// What a request must get through before it is judged: room in the byte budget, and its
/// whole body within the body timeout (a client that declares a body and never sends it holds
/// its room only that long).
#[derive(Clone)]
struct Gate {
    budget: serve::ByteBudget,
    body_limit: usize,
    body_timeout: std::time::Duration,
}

/// Holds room in the byte budget for the request's body while it is read and judged; a
/// request the budget has no room for is answered 429 before its body is read.
async fn within_budget(
    State(gate): State<Gate>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let length = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let Some(_room) = gate.budget.reserve(length) else {
        tracing::warn!(
            length,
            "webhook requests in flight hold the byte budget; a request was answered 429 (the API server retries)"
        );
        let mut r = (StatusCode::TOO_MANY_REQUESTS, "too many bytes of requests in flight; retry\n").into_response();
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        return r;
    };
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(gate.body_timeout, axum::body::to_bytes(body, gate.body_limit)).await {
        Ok(Ok(bytes)) => next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Ok(Err(e)) => (StatusCode::PAYLOAD_TOO_LARGE, format!("cannot read the request body: {e}\n")).into_response(),
        Err(_) => {
            tracing::warn!(length, "a webhook request did not send its body in time; answered 408");
            let why = format!("the request body was not sent within {:?}\n", gate.body_timeout);
            (StatusCode::REQUEST_TIMEOUT, why).into_response()
        }
    }
}

/// The webhook's routes. With a `client`, the API server judges each pool's rendered child by
/// a server-side dry run.
pub fn router(peers: review::Peers, client: Option<kube::Client>, metrics: Arc<Metrics>) -> Router {
    router_with(peers, client, metrics, &serve::Limits::default())
}

/// [`router`] with other limits.
pub fn router_with(
    peers: review::Peers,
    client: Option<kube::Client>,
    metrics: Arc<Metrics>,
    limits: &serve::Limits,
) -> Router {
    let judge = review::Judge { peers, client };
    let budget = serve::ByteBudget::new(limits.max_bytes_in_flight, limits.body_limit);
    let gate = Gate { budget, body_limit: limits.body_limit, body_timeout: limits.body_timeout };
    Router::new()
        .route(register::PATH, post(validate))
        .route(register::MUTATE_PATH, post(mutate))
        .layer(axum::extract::DefaultBodyLimit::max(limits.body_limit))
        .layer(axum::middleware::from_fn_with_state(gate, within_budget))
        .with_state(AppState { judge, metrics, review_timeout: limits.review_timeout })
}

/// The certificate to serve (and how to renew it). A certificate from files must cover the
/// host the API server is told to call, or every review would fail TLS: refused at start.
pub async fn certificate(
    client: &kube::Client,
    config: &WebhookConfig,
    bound: SocketAddr,
) -> Result<(tls::Source, tls::ServingCert), WebhookError> {
    let Some((namespace, name)) = &config.cert_secret else { return certificate_for(config, bound) };
    let source = secret::SecretSource {
        api: kube::Api::namespaced(client.clone(), namespace),
        name: name.clone(),
        hosts: hosts(config, bound)?.0,
    };
    let cert = source.load_or_create().await?;
    Ok((tls::Source::Secret(Box::new(source)), cert))
}

/// The names the serving certificate is for, and the host of `--webhook-url` (if any).
fn hosts(config: &WebhookConfig, bound: SocketAddr) -> Result<(Vec<String>, Option<String>), WebhookError> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), bound.ip().to_string()];
    hosts.extend(config.hosts.iter().cloned());
    let url_host = match &config.endpoint {
        Some(register::Endpoint::Url(url)) => Some(tls::url_host(url).ok_or_else(|| {
            WebhookError::Flag(format!(
                "--webhook-url {url:?} is not an https://HOST[:PORT]/PATH URL; the API server calls webhooks over TLS"
            ))
        })?),
        _ => None,
    };
    hosts.extend(url_host.iter().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string()));
    hosts.sort();
    hosts.dedup();
    Ok((hosts, url_host))
}

/// A generated certificate, or one from `--webhook-cert-dir` (see [`certificate`]).
pub fn certificate_for(
    config: &WebhookConfig,
    bound: SocketAddr,
) -> Result<(tls::Source, tls::ServingCert), WebhookError> {
    let (hosts, url_host) = hosts(config, bound)?;
    let Some(dir) = &config.cert_dir else {
        return Ok(tls::Source::generated(&hosts, tls::GENERATED_LIFETIME)?);
    };
    let cert = tls::from_dir(dir)?;
    let needed: Vec<String> = match (&config.endpoint, url_host) {
        (_, Some(host)) => vec![host],
        (Some(register::Endpoint::Service { .. }), None) => config.hosts.iter().take(1).cloned().collect(),
        _ => vec![],
    };
    for host in needed {
        if !tls::covers(&cert.cert_pem, &host) {
            let names = tls::subject_names(&cert.cert_pem).map(|(d, i)| format!("{d:?} {i:?}")).unwrap_or_default();
            return Err(WebhookError::Certificate(format!(
                "the certificate in {} is for {names}, not for {host}, which the API server would call: issue it for {host} (or point --webhook-url at a name it has)",
                dir.display()
            )));
        }
    }
    Ok((tls::Source::Dir(dir.clone()), cert))
}

/// The webhook configurations this replica serves for: the leader writes them or checks them
/// ([`RegistrationMode`]), retrying with back-off until they are right.
#[derive(Clone)]
pub struct Registration {
    client: kube::Client,
    name: String,
    mode: RegistrationMode,
    vwc: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    mwc: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
}

impl Registration {
    /// One attempt: the configurations written (Apply) or found as they should be (Check); the
    /// error says what to do.
    pub async fn once(&self) -> Result<(), WebhookError> {
        match self.mode {
            RegistrationMode::Apply => register::register(self.client.clone(), &self.vwc, &self.mwc).await.map_err(|e| {
                WebhookError::Registration(format!(
                    "cannot write the webhook configurations {}: {e}; outside a cluster the operator needs get and patch on them and on its pool-creators admission policy, which must exist (kubectl apply config/webhook.yaml and config/policy.yaml first; config/components/webhook-registration grants get and patch to its ServiceAccount, the local cluster's admin has all), or run with --no-webhook",
                    self.name
                ))
            }),
            RegistrationMode::Inject => register::inject(self.client.clone(), &self.vwc, &self.mwc).await.map_err(|e| {
                WebhookError::Registration(format!(
                    "the webhook configurations {} with the CA of the certificate in --webhook-cert-secret: {e}; they ship with the operator (dist/install.yaml, pointing at its Service), which may change only their CA bundle",
                    self.name
                ))
            }),
            RegistrationMode::Check => register::check(self.client.clone(), &self.vwc, &self.mwc).await.map_err(|e| {
                WebhookError::Registration(format!(
                    "the webhook configurations {} are not as this operator serves them: {e}; install them with the operator (config/webhook.yaml with `kwok-pools webhook-cert`, or the Helm chart), or let an operator outside the cluster write them (--webhook-registration apply)",
                    self.name
                ))
            }),
        }
    }

    /// Tries until done, backing off (1 s doubling to a minute); `problem` says why meanwhile
    /// (the process is not Ready while the webhook is not registered). Never gives up: a
    /// configuration deleted or fixed later is found on a later try.
    pub async fn until_done(self, problem: Arc<std::sync::Mutex<Option<String>>>) {
        let mut failures = 0u32;
        loop {
            match self.once().await {
                Ok(()) => {
                    if crate::sync::lock(&problem).take().is_some() {
                        tracing::info!(configuration = %self.name, mode = ?self.mode, "admission webhook registered");
                    }
                    failures = 0;
                    // Looked at again now and then: a configuration deleted later is put back.
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let retry = crate::backoff::retry_after(failures, std::time::Duration::from_secs(60));
                    tracing::warn!(error = %e, retry_in = ?retry, "webhook not registered; the simulator and controllers go on, and this replica is not Ready meanwhile");
                    *crate::sync::lock(&problem) = Some(format!("webhook not registered: {e}"));
                    tokio::time::sleep(retry).await;
                }
            }
        }
    }
}

/// Serves the webhook (every replica does) and returns what to register (the leader does).
pub async fn start(
    client: kube::Client,
    config: WebhookConfig,
    peers: review::Peers,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, Registration), WebhookError> {
    let listener = std::net::TcpListener::bind(config.addr).map_err(|e| {
        WebhookError::Flag(format!(
            "cannot listen on {} for the webhook: {e}; choose another --webhook-addr",
            config.addr
        ))
    })?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let (source, cert) = certificate(&client, &config, bound).await?;
    let ca_pem = cert.ca_pem.clone();
    // Refuse an unusable certificate (or client CA) here, not at the first connection.
    serve::server_config(&cert, &config.clients)?;
    if config.clients.ca_file.is_none() {
        tracing::warn!(
            "the webhook accepts reviews from anyone who can reach it: pass --webhook-client-ca with the CA of the API server's admission client certificate (the local cluster makes one)"
        );
    }
    let app = router_with(peers, Some(client.clone()), metrics, &config.limits);
    let (limits, clients) = (config.limits.clone(), config.clients.clone());
    tokio::spawn(async move {
        if let Err(e) = serve::serve_with(listener, source, cert, app, &limits, clients).await {
            tracing::error!(error = %e, "webhook server stopped");
        }
    });
    let endpoint = config.endpoint.clone().unwrap_or_else(|| {
        let host = if bound.ip().is_unspecified() { "127.0.0.1".to_string() } else { bound.ip().to_string() };
        register::Endpoint::Url(format!("https://{host}:{}{}", bound.port(), register::PATH))
    });
    let vwc = register::configuration(&config.configuration_name, &endpoint, &ca_pem, config.object_selector.clone());
    let mwc = register::mutating_configuration(&vwc);
    tracing::info!(%bound, configuration = %config.configuration_name, ?endpoint, "admission webhook serving");
    Ok((bound, Registration { client, name: config.configuration_name.clone(), mode: config.registration, vwc, mwc }))
}
