//! A map of namespaced objects, per namespace, sorted by name.
//!
//! The shared base of the caches: reconcilers read one namespace at a time, and a
//! name-sorted view keeps their inputs in a stable order (the plans do not depend on
//! it, but logs and tests read better). Names are `Arc<str>` so the indexes beside
//! the map can share them instead of copying.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Objects keyed by namespace, then name.
#[derive(Debug)]
pub struct NsMap<T> {
    namespaces: HashMap<Arc<str>, BTreeMap<Arc<str>, Arc<T>>>,
    len: usize,
}

impl<T> Default for NsMap<T> {
    fn default() -> Self {
        Self {
            namespaces: HashMap::new(),
            len: 0,
        }
    }
}

impl<T> NsMap<T> {
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<T>> {
        self.namespaces.get(namespace)?.get(name)
    }

    /// Stores `obj` under its key; returns the previous object and the shared name.
    pub fn insert(
        &mut self,
        namespace: &str,
        name: &str,
        obj: Arc<T>,
    ) -> (Option<Arc<T>>, Arc<str>) {
        // The namespace key is allocated even when present; a few bytes per write,
        // against the borrow dance a get-then-insert needs.
        let ns = self.namespaces.entry(Arc::from(namespace)).or_default();
        match ns.remove_entry(name) {
            Some((shared, old)) => {
                ns.insert(shared.clone(), obj);
                (Some(old), shared)
            }
            None => {
                let shared: Arc<str> = Arc::from(name);
                ns.insert(shared.clone(), obj);
                self.len += 1;
                (None, shared)
            }
        }
    }

    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<T>> {
        let ns = self.namespaces.get_mut(namespace)?;
        let old = ns.remove(name)?;
        self.len -= 1;
        if ns.is_empty() {
            self.namespaces.remove(namespace);
        }
        Some(old)
    }

    /// The objects of one namespace, by name.
    pub fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = (&Arc<str>, &Arc<T>)> {
        self.namespaces.get(namespace).into_iter().flatten()
    }

    /// Every object, namespace by namespace.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>, &Arc<T>)> {
        self.namespaces
            .iter()
            .flat_map(|(ns, objs)| objs.iter().map(move |(name, o)| (ns, name, o)))
    }

    /// (namespace, name) of every object.
    pub fn keys(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(ns, name, _)| (ns.to_string(), name.to_string()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replace_remove_keep_the_count() {
        let mut m: NsMap<u32> = NsMap::default();
        assert!(m.insert("a", "x", Arc::new(1)).0.is_none());
        let (old, name) = m.insert("a", "x", Arc::new(2));
        assert_eq!(old.as_deref(), Some(&1));
        assert_eq!(&*name, "x");
        m.insert("a", "w", Arc::new(3));
        m.insert("b", "x", Arc::new(4));
        assert_eq!(m.len(), 3);
        let names: Vec<&str> = m.in_namespace("a").map(|(n, _)| &**n).collect();
        assert_eq!(names, ["w", "x"]);
        assert_eq!(m.remove("a", "x").as_deref(), Some(&2));
        assert_eq!(m.remove("a", "x"), None);
        assert_eq!(m.remove("b", "x").as_deref(), Some(&4));
        assert_eq!(m.len(), 1);
        assert_eq!(m.in_namespace("b").count(), 0);
    }
}
