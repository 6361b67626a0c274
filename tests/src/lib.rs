//! Cross-crate end-to-end scenarios (filled as the runtime lands).
