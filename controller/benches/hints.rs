//! Placeholder bench; replaced by the hints work.

fn main() {}
