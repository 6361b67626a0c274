//! Service selector matching (ES-2.1): a selector is a plain
//! equality map; `None` matches nothing, an empty map matches everything.

use std::collections::BTreeMap;

use crate::core::pod::PodView;

/// True when every `key: value` of `selector` is one of the Pod's labels (read
/// through [`PodView`], so a cached Pod matches exactly like the API object).
pub fn selector_matches_pod<P: PodView + ?Sized>(
    selector: Option<&BTreeMap<String, String>>,
    pod: &P,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    selector
        .iter()
        .all(|(k, v)| pod.label(k) == Some(v.as_str()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A Pod with these labels (`None`: no labels at all).
    fn labelled(labels: Option<&BTreeMap<String, String>>) -> Pod {
        let mut p = Pod::default();
        p.metadata.labels = labels.cloned();
        p
    }

    fn selector_matches(
        selector: Option<&BTreeMap<String, String>>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        selector_matches_pod(selector, &labelled(labels))
    }

    #[test]
    fn rule_2_1_nil_selector_matches_nothing() {
        assert!(!selector_matches(None, Some(&map(&[("app", "a")]))));
    }

    #[test]
    fn rule_2_1_empty_selector_matches_every_pod() {
        assert!(selector_matches(Some(&map(&[])), None));
        assert!(selector_matches(Some(&map(&[])), Some(&map(&[("x", "y")]))));
    }

    #[test]
    fn rule_2_1_selector_is_an_equality_subset() {
        let sel = map(&[("app", "a"), ("tier", "web")]);
        assert!(selector_matches(
            Some(&sel),
            Some(&map(&[("app", "a"), ("tier", "web"), ("x", "1")]))
        ));
        assert!(!selector_matches(Some(&sel), Some(&map(&[("app", "a")]))));
        assert!(!selector_matches(
            Some(&sel),
            Some(&map(&[("app", "a"), ("tier", "db")]))
        ));
        assert!(!selector_matches(Some(&sel), None));
    }
}
