//! (placeholder: filled by the mirroring work)
