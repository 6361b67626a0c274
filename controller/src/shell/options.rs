//! What `svcplane run`'s flags say about the controllers, independent of the
//! command line: which run and each one's settings.

use std::collections::BTreeSet;

use super::controllers::allocator_repair;
use super::controllers::endpoints as ep;
use super::controllers::endpointslice as es;
use super::controllers::mirroring as mirror;
use super::controllers::servicecidr as cidr;

// Each controller's flag group, as `run` flattens them (kube-controller-manager's
// per-controller options).
pub use super::controllers::allocator_repair::{
    AllocatorRepairFlags, HEADING as ALLOCATOR_HEADING,
};
pub use super::controllers::endpoints::{EndpointsFlags, HEADING as ENDPOINTS_HEADING};
pub use super::controllers::endpointslice::{EndpointSliceFlags, HEADING as ENDPOINTSLICE_HEADING};
pub use super::controllers::mirroring::MirroringFlags;

/// Everything the controllers need to know.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Canonical names of the controllers that run (`--controllers`).
    pub enabled: BTreeSet<&'static str>,
    pub endpoint_slice: es::Config,
    pub endpoints: ep::Config,
    pub mirroring: mirror::Config,
    pub allocator_repair: allocator_repair::Config,
    pub service_cidr: cidr::Config,
    /// `reportingInstance` of events.
    pub identity: String,
    /// Page size of the initial lists (0: no paging).
    pub list_page_size: u32,
}
