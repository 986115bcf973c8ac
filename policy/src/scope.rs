//! What a namespace of a tier may have: the tier's rules widened by the namespace's grant, if any. The one
//! statement of that rule, read by the webhooks (core's tier rules) and by the apiserver's floor (its
//! parameters), so the two never disagree on what a grant adds.

use crate::{Bucket, NamespaceGrant, Policy, Tier};

/// A tier as one namespace has it.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'p> {
    policy: &'p Policy,
    pub tier: &'p Tier,
    /// The namespace's grant (`enforcement.namespaceGrants`), when it has one.
    pub grant: Option<&'p NamespaceGrant>,
}

impl Policy {
    /// The tier `tier` (an index of [`Policy::tiers`]) as `namespace` has it; `None` for no such tier.
    pub fn scope(&self, tier: usize, namespace: &str) -> Option<Scope<'_>> {
        let grant = self
            .namespace_grants
            .iter()
            .find(|g| g.namespace == namespace);
        self.scope_with(tier, grant)
    }

    /// The tier `tier` widened by `grant` (a grant of this policy, or none).
    pub fn scope_with<'p>(
        &'p self,
        tier: usize,
        grant: Option<&'p NamespaceGrant>,
    ) -> Option<Scope<'p>> {
        Some(Scope {
            policy: self,
            tier: self.tiers.get(tier)?,
            grant,
        })
    }
}

impl<'p> Scope<'p> {
    /// Whether the catalog class at `index` is allowed: the tier's, or one the grant adds.
    pub fn allows(&self, index: usize) -> bool {
        self.tier.allowed.get(index).copied().unwrap_or(false)
            || self.grant.is_some_and(|g| {
                self.policy
                    .classes
                    .get(index)
                    .is_some_and(|c| g.allowed_classes.contains(&c.name))
            })
    }

    /// The classes the grant adds beyond the tier's, by name (none without a grant).
    pub fn granted_classes(&self) -> &'p [String] {
        self.grant.map_or(&[], |g| g.allowed_classes.as_slice())
    }

    /// The priority cap: the tier's `maxPriorityClass` bucket, raised to the grant's when that is higher. A
    /// tier without a cap stays without one (a grant raises a cap, it never introduces one).
    pub fn max_priority_class(&self) -> Option<&'p Bucket> {
        let bucket = |name: Option<&String>| {
            name.and_then(|n| self.policy.priority.buckets.iter().find(|b| &b.name == n))
        };
        let cap = bucket(self.tier.max_priority_class.as_ref())?;
        match bucket(self.grant.and_then(|g| g.max_priority_class.as_ref())) {
            Some(granted) if granted.value > cap.value => Some(granted),
            _ => Some(cap),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn a_grant_widens_the_classes_and_raises_the_cap_of_its_namespace_only() {
        let text = crate::DEFAULT_POLICY_YAML.replace(
            "namespaceGrants: []",
            "namespaceGrants:\n  - { namespace: lab, allowedClasses: [H100-80GB], maxPriorityClass: gpu-high }",
        );
        let p = parse(&text, "policy.yaml").unwrap();
        let bronze = p.tier_index("bronze").unwrap();
        let h100 = p.class_index("H100-80GB").unwrap();
        let (lab, other) = (
            p.scope(bronze, "lab").unwrap(),
            p.scope(bronze, "ml").unwrap(),
        );
        assert!(lab.allows(h100) && !other.allows(h100));
        assert_eq!(lab.granted_classes(), ["H100-80GB"]);
        let (lab_cap, cap) = (lab.max_priority_class(), other.max_priority_class());
        assert_eq!(lab_cap.map(|b| b.name.as_str()), Some("gpu-high"));
        assert!(cap.is_some_and(|c| c.value < lab_cap.unwrap().value));
        assert!(p.scope(p.tiers.len(), "lab").is_none());
    }
}
