//! Placeholder bench; replaced by the endpoints work.

fn main() {}
