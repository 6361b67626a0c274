//! (placeholder: filled by the endpoints work)
