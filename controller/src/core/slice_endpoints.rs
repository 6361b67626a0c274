//! One way to read an EndpointSlice's endpoints.
//!
//! The 1.37 API schema marks `endpoints` optional, so the generated type holds
//! an `Option<Vec<_>>`. An absent list and an empty one mean the same thing to
//! every reconciler; reading through this trait keeps that decision in one
//! place. Slices svcplane builds always carry `Some` (an empty list is written
//! as `[]`, as upstream writes it).

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

/// Endpoints of a slice, with an absent list read as empty.
pub trait SliceEndpoints {
    /// The endpoints, empty when the list is absent.
    fn endpoints(&self) -> &[Endpoint];
    /// The endpoints for editing; an absent list becomes an empty one.
    fn endpoints_mut(&mut self) -> &mut Vec<Endpoint>;
}

impl SliceEndpoints for EndpointSlice {
    fn endpoints(&self) -> &[Endpoint] {
        self.endpoints.as_deref().unwrap_or_default()
    }

    fn endpoints_mut(&mut self) -> &mut Vec<Endpoint> {
        self.endpoints.get_or_insert_with(Vec::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_endpoints_read_as_empty_and_become_a_list_when_edited() {
        let mut slice = EndpointSlice::default();
        assert!(slice.endpoints().is_empty());
        slice.endpoints_mut().push(Endpoint::default());
        assert_eq!(slice.endpoints().len(), 1);
        assert_eq!(slice.endpoints.as_ref().map(Vec::len), Some(1));
    }
}
