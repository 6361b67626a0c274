//! What `svcplane run`'s flags say about the controllers, independent of the
//! command line: which run and each one's settings.

use std::collections::BTreeSet;

pub use super::flag_group::{FlagGroup, Settings, Shared};

// Each controller's settings, by the name an embedder (tests, the simulator) tunes
// them under.
pub use super::controllers::allocator_repair::Config as AllocatorRepairConfig;
pub use super::controllers::endpoints::Config as EndpointsConfig;
pub use super::controllers::endpointslice::Config as EndpointSliceConfig;
pub use super::controllers::mirroring::Config as MirroringConfig;
pub use super::controllers::servicecidr::Config as ServiceCidrConfig;

/// Everything the controllers need to know.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Canonical names of the controllers that run (`--controllers`).
    pub enabled: BTreeSet<&'static str>,
    /// Every registered controller's settings, made by its flag group.
    pub settings: Settings,
    /// `reportingInstance` of events.
    pub identity: String,
    /// Page size of the initial lists (0: no paging).
    pub list_page_size: u32,
}
