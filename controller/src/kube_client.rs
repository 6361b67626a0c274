//! Process plumbing shared by the long-running subcommands: the API client, signal
//! handling and the allocator's random seed.

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// A client from `--kubeconfig`, else the in-cluster or default configuration.
pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    Client::try_from(load_config(kubeconfig).await?).context("building the API client")
}

/// The API clients of one process, one per user. kube-controller-manager gives every
/// controller its own client, and so its own `--kube-api-qps`/`--kube-api-burst`
/// budget, and its informers another; `svcplane run` does the same, so the same flags
/// allow the same request rates.
#[derive(Clone)]
pub struct Clients(std::sync::Arc<dyn Fn(&'static str) -> Client + Send + Sync>);

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clients")
    }
}

/// The users `svcplane run` asks [`Clients`] for.
pub mod users {
    /// Watches and lists of the controllers' caches.
    pub const INFORMERS: &str = "informers";
    pub const ENDPOINTSLICE: &str = "endpointslice-controller";
    pub const ENDPOINTS: &str = "endpoint-controller";
    pub const MIRRORING: &str = "endpointslice-mirroring-controller";
    /// The event recorder (events of every controller and the allocator repair).
    pub const EVENTS: &str = "events";
    pub const LEADER_ELECTION: &str = "leader-election";
    /// The admission webhook's watches and claims.
    pub const WEBHOOK: &str = "webhook";
    pub const ALL: &[&str] = &[
        INFORMERS,
        ENDPOINTSLICE,
        ENDPOINTS,
        MIRRORING,
        EVENTS,
        LEADER_ELECTION,
        WEBHOOK,
    ];
}

impl Clients {
    /// A client per user from `make`.
    pub fn per_user(make: impl Fn(&'static str) -> Client + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(make))
    }

    /// One client for every user (tests).
    pub fn shared(client: Client) -> Self {
        Self::per_user(move |_| client.clone())
    }

    pub fn get(&self, user: &'static str) -> Client {
        (self.0)(user)
    }
}

impl From<Client> for Clients {
    fn from(client: Client) -> Self {
        Self::shared(client)
    }
}

/// As [`connect`], one client per user of [`users::ALL`], each limited to `qps`
/// requests per second on average with bursts of `burst` (`--kube-api-qps`,
/// `--kube-api-burst`).
pub async fn connect_limited(
    kubeconfig: Option<&Path>,
    qps: f64,
    burst: u32,
) -> anyhow::Result<Clients> {
    let config = load_config(kubeconfig).await?;
    let mut made = std::collections::HashMap::new();
    for user in users::ALL {
        let builder = kube::client::ClientBuilder::try_from(config.clone())
            .context("building the API client")?;
        let client = builder
            .with_layer(&crate::shell::ratelimit::RateLimitLayer::new(qps, burst))
            .build();
        made.insert(*user, client);
    }
    let fallback = made
        .get(users::INFORMERS)
        .cloned()
        .context("no informer client was built")?;
    Ok(Clients::per_user(move |user| {
        made.get(user).cloned().unwrap_or_else(|| fallback.clone())
    }))
}

async fn load_config(kubeconfig: Option<&Path>) -> anyhow::Result<Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read", path.display()))?;
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
