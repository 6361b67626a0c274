//! Process plumbing shared by the long-running subcommands: the API client (with
//! its client-side rate limit, [`ratelimit`]), signal handling and the allocator's
//! random seed.

pub mod client_metrics;
pub mod ratelimit;

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// A client from `--kubeconfig`, else the in-cluster or default configuration; its
/// requests name `user` in their User-Agent ([`user_agent`]).
pub async fn connect(kubeconfig: Option<&Path>, user: &str) -> anyhow::Result<Client> {
    let mut config = load_config(kubeconfig).await?;
    identify(&mut config, user);
    Client::try_from(config).context("building the API client")
}

/// The User-Agent of one client user, in kube-controller-manager's shape
/// (`kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/<commit>/endpointslice-controller`):
/// `svcplane/v0.1.0 (linux/amd64) svcplane/<commit>/endpointslice-controller`, so an
/// audit log or the API server's request metrics tell the controllers apart.
pub fn user_agent(user: &str) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!(
        "svcplane/v{} ({}/{arch}) svcplane/{}/{user}",
        crate::build_info::VERSION,
        std::env::consts::OS,
        crate::build_info::COMMIT,
    )
}

/// Send [`user_agent`]`(user)` with every request of clients built from `config`.
fn identify(config: &mut Config, user: &str) {
    // A version, OS, commit and user name are all header-safe ASCII; a value that
    // somehow is not leaves kube's default in place rather than failing the client.
    if let Ok(value) = axum::http::HeaderValue::from_str(&user_agent(user)) {
        config
            .headers
            .retain(|(name, _)| name != axum::http::header::USER_AGENT);
        config.headers.push((axum::http::header::USER_AGENT, value));
    }
}

/// The API clients of one process, one per user. kube-controller-manager gives every
/// controller its own client, and so its own `--kube-api-qps`/`--kube-api-burst`
/// budget, and its informers another; `svcplane run` does the same, so the same flags
/// allow the same request rates.
#[derive(Clone)]
#[allow(clippy::type_complexity)] // one closure type, named by this struct
pub struct Clients(
    std::sync::Arc<dyn Fn(&'static str) -> (Client, Option<ratelimit::ClientBudget>) + Send + Sync>,
);

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clients")
    }
}

/// The users `svcplane run` asks [`Clients`] for.
pub mod users {
    /// Watches and lists of the controllers' caches (kube-controller-manager's name
    /// for its informers' client).
    pub const INFORMERS: &str = "shared-informers";
    /// The event recorder (events of every controller and the allocator repair).
    pub const EVENTS: &str = "events";
    pub const LEADER_ELECTION: &str = "leader-election";
    /// The admission webhook's watches and claims.
    pub const WEBHOOK: &str = "webhook";
    /// The secure metrics port's TokenReviews and SubjectAccessReviews.
    pub const METRICS_AUTH: &str = "metrics-auth";
    // Each controller's user is named in its registry entry (`shell::registry`).
}

impl Clients {
    /// A client per user from `make`.
    pub fn per_user(make: impl Fn(&'static str) -> Client + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(move |user| (make(user), None)))
    }

    /// A client per user from `make` (called once per user), each with the budget
    /// of its rate limiter.
    pub fn per_user_limited(
        make: impl Fn(&'static str) -> (Client, ratelimit::ClientBudget) + Send + Sync + 'static,
    ) -> Self {
        let made = std::sync::Mutex::new(std::collections::HashMap::new());
        Self(std::sync::Arc::new(move |user| {
            let mut made = made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (client, budget) = made.entry(user).or_insert_with(|| make(user)).clone();
            (client, Some(budget))
        }))
    }

    /// One client for every user (tests).
    pub fn shared(client: Client) -> Self {
        Self::per_user(move |_| client.clone())
    }

    pub fn get(&self, user: &'static str) -> Client {
        (self.0)(user).0
    }

    /// The request budget of `user`'s client, when it is rate-limited.
    pub fn budget(&self, user: &'static str) -> Option<ratelimit::ClientBudget> {
        (self.0)(user).1
    }
}

impl From<Client> for Clients {
    fn from(client: Client) -> Self {
        Self::shared(client)
    }
}

/// As [`connect`], one client per user (made when the user first asks), each limited
/// to `qps` requests per second on average with bursts of `burst` (`--kube-api-qps`,
/// `--kube-api-burst`).
pub async fn connect_limited(
    kubeconfig: Option<&Path>,
    qps: f64,
    burst: u32,
) -> anyhow::Result<Clients> {
    let config = load_config(kubeconfig).await?;
    let host = config
        .cluster_url
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let limited_with = move |config: Config,
                             qps: f64,
                             burst: u32|
          -> anyhow::Result<(Client, ratelimit::ClientBudget)> {
        let limiter = ratelimit::RateLimitLayer::new(qps, burst).for_host(host.clone());
        let budget = limiter.budget();
        // Limiter outermost: its wait is not part of the request's own latency.
        let client = kube::client::ClientBuilder::try_from(config)
            .context("building the API client")?
            .with_layer(&client_metrics::MeteredLayer::new(host.clone()))
            .with_layer(&limiter)
            .build();
        Ok((client, budget))
    };
    let limited = {
        let limited_with = limited_with.clone();
        move |config: Config| limited_with(config, qps, burst)
    };
    // Building from this configuration works once, so it works for every user.
    let fallback = limited(config.clone())?;
    Ok(Clients::per_user_limited(move |user| {
        let mut config = config.clone();
        identify(&mut config, user);
        // The webhook answers inside kube-apiserver's own admission deadline: a Service
        // create waits for its claims, so a client-side queue behind --kube-api-qps
        // turns a burst of creates into admission timeouts (200 concurrent NodePort
        // creates need 400 claim writes: 20 s at the default 20 qps). Its writes are
        // bounded by the admission requests the API server sends, which its own
        // priority and fairness already limits, as for kube-apiserver's in-tree
        // allocator and for `svcplane webhook`, whose client has no limit either.
        if user == users::WEBHOOK {
            // qps 0: the bucket never limits (token_bucket.rs).
            return limited_with(config, 0.0, burst).unwrap_or_else(|_| fallback.clone());
        }
        limited(config).unwrap_or_else(|_| fallback.clone())
    }))
}

async fn load_config(kubeconfig: Option<&Path>) -> anyhow::Result<Config> {
    let config = match kubeconfig {
        Some(path) => {
            // kube's read error repeats its source in its own message: say it once.
            let kc = Kubeconfig::read_from(path).map_err(|e| match e {
                kube::config::KubeconfigError::ReadConfig(io, _) => {
                    anyhow::anyhow!("--kubeconfig {}: cannot read: {io}", path.display())
                }
                other => anyhow::anyhow!("--kubeconfig {}: {other}", path.display()),
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {}: unusable", path.display()))?
        }
        None => Config::infer()
            .await
            .context("no --kubeconfig given and no in-cluster or default kubeconfig found")?,
    };
    Ok(config)
}

/// `error` and its causes joined with `: `, as `{:#}` prints them, but leaving out a
/// cause whose text is already part of the message so far: kube's errors (and
/// io::Error wrappers) often repeat their source in their own message, which `{:#}`
/// then prints two or three times.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Cancel `token` on SIGTERM or SIGINT; a second signal exits at once.
pub async fn cancel_on_signal(token: CancellationToken) {
    wait_for_signal().await;
    info!("shutdown signal received; draining");
    token.cancel();
    wait_for_signal().await;
    info!("second shutdown signal; exiting now");
    std::process::exit(130);
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A seed for the allocator's random picks: two replicas must not walk the ranges in
/// the same order, or they would race for the same values every time.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_name_version_platform_commit_and_user() {
        let ua = user_agent("endpointslice-controller");
        let version = crate::build_info::VERSION;
        let commit = crate::build_info::COMMIT;
        assert!(ua.starts_with(&format!("svcplane/v{version} (")), "{ua}");
        assert!(
            ua.ends_with(&format!(") svcplane/{commit}/endpointslice-controller")),
            "{ua}"
        );
        assert!(
            !ua.contains("x86_64") && !ua.contains("aarch64"),
            "Go's arch names: {ua}"
        );
    }

    /// The process' clients (the path `svcplane run` takes) send each user's agent.
    #[tokio::test]
    async fn every_client_user_sends_its_own_user_agent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("svcplane-ua-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
                 current-context: x\n"
            ),
        )
        .unwrap();
        let clients = connect_limited(Some(&kubeconfig), 0.0, 1).await.unwrap();
        let server = tokio::spawn(async move {
            let mut agents = Vec::new();
            for _ in 0..2 {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 8192];
                let n = sock.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                agents.push(
                    head.lines()
                        .find_map(|l| l.strip_prefix("user-agent: ").map(str::to_owned))
                        .unwrap_or_default(),
                );
                let _ = sock
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
            agents
        });
        for user in ["endpointslice-controller", users::INFORMERS] {
            let _ = clients.get(user).apiserver_version().await;
        }
        let agents = server.await.unwrap();
        assert!(
            agents[0].ends_with("/endpointslice-controller"),
            "{agents:?}"
        );
        assert!(agents[1].ends_with("/shared-informers"), "{agents:?}");
        assert!(
            agents.iter().all(|a| a.starts_with("svcplane/v")),
            "{agents:?}"
        );
        // The same clients count their requests (client-go's REST client metrics).
        let served = client_metrics::global()
            .requests
            .get_or_create(&client_metrics::RequestLabels {
                code: "500".into(),
                host: format!("127.0.0.1:{port}"),
                method: "GET".into(),
            })
            .get();
        assert_eq!(served, 2);
    }

    #[test]
    fn error_chain_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let repeated = anyhow::Error::new(io)
            .context("failed to read kubeconfig: No such file or directory")
            .context("--kubeconfig /x: cannot read");
        assert_eq!(
            error_chain(&repeated),
            "--kubeconfig /x: cannot read: failed to read kubeconfig: No such file or directory"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&plain), "outer: inner");
    }
}
