//! Which resources the fake serves: plural → kind, scope and subresources.
//!
//! The real API server answers 404 for anything it does not serve, and the code under test
//! must cope with that (for example an API server without `IPAddress` objects). So routing
//! looks every request up here; tests register their CRDs and can disable built-ins.

use std::collections::HashMap;

/// A resource type: API group (empty for the core group), version and plural name.
///
/// `From<&str>` accepts `"v1/pods"` (core group) and `"discovery.k8s.io/v1/endpointslices"`;
/// any other shape becomes a `Gvr` that matches nothing, so lookups simply find nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `endpointslices`.
    pub plural: String,
}

impl Gvr {
    /// A resource type from its parts (`group` is `""` for the core group).
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
        }
    }

    /// The resource type of a statically typed kube resource (k8s-openapi types and
    /// `#[derive(CustomResource)]` types).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Self {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
        }
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as the API server names resources in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

impl From<&str> for Gvr {
    fn from(s: &str) -> Self {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [version, plural] => Self::new("", version, plural),
            [group, version, plural] => Self::new(group, version, plural),
            _ => Self::new("", "", s),
        }
    }
}

/// What the fake knows about one resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// Group, version and plural.
    pub gvr: Gvr,
    /// Kind, e.g. `EndpointSlice`; lists are `<Kind>List`.
    pub kind: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether the resource has a `/status` subresource (then the main resource ignores status
    /// changes, `/status` changes nothing else, and create drops status, as upstream).
    pub status: bool,
    /// Upstream strategies that keep status on create (Nodes: the kubelet registers with status).
    pub(crate) create_keeps_status: bool,
}

impl ResourceInfo {
    pub(crate) fn new(gvr: Gvr, kind: &str, namespaced: bool, status: bool) -> Self {
        Self {
            gvr,
            kind: kind.to_string(),
            namespaced,
            status,
            create_keeps_status: false,
        }
    }
}

/// The table of resources; disabled entries answer 404 like unknown ones.
#[derive(Debug)]
pub(crate) struct Registry {
    entries: HashMap<Gvr, (ResourceInfo, bool)>,
}

impl Registry {
    /// The built-in resources svcplane reads and writes.
    pub(crate) fn builtin() -> Self {
        let mut r = Self {
            entries: HashMap::new(),
        };
        let core = |p: &str| Gvr::new("", "v1", p);
        r.register(ResourceInfo::new(core("services"), "Service", true, true));
        r.register(ResourceInfo::new(core("pods"), "Pod", true, true));
        r.register(ResourceInfo {
            create_keeps_status: true,
            ..ResourceInfo::new(core("nodes"), "Node", false, true)
        });
        r.register(ResourceInfo::new(
            core("namespaces"),
            "Namespace",
            false,
            true,
        ));
        r.register(ResourceInfo::new(
            core("endpoints"),
            "Endpoints",
            true,
            false,
        ));
        r.register(ResourceInfo::new(core("events"), "Event", true, false));
        r.register(ResourceInfo::new(
            core("configmaps"),
            "ConfigMap",
            true,
            false,
        ));
        r.register(ResourceInfo::new(core("secrets"), "Secret", true, false));
        let gvr = Gvr::new("discovery.k8s.io", "v1", "endpointslices");
        r.register(ResourceInfo::new(gvr, "EndpointSlice", true, false));
        let gvr = Gvr::new("events.k8s.io", "v1", "events");
        r.register(ResourceInfo::new(gvr, "Event", true, false));
        let gvr = Gvr::new("networking.k8s.io", "v1", "ipaddresses");
        r.register(ResourceInfo::new(gvr, "IPAddress", false, false));
        let gvr = Gvr::new("networking.k8s.io", "v1", "servicecidrs");
        r.register(ResourceInfo::new(gvr, "ServiceCIDR", false, true));
        let gvr = Gvr::new("coordination.k8s.io", "v1", "leases");
        r.register(ResourceInfo::new(gvr, "Lease", true, false));
        r
    }

    /// Adds (or replaces) a resource; it starts enabled.
    pub(crate) fn register(&mut self, info: ResourceInfo) {
        self.entries.insert(info.gvr.clone(), (info, true));
    }

    /// An enabled resource.
    pub(crate) fn lookup(&self, gvr: &Gvr) -> Option<&ResourceInfo> {
        self.entries
            .get(gvr)
            .and_then(|(info, enabled)| enabled.then_some(info))
    }

    /// An enabled resource by `apiVersion` and `kind` (for inserting typed objects).
    pub(crate) fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceInfo> {
        let mut found: Vec<&ResourceInfo> = self
            .entries
            .values()
            .filter(|(info, enabled)| {
                *enabled && info.kind == kind && info.gvr.api_version() == api_version
            })
            .map(|(info, _)| info)
            .collect();
        // Deterministic choice if two plurals share a kind (never the case for built-ins).
        found.sort_by(|a, b| a.gvr.cmp(&b.gvr));
        found.into_iter().next()
    }

    /// Turns a resource on or off; returns whether it is registered at all.
    pub(crate) fn set_enabled(&mut self, gvr: &Gvr, enabled: bool) -> bool {
        match self.entries.get_mut(gvr) {
            Some(entry) => {
                entry.1 = enabled;
                true
            }
            None => false,
        }
    }
}
