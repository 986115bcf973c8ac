//! What the audit decided of each object, kept between passes so that a pass decides again only what
//! changed: an object whose resourceVersion is the one decided keeps its results unless its namespace's
//! facts changed ([`super::stores::Dirty`]), and a tier's quota is replayed from the Pods' counts kept here
//! rather than by decoding and deciding every Pod of the tier again.
//!
//! Forgotten whole when everything is marked (a re-list, a PriorityClass, the policy) and
//! when the replica stops leading. Pure: no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::evaluate::Finding;
use super::quota::QuotaPod;

/// An audited object in its namespace: the index of its kind among the audited kinds, and its name.
pub type ObjectKey = (usize, String);

/// What one object was decided.
#[derive(Debug, Clone)]
pub struct DecidedObject {
    /// The resourceVersion decided.
    pub resource_version: String,
    /// Its results (none for an object not held to a tier or no longer running).
    pub findings: Vec<Finding>,
    /// What it counts against its tier's GPU quota, if anything.
    pub quota: Option<QuotaPod>,
    /// Whether time alone may change its results (a deleted Pod within its grace period).
    pub volatile: bool,
}

/// One namespace's decided objects, and its quota results at the last replay of its tier.
#[derive(Debug, Default)]
pub struct NamespaceDecided {
    pub objects: HashMap<ObjectKey, DecidedObject>,
    pub quota: Vec<Finding>,
}

/// Every namespace's decided objects.
#[derive(Debug, Default)]
pub struct Decided {
    namespaces: HashMap<String, NamespaceDecided>,
}

impl Decided {
    pub fn clear(&mut self) {
        self.namespaces.clear();
    }

    /// Forgets `namespace`'s objects (its facts changed).
    pub fn forget(&mut self, namespace: &str) {
        if let Some(ns) = self.namespaces.get_mut(namespace) {
            ns.objects.clear();
        }
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// Takes the object as decided out, if it was decided at `resource_version` (else leaves it).
    pub fn take_reusable(
        &mut self,
        namespace: &str,
        key: &ObjectKey,
        resource_version: Option<&str>,
    ) -> Option<DecidedObject> {
        let objects = &mut self.namespaces.get_mut(namespace)?.objects;
        let d = objects.get(key)?;
        if Some(d.resource_version.as_str()) != resource_version {
            return None;
        }
        objects.remove(key)
    }

    /// Replaces `namespace`'s objects by `objects` (the objects it holds now), keeping its quota results.
    pub fn set_objects(&mut self, namespace: String, objects: HashMap<ObjectKey, DecidedObject>) {
        self.namespaces.entry(namespace).or_default().objects = objects;
    }

    /// Drops the namespaces `keep` says are gone.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.namespaces.retain(|ns, _| keep(ns));
    }

    /// The namespaces where time alone may change a result: holding a deleted Pod within its grace period.
    pub fn volatile_namespaces(&self) -> impl Iterator<Item = &str> {
        (self.namespaces.iter())
            .filter(|(_, d)| d.objects.values().any(|o| o.volatile))
            .map(|(ns, _)| ns.as_str())
    }

    /// The quota counts of every Pod of `namespaces`.
    pub fn quota_pods<'a>(
        &'a self,
        namespaces: impl IntoIterator<Item = &'a String>,
    ) -> Vec<QuotaPod> {
        (namespaces.into_iter())
            .filter_map(|ns| self.namespaces.get(ns))
            .flat_map(|d| d.objects.values().filter_map(|o| o.quota.clone()))
            .collect()
    }

    /// Sets the quota results of `namespaces` (those without any get none) and returns the namespaces whose
    /// quota results changed.
    pub fn set_quota(
        &mut self,
        namespaces: &HashSet<String>,
        findings: Vec<Finding>,
    ) -> HashSet<String> {
        let mut by_namespace: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
        for f in findings {
            by_namespace
                .entry(f.resource.namespace.clone())
                .or_default()
                .push(f);
        }
        let mut changed = HashSet::new();
        for ns in namespaces {
            let new = by_namespace.remove(ns).unwrap_or_default();
            let entry = self.namespaces.entry(ns.clone()).or_default();
            if entry.quota != new {
                entry.quota = new;
                changed.insert(ns.clone());
            }
        }
        changed
    }

    /// Every result of `namespace`: its objects' and its quota's.
    pub fn findings(&self, namespace: &str) -> Vec<Finding> {
        let Some(d) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        (d.objects.values())
            .flat_map(|o| o.findings.iter().cloned())
            .chain(d.quota.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::evaluate::{Outcome, Resource};

    fn finding(ns: &str, name: &str) -> Finding {
        Finding {
            outcome: Outcome::Fail,
            rule: "over_max",
            message: format!("{name} is over"),
            resource: Resource {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: ns.into(),
                name: name.into(),
                uid: "u".into(),
            },
            properties: BTreeMap::new(),
        }
    }

    fn decided(rv: &str, volatile: bool) -> DecidedObject {
        DecidedObject {
            resource_version: rv.into(),
            findings: vec![finding("a", "p")],
            quota: None,
            volatile,
        }
    }

    #[test]
    fn an_object_is_reused_at_its_resource_version_until_its_namespace_is_forgotten() {
        let mut d = Decided::default();
        let key = (0, "p".to_string());
        let set = |d: &mut Decided| {
            d.set_objects(
                "a".into(),
                HashMap::from([(key.clone(), decided("7", false))]),
            )
        };
        set(&mut d);
        assert_eq!(d.findings("a").len(), 1);
        assert!(
            d.take_reusable("a", &key, Some("8")).is_none(),
            "changed since"
        );
        assert!(d.take_reusable("a", &key, None).is_none());
        assert!(d.take_reusable("b", &key, Some("7")).is_none());
        assert!(d.take_reusable("a", &key, Some("7")).is_some());
        assert!(d.take_reusable("a", &key, Some("7")).is_none(), "taken");
        set(&mut d);
        d.forget("a");
        assert!(d.take_reusable("a", &key, Some("7")).is_none());
        assert!(d.contains("a"), "forgetting keeps the namespace known");
        d.retain(|ns| ns != "a");
        assert!(!d.contains("a"));
    }

    #[test]
    fn quota_results_report_which_namespaces_changed() {
        let mut d = Decided::default();
        let scope: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let changed = d.set_quota(&scope, vec![finding("a", "p1")]);
        assert_eq!(
            changed,
            HashSet::from(["a".to_string()]),
            "b had none and has none"
        );
        assert!(d.set_quota(&scope, vec![finding("a", "p1")]).is_empty());
        let changed = d.set_quota(&scope, vec![finding("b", "p2")]);
        assert_eq!(changed, scope, "a's result went, b's came");
        assert_eq!(d.findings("b"), vec![finding("b", "p2")]);
    }

    #[test]
    fn a_namespace_with_a_deleted_pod_in_its_grace_period_is_volatile() {
        let mut d = Decided::default();
        d.set_objects(
            "a".into(),
            HashMap::from([((0, "p".into()), decided("1", false))]),
        );
        d.set_objects(
            "b".into(),
            HashMap::from([((0, "q".into()), decided("1", true))]),
        );
        assert_eq!(d.volatile_namespaces().collect::<Vec<_>>(), ["b"]);
    }
}
