//! (placeholder: filled by the topology work)
