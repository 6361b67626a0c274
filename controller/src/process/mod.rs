//! The parts of a svcplane process that `run` and `webhook` both assemble, written
//! once so the two commands cannot drift: where namespaced objects live by default,
//! the admin servers (probes and metrics), and the webhook's certificate, HTTPS
//! server and readiness. The commands keep only what differs: `run` adds the
//! leader election and the controllers, `webhook` its own Service watches.

mod admin_servers;
mod webhook_server;

pub use admin_servers::{AdminError, AdminServers};
pub use webhook_server::{
    Serving, ServingState, WEBHOOK_DRAIN, cert_plan, range_notes, serve_webhook,
};

/// Default namespace of namespaced objects svcplane owns (the Lease, the certificate
/// Secret) without a flag and without `POD_NAMESPACE`.
pub const DEFAULT_NAMESPACE: &str = "kube-system";

/// `flag`, else `$POD_NAMESPACE`, else [`DEFAULT_NAMESPACE`].
pub fn namespace_or_pod(flag: Option<&str>) -> String {
    flag.filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}
