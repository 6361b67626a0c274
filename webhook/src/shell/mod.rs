//! The webhook's I/O: everything that talks to the API server or runs on a timer.
//!
//! - [`holders`]: how stored objects translate into state holders (pure);
//! - [`claimer`]: creating [`crate::claim::AllocationClaim`]s (the cross-replica lock);
//! - [`watch`]: reflecting Services, claims and IPAddress objects into the state;
//! - [`ranges`]: the cluster's Service ranges from its ServiceCIDR objects;
//! - [`repair`]: the loop that releases claims nobody uses;
//! - [`admission`]: the [`crate::handler::AdmissionHandler`] that ties review, state
//!   and claims together for the HTTPS server;
//! - [`certs`]: self-managed certificates (Secret, serving pair, `caBundle`);
//! - [`start`]: wiring all of it from a client and settings.

pub mod admission;
pub mod certs;
pub mod claimer;
pub mod holders;
pub mod ranges;
pub mod repair;
pub mod start;
pub mod watch;

pub use admission::Webhook;
pub use claimer::{ClaimError, ClaimStore, Claimed, KubeClaims};
pub use start::{ServiceSource, Started, WebhookOptions, start, start_watches};
pub use watch::ServiceSink;
