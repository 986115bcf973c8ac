//! Who may do what the tier rules guard, as Kubernetes RBAC says: each power is a verb on a virtual resource
//! of the product's API group, asked of the apiserver with a SubjectAccessReview at the edge (the frontend)
//! and handed to the pure decisions as [`Grants`]. Three separate powers, so that one does not bring the
//! others (a GitOps controller that manages the policy does not thereby run its Pods outside a tier):
//!
//! | power | RBAC | guards |
//! |---|---|---|
//! | [`Permission::SetTier`] | `update` `tiers/<tier>` in `gpu-admission.io` | putting a namespace in tier `<tier>`, or taking it out |
//! | [`Permission::ChangeRules`] | `update` `policies` in `gpu-admission.io` | changing what a tier gets (the policy ConfigMap's rule fields) |
//! | [`Permission::Exempt`] | `exempt` `tiers/<tier>` in `gpu-admission.io` | one's own workloads outside tier `<tier>` |
//! | [`Permission::TuneJobType`] | `update` `jobtypes/<name>` in `gpu-admission.io` | job type `<name>`'s priors in the policy (what steers only the Pods carrying its label) |
//!
//! `cluster-admin` (and `system:masters`) hold them all; `update policies` includes every job type. The policy's `enforcement.adminGroups/adminUsers`
//! still grant all three for one release (deprecated: a list of names is no authority).

use std::collections::BTreeSet;

/// The API group the virtual resources belong to.
pub const API_GROUP: &str = "gpu-admission.io";

/// One power over the tier rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// Put a namespace in this tier (or take it out of it).
    SetTier(String),
    /// Change the rules (the policy's fields that decide what a tier gets).
    ChangeRules,
    /// Run one's own workloads outside this tier.
    Exempt(String),
    /// Change this job type's priors (the policy's `jobTypes[<name>]` fields that are no rule).
    TuneJobType(String),
}

impl Permission {
    /// The SubjectAccessReview's `verb`.
    pub fn verb(&self) -> &'static str {
        match self {
            Permission::SetTier(_) | Permission::ChangeRules | Permission::TuneJobType(_) => {
                "update"
            }
            Permission::Exempt(_) => "exempt",
        }
    }

    /// The SubjectAccessReview's `resource` (in [`API_GROUP`]).
    pub fn resource(&self) -> &'static str {
        match self {
            Permission::SetTier(_) | Permission::Exempt(_) => "tiers",
            Permission::ChangeRules => "policies",
            Permission::TuneJobType(_) => "jobtypes",
        }
    }

    /// The SubjectAccessReview's `name`, when the power is about one tier.
    pub fn name(&self) -> Option<&str> {
        match self {
            Permission::SetTier(t) | Permission::Exempt(t) | Permission::TuneJobType(t) => Some(t),
            Permission::ChangeRules => None,
        }
    }

    /// `update tiers/gold`, as messages name it.
    pub fn describe(&self) -> String {
        match self.name() {
            Some(name) => format!("{} {}/{name} ({API_GROUP})", self.verb(), self.resource()),
            None => format!("{} {} ({API_GROUP})", self.verb(), self.resource()),
        }
    }
}

/// The powers the requester of one review holds, as the apiserver answered (only those a decision asked for
/// are known; anything else counts as not held). A review that could not be asked holds nothing: a missing
/// answer is never a grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    held: BTreeSet<Permission>,
    /// A member of the policy's deprecated admin lists: holds every power.
    legacy_admin: bool,
}

impl Grants {
    /// No power at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// The powers the apiserver granted, and whether the requester is on the policy's (deprecated) admin
    /// lists.
    pub fn new(held: impl IntoIterator<Item = Permission>, legacy_admin: bool) -> Self {
        Self {
            held: held.into_iter().collect(),
            legacy_admin,
        }
    }

    /// What holds where no apiserver can be asked (the CLI, the properties): only the policy's deprecated
    /// admin lists grant, by the review's user and groups.
    pub fn offline(
        policy: &crate::policy::PolicySnapshot,
        user: &k8s_openapi::api::authentication::v1::UserInfo,
    ) -> Self {
        let groups = user.groups.as_deref().unwrap_or(&[]);
        Self::new([], policy.is_admin(user.username.as_deref(), groups))
    }

    pub fn allows(&self, p: &Permission) -> bool {
        self.legacy_admin || self.held.contains(p)
    }

    /// Granted by the deprecated admin lists only (worth a log line).
    pub fn only_by_legacy_list(&self, p: &Permission) -> bool {
        self.legacy_admin && !self.held.contains(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_are_separate_and_named_as_rbac_names_them() {
        let g = Grants::new([Permission::SetTier("bronze".into())], false);
        assert!(g.allows(&Permission::SetTier("bronze".into())));
        assert!(!g.allows(&Permission::SetTier("gold".into())));
        assert!(!g.allows(&Permission::Exempt("bronze".into())));
        assert!(!g.allows(&Permission::ChangeRules));
        assert_eq!(
            Permission::SetTier("gold".into()).describe(),
            "update tiers/gold (gpu-admission.io)"
        );
        assert_eq!(Permission::Exempt("gold".into()).verb(), "exempt");
        assert_eq!(Permission::ChangeRules.resource(), "policies");
        assert!(!Grants::none().allows(&Permission::ChangeRules));
    }

    #[test]
    fn the_deprecated_lists_hold_every_power() {
        let g = Grants::new([], true);
        for p in [
            Permission::ChangeRules,
            Permission::SetTier("gold".into()),
            Permission::Exempt("gold".into()),
        ] {
            assert!(g.allows(&p) && g.only_by_legacy_list(&p));
        }
    }
}
