//! Events a reconciler wants recorded against the object it reconciled.
//!
//! Reconcilers only describe events; the shell decides how to emit them
//! (events.k8s.io in `run`, the `events` list in `plan`).

use serde::Serialize;

/// The Kubernetes event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// One event about the reconciled object (the Service for the EndpointSlice
/// controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub event_type: EventType,
    pub reason: &'static str,
    pub message: String,
}

impl PlannedEvent {
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            event_type: EventType::Warning,
            reason,
            message: message.into(),
        }
    }

    pub fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            event_type: EventType::Normal,
            reason,
            message: message.into(),
        }
    }
}

/// The allocator's findings name their type with the allocator's own enum.
impl From<svcplane_allocator::EventType> for EventType {
    fn from(t: svcplane_allocator::EventType) -> Self {
        match t {
            svcplane_allocator::EventType::Normal => EventType::Normal,
            svcplane_allocator::EventType::Warning => EventType::Warning,
        }
    }
}
