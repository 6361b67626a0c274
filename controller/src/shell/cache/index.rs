//! Label indexes: which objects of a namespace carry a given `key=value` label.
//!
//! A Pod event must find the Services whose selector could match it, and a sync must
//! find the Pods a selector matches, without scanning every object of the namespace:
//! with 10 000 Services and 100 000 Pods in one namespace a scan per event or per sync
//! would cost seconds. Selectors are plain equality maps, so an object matches only if
//! it carries every selector pair; any one pair narrows the candidates to a set this
//! index returns in O(1), and the exact match is checked on that set alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Sorted names of objects.
pub type Names = BTreeSet<Arc<str>>;

/// Label key → value → names of the objects carrying that label (one namespace).
#[derive(Debug, Default)]
pub struct LabelIndex {
    by_label: HashMap<Box<str>, HashMap<Box<str>, Names>>,
}

impl LabelIndex {
    pub fn add(&mut self, key: &str, value: &str, name: &Arc<str>) {
        let values = match self.by_label.get_mut(key) {
            Some(v) => v,
            None => self.by_label.entry(Box::from(key)).or_default(),
        };
        let names = match values.get_mut(value) {
            Some(n) => n,
            None => values.entry(Box::from(value)).or_default(),
        };
        names.insert(name.clone());
    }

    pub fn remove(&mut self, key: &str, value: &str, name: &str) {
        let Some(values) = self.by_label.get_mut(key) else {
            return;
        };
        if let Some(names) = values.get_mut(value) {
            names.remove(name);
            if names.is_empty() {
                values.remove(value);
            }
        }
        if values.is_empty() {
            self.by_label.remove(key);
        }
    }

    /// Names of the objects labelled `key=value`, sorted.
    pub fn get(&self, key: &str, value: &str) -> Option<&BTreeSet<Arc<str>>> {
        self.by_label.get(key)?.get(value)
    }

    pub fn is_empty(&self) -> bool {
        self.by_label.is_empty()
    }
}

/// One [`LabelIndex`] per namespace.
#[derive(Debug, Default)]
pub struct NamespacedLabelIndex {
    namespaces: HashMap<Arc<str>, LabelIndex>,
}

impl NamespacedLabelIndex {
    pub fn add(&mut self, namespace: &str, key: &str, value: &str, name: &Arc<str>) {
        match self.namespaces.get_mut(namespace) {
            Some(ix) => ix.add(key, value, name),
            None => self
                .namespaces
                .entry(Arc::from(namespace))
                .or_default()
                .add(key, value, name),
        }
    }

    pub fn remove(&mut self, namespace: &str, key: &str, value: &str, name: &str) {
        if let Some(ix) = self.namespaces.get_mut(namespace) {
            ix.remove(key, value, name);
            if ix.is_empty() {
                self.namespaces.remove(namespace);
            }
        }
    }

    pub fn get(&self, namespace: &str, key: &str, value: &str) -> Option<&BTreeSet<Arc<str>>> {
        self.namespaces.get(namespace)?.get(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_and_go_with_their_last_name() {
        let mut ix = NamespacedLabelIndex::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        ix.add("ns", "app", "web", &b);
        ix.add("ns", "app", "web", &a);
        ix.add("other", "app", "web", &a);
        let names: Vec<&str> = ix
            .get("ns", "app", "web")
            .into_iter()
            .flatten()
            .map(|n| &**n)
            .collect();
        assert_eq!(names, ["a", "b"]);
        ix.remove("ns", "app", "web", "a");
        ix.remove("ns", "app", "web", "b");
        assert!(ix.get("ns", "app", "web").is_none());
        assert!(
            !ix.namespaces.contains_key("ns"),
            "empty namespaces are dropped"
        );
        assert_eq!(ix.get("other", "app", "web").map(BTreeSet::len), Some(1));
    }
}
