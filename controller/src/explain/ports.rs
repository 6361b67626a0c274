//! How `explain` names a port in every report: `name:number/protocol`, the
//! form the slices, the Endpoints subsets and the verdicts share.

use crate::core::pod;

/// `name:number/protocol` of an endpoint or subset port.
pub fn port_label(name: Option<&str>, number: Option<i32>, protocol: Option<&str>) -> String {
    let number = number.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let protocol = protocol.unwrap_or(pod::DEFAULT_PROTOCOL);
    match name.filter(|n| !n.is_empty()) {
        Some(name) => format!("{name}:{number}/{protocol}"),
        None => format!("{number}/{protocol}"),
    }
}
