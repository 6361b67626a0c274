//! Carrying a planned set of EndpointSlice writes out: shared by the EndpointSlice
//! and mirroring controllers, which write slices the same way and differ only in which
//! tracker and which metrics they keep.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use tracing::debug;

use crate::core::endpointslice::SliceRef;
use crate::core::endpointslice::tracker::SliceTracker;
use crate::shell::apply::{WriteError, WriteErrorKind, Writer};

const RESOURCE: &str = "endpointslices";

/// One batch of writes, carried out in this order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SliceWrites<'a> {
    pub(crate) creates: &'a [EndpointSlice],
    pub(crate) updates: &'a [EndpointSlice],
    pub(crate) deletes: &'a [SliceRef],
}

/// A write the API server accepted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Written<'a> {
    /// Created; the slice as stored.
    Created(&'a EndpointSlice),
    /// Replaced; the slice as stored.
    Updated(&'a EndpointSlice),
    /// Deleted.
    Deleted(&'a SliceRef),
}

impl Written<'_> {
    /// The `operation` label of upstream's `..._changes` metric.
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            Written::Created(_) => "create",
            Written::Updated(_) => "update",
            Written::Deleted(_) => "delete",
        }
    }

    /// Record this write as ours in `tracker` (for the Service `key`), so our own
    /// writes are never mistaken for a stale cache.
    pub(crate) fn record(&self, tracker: &mut SliceTracker, key: &str) {
        match self {
            Written::Created(s) | Written::Updated(s) => tracker.record_written(key, s),
            Written::Deleted(r) => {
                if let Some(uid) = &r.uid {
                    tracker.record_deleted(key, uid);
                }
            }
        }
    }
}

/// Carries `writes` out in `namespace`, stopping at the first failed write (a
/// namespace being deleted ends the batch quietly: nothing can be created there), and
/// hands every accepted write to `written` (never across an await). Returns how many
/// writes were made.
pub(crate) async fn write_slices(
    writer: &Writer,
    namespace: &str,
    writes: SliceWrites<'_>,
    written: impl Fn(Written<'_>),
) -> Result<usize, WriteError> {
    let mut count = 0;
    for slice in writes.creates {
        match writer.create(RESOURCE, namespace, slice).await {
            Ok(stored) => written(Written::Created(&stored)),
            Err(e) if e.kind == WriteErrorKind::NamespaceTerminating => {
                debug!(namespace, "namespace terminating; creates skipped");
                return Ok(count);
            }
            Err(e) => return Err(e),
        }
        count += 1;
    }
    for slice in writes.updates {
        let stored = writer.replace(RESOURCE, namespace, slice).await?;
        written(Written::Updated(&stored));
        count += 1;
    }
    for r in writes.deletes {
        writer
            .delete::<EndpointSlice>(RESOURCE, &r.namespace, &r.name, r.uid.as_deref())
            .await?;
        written(Written::Deleted(r));
        count += 1;
    }
    Ok(count)
}
