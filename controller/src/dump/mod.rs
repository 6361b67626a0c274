//! The offline cluster reader: a `kubectl get -o yaml`-style dump (files or stdin)
//! turned into one sorted, typed snapshot. `plan` runs the controllers over it and
//! `explain` the same functions, so neither command owns it.
//!
//! - `input`: read files/stdin, split documents, parse, identify objects;
//! - `snapshot`: decode into typed objects, keyed and sorted.

pub mod input;
pub mod snapshot;
