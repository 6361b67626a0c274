//! The two Kubernetes event types, as a type: the allocator's findings and planned
//! events name one, and the shells that record them match on it instead of
//! comparing strings.

/// `Normal` or `Warning`, as in an Event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::EventType;

    #[test]
    fn event_types_are_spelled_as_the_api_spells_them() {
        assert_eq!(EventType::Normal.to_string(), "Normal");
        assert_eq!(EventType::Warning.as_str(), "Warning");
    }
}
