//! Which ranges may hand a namespace's Services their ClusterIPs (beyond upstream).
//!
//! Each range carries the [`RangeScope`] its ServiceCIDR objects give it
//! ([`crate::namespace_selector`]). For one namespace, the ranges that *select* it (ready
//! ones, by a selector matching its labels) are its own and the only ones it may use;
//! a namespace no ready range selects uses the ranges that serve everyone. With no
//! namespace given (flags-mode tools, upstream comparisons) every range serves, as
//! upstream.

use std::collections::BTreeMap;

use crate::namespace_selector::NamespaceSelector;

/// Which namespaces one range serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RangeScope {
    /// Every namespace no range selects (some ServiceCIDR naming it has no selector).
    #[default]
    Everyone,
    /// Only the namespaces these selectors (ServiceCIDR name, selector) pick; empty when
    /// every ServiceCIDR naming it has a selector that does not parse.
    Selected(Vec<(String, NamespaceSelector)>),
}

impl RangeScope {
    /// The scope of a range named by one more ServiceCIDR, whose selector is `selector`
    /// (`None`: it has none; `Some(None)`: it has one that does not parse).
    pub fn with_object(self, object: &str, selector: Option<Option<&NamespaceSelector>>) -> Self {
        match (self, selector) {
            (Self::Everyone, _) | (_, None) => Self::Everyone,
            (Self::Selected(mut v), Some(Some(s))) => {
                v.push((object.to_owned(), s.clone()));
                Self::Selected(v)
            }
            (selected, Some(None)) => selected,
        }
    }

    /// The scope of a range first named by a ServiceCIDR with `selector`.
    pub fn of_object(object: &str, selector: Option<Option<&NamespaceSelector>>) -> Self {
        Self::Selected(Vec::new()).with_object(object, selector)
    }

    /// Does one of its selectors pick a namespace with `labels`?
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        matches!(self, Self::Selected(v) if v.iter().any(|(_, s)| s.matches(labels)))
    }

    /// How explain and refusals name it: `every namespace`, or the selectors.
    pub fn describe(&self) -> String {
        match self {
            Self::Everyone => "every namespace no ServiceCIDR selects".to_owned(),
            Self::Selected(v) if v.is_empty() => {
                "no namespace (its svcplane.io/namespace-selector does not parse)".to_owned()
            }
            Self::Selected(v) => v
                .iter()
                .map(|(o, s)| format!("namespaces matching {:?} ({o})", s.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The namespace a request's Service is in, as range scopes need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceView {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// Of ranges with these `(scope, ready)`, which serve namespace `ns`: those that select
/// it if a ready one does, else those serving everyone.
pub fn serving(ranges: &[(&RangeScope, bool)], ns: &NamespaceView) -> Vec<bool> {
    let bound = ranges
        .iter()
        .any(|(scope, ready)| *ready && scope.selects(&ns.labels));
    ranges
        .iter()
        .map(|(scope, _)| {
            if bound {
                scope.selects(&ns.labels)
            } else {
                **scope == RangeScope::Everyone
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceView {
        NamespaceView {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        }
    }

    fn selected(object: &str, selector: &str) -> RangeScope {
        RangeScope::of_object(
            object,
            Some(Some(&NamespaceSelector::parse(selector).unwrap())),
        )
    }

    #[test]
    fn a_namespace_a_ready_range_selects_uses_only_the_ranges_selecting_it() {
        let shared = RangeScope::Everyone;
        let team_a = selected("team-a", "team=a");
        let team_b = selected("team-b", "team=b");
        let ranges = [(&shared, true), (&team_a, true), (&team_b, true)];
        assert_eq!(
            serving(&ranges, &ns("a", &[("team", "a")])),
            [false, true, false]
        );
        assert_eq!(serving(&ranges, &ns("web", &[])), [true, false, false]);
    }

    #[test]
    fn a_terminating_range_binds_no_namespace() {
        let shared = RangeScope::Everyone;
        let team_a = selected("team-a", "team=a");
        let ranges = [(&shared, true), (&team_a, false)];
        assert_eq!(serving(&ranges, &ns("a", &[("team", "a")])), [true, false]);
    }

    #[test]
    fn a_range_any_of_whose_servicecidrs_has_no_selector_serves_everyone() {
        let s = NamespaceSelector::parse("team=a").unwrap();
        let scope = RangeScope::of_object("x", Some(Some(&s))).with_object("y", None);
        assert_eq!(scope, RangeScope::Everyone);
        let broken = RangeScope::of_object("x", Some(None));
        assert_eq!(broken, RangeScope::Selected(Vec::new()));
        assert!(broken.describe().contains("does not parse"));
        assert_eq!(
            serving(&[(&broken, true)], &ns("a", &[("team", "a")])),
            [false],
            "a selector that does not parse serves no one"
        );
    }
}
