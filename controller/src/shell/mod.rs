//! The controller runtime's I/O: everything between the API server and the pure
//! reconcilers in [`crate::core`].
//!
//! - [`cache`]: stores of stripped objects with label indexes;
//! - [`watch`]: kube-runtime watchers feeding the stores and emitting changes;
//!   [`kinds`]: each watched kind described once, the runtime's handle on it;
//! - [`queue`]: the de-duplicating, delayed, rate-limited work queue;
//! - [`controllers`]: the EndpointSlice, Endpoints, mirroring and allocator-repair
//!   controllers, and the event-to-key dispatch;
//! - [`apply`]: API writes and their error classification;
//! - [`events`]: events.k8s.io/v1 recording off the sync path;
//! - [`metrics`], [`admin`]: Prometheus metrics and the `/metrics`, `/livez`,
//!   `/readyz` server; [`exposition`]: the text format upstream serves;
//!   [`secure_metrics`], [`metrics_auth`]: `/metrics` over HTTPS for those RBAC allows;
//! - [`options`]: the controllers' settings; [`coalescing`]: how long a busy
//!   Service's changes gather before a write;
//! - [`access`]: the API access (RBAC) the process needs, as one table;
//! - [`registry`]: the table of controllers `svcplane run` can run;
//! - [`runtime`]: starting and stopping the controllers as a unit.

pub mod access;
pub(crate) mod admin;
pub(crate) mod apply;
pub mod cache;
pub mod coalescing;
pub(crate) mod controllers;
pub(crate) mod events;
pub mod exposition;
pub mod flag_group;
pub(crate) mod kinds;
pub mod metrics;
pub(crate) mod metrics_auth;
pub mod options;
pub(crate) mod queue;
pub(crate) mod registry;
pub mod runtime;
pub mod secure_metrics;
pub(crate) mod watch;
