//! Pure ClusterIP and NodePort allocation engine for svcplane.
//!
//! Gives the same answers as kube-apiserver's Service allocators (the rules are
//! `AL-x` in `docs/allocator.md`): banded dynamic allocation (KEP-3070, KEP-3668), IP-family
//! resolution, create/update/delete transactions with upstream's error texts and status
//! codes, rebuild from existing Services and repair findings. No I/O, no clocks:
//! randomness is a seed and time a parameter.
//!
//! Entry points: [`AllocatorConfig`] + [`plan_allocations`] for `svcplane plan`,
//! [`Allocators`] for the admission webhook (create/update/release of one Service),
//! [`CidrAllocator`], [`FamilyAllocator`] and [`PortAllocator`] for the raw ranges.

pub mod bitmap;
pub mod duration;
pub mod error;
pub mod event;
pub mod families;
pub mod ip_allocator;
pub mod namespace_selector;
pub mod node_port;
pub mod plan;
pub mod range;
pub mod range_scope;
pub mod rebuild;
pub mod repair;
pub mod rng;
pub mod service;
pub mod service_cidrs;
pub mod view;

pub use error::{
    ConfigError, FieldError, FieldErrorType, FieldValue, IpAllocError, PortAllocError, RangeError,
    ServiceError,
};
pub use event::EventType;
pub use families::ClusterFamilies;
pub use ip_allocator::{CidrAllocator, FamilyAllocator};
pub use node_port::{PortAllocator, PortRange};
pub use plan::{
    AllocationPlan, AllocatorConfig, AllocatorEvent, DEFAULT_SERVICE_CLUSTER_IP_RANGE,
    DEFAULT_SERVICE_NODE_PORT_RANGE, ServiceUpdate, plan_allocations, repair_findings,
};
pub use range::{Cidr, IpFamily};
pub use rebuild::{Rebuilt, rebuild};
pub use repair::{Finding, Remedy};
pub use rng::Rng;
pub use service::{Allocators, Claim, Transaction};
pub use view::SvcView;
