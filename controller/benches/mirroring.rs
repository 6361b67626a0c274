//! Placeholder bench; replaced by the mirroring work.

fn main() {}
