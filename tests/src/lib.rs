//! Cross-crate end-to-end scenarios.
//!
//! - [`fake_api`]: an in-process fake API server for scenario tests that need
//!   real `kube::Client` traffic without a cluster (`tests/tests/webhook_replicas.rs`,
//!   `tests/tests/run_scenarios.rs`);
//! - [`run_env`]: `svcplane run`'s machinery in-process, settling and the
//!   "exactly the desired state" check;
//! - [`sim`]: the workload simulator behind the `simulate` bench binary (issue 10);
//! - [`versus`]: upstream kube-controller-manager and `svcplane run` side by side on
//!   real API servers, behind the `versus` bench binary (issue 21);
//! - [`webhook_env`]: certificates, the AllocationClaim CRD, webhook
//!   configurations and `kubectl` for running svcplane's webhook beside a real API
//!   server (`tests/tests/e2e_webhook.rs`).
//!
//! Support for the suites that run against a real API server
//! (`tests/tests/e2e_*.rs`, `tests/tests/differential.rs`):
//! - [`binary`]: the shipped `svcplane` binary as a separate process;
//! - [`envtest`]: the `tests/envtest` harness (etcd + kube-apiserver, and
//!   upstream kube-controller-manager for the differential suite), built on first
//!   use, or an external cluster via `SVCPLANE_E2E_KUBECONFIG`;
//! - [`skip`]: the one way a test skips, recorded for `scripts/test`'s summary;
//! - [`objects`]: creating fixture-built Nodes, Services and Pods (with status),
//!   reading back a Service's slices and Endpoints;
//! - [`normalize`]: comparing stored EndpointSlices across clusters;
//! - [`openapi_sample`]: objects with every field of an API server's schema set,
//!   and what a typed round trip of one loses;
//! - [`node_cluster`]: a real single-node cluster (kubelet, kube-proxy, containerd,
//!   CoreDNS) in a private network namespace, with helm, for operator suites
//!   (`tests/tests/e2e_node.rs`).

pub mod binary;
#[cfg(test)]
mod docs_check;
#[cfg(test)]
mod docs_links;
pub mod envtest;
pub mod fake_api;
pub mod node_cluster;
pub mod normalize;
pub mod objects;
pub mod openapi_sample;
pub mod run_env;
pub mod sim;
pub mod skip;
#[cfg(test)]
mod test_classes;
pub mod versus;
pub mod webhook_env;
