//! svcplane's admission webhook for Services.
//!
//! The mutating half assigns ClusterIPs and NodePorts with svcplane's allocator; the
//! validating half rejects invalid or already-taken values with the same 422 field
//! causes kube-apiserver gives. Layout follows the pure-core/thin-shell split:
//! - [`review`]: pure AdmissionReview decoding, mutate/validate decisions, JSONPatch and
//!   the response envelope;
//! - [`state`]: pure allocation state — who holds which value (Services, claims,
//!   IPAddress objects, in-flight requests) over the allocator's bitmaps;
//! - [`claim`]: the `AllocationClaim` custom resource that makes a hand-out atomic across
//!   replicas, and the pure repair decisions for it;
//! - [`shell`]: I/O — watches that feed the state, claim writes, the repair loop, and
//!   the [`handler::AdmissionHandler`] the HTTPS server calls;
//! - [`server`] and [`tls`]: the axum HTTPS server and certificate reload;
//! - [`certs`]: self-managed CA and serving certificate (pure rotation rules);
//! - [`metrics`]: the webhook's counters, for the process' `/metrics`;
//! - [`service_event`]: the Normal Event about a Service that svcplane's tools record;
//! - [`retry`]: the one jittered backoff and once-per-outage logging every retry loop
//!   of both crates uses (WH-15).

pub mod certs;
pub mod claim;
pub mod handler;
pub mod metrics;
pub mod retry;
pub mod review;
pub mod server;
pub mod service_event;
pub mod shell;
pub mod state;
pub mod tls;
