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
//! `cluster-admin` (and `system:masters`) hold them all; `update policies` includes every job type. Nothing
//! else grants them: where no apiserver can be asked (the offline CLI) the caller states what RBAC would
//! answer, spelled as [`Permission::describe`] spells it without the group (`exempt tiers/gold`, see
//! [`Permission::parse`]).

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

    /// A power as `kubectl auth can-i` spells it in [`API_GROUP`]: `VERB RESOURCE[/NAME]` — `exempt
    /// tiers/gold`, `update tiers/bronze`, `update policies`, `update jobtypes/train-llama`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let (resource, name) = match words.get(1).map(|r| r.split_once('/')) {
            Some(Some((resource, name))) => (resource, Some(name).filter(|n| !n.is_empty())),
            Some(None) => (words[1], None),
            None => ("", None),
        };
        let p = match (words.first().copied(), resource, name, words.len()) {
            (Some("update"), "tiers", Some(t), 2) => Permission::SetTier(t.to_string()),
            (Some("exempt"), "tiers", Some(t), 2) => Permission::Exempt(t.to_string()),
            (Some("update"), "policies", None, 2) => Permission::ChangeRules,
            (Some("update"), "jobtypes", Some(j), 2) => Permission::TuneJobType(j.to_string()),
            _ => {
                return Err(format!(
                    "`{text}` is no power of {API_GROUP}: `exempt tiers/TIER`, `update tiers/TIER`, \
                     `update policies` or `update jobtypes/JOB_TYPE`"
                ));
            }
        };
        Ok(p)
    }
}

/// The powers the requester of one review holds, as the apiserver answered (only those a decision asked for
/// are known; anything else counts as not held), or as the offline caller states RBAC would answer. A review
/// that could not be asked holds nothing: a missing answer is never a grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    held: BTreeSet<Permission>,
}

impl Grants {
    /// No power at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// The powers the apiserver granted (or, offline, the ones stated: [`Permission::parse`]).
    pub fn new(held: impl IntoIterator<Item = Permission>) -> Self {
        Self {
            held: held.into_iter().collect(),
        }
    }

    pub fn allows(&self, p: &Permission) -> bool {
        self.held.contains(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_are_separate_and_named_as_rbac_names_them() {
        let g = Grants::new([Permission::SetTier("bronze".into())]);
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
    fn powers_are_parsed_as_kubectl_spells_them() {
        for (text, p) in [
            ("exempt tiers/gold", Permission::Exempt("gold".into())),
            ("update tiers/bronze", Permission::SetTier("bronze".into())),
            ("  update   policies ", Permission::ChangeRules),
            (
                "update jobtypes/train-llama",
                Permission::TuneJobType("train-llama".into()),
            ),
        ] {
            assert_eq!(Permission::parse(text), Ok(p.clone()), "{text}");
            // What a message names parses back (without the group).
            let described = p.describe().replace(&format!(" ({API_GROUP})"), "");
            assert_eq!(Permission::parse(&described), Ok(p));
        }
        for wrong in [
            "",
            "exempt",
            "exempt tiers",
            "exempt tiers/",
            "exempt policies",
            "update policies/x",
            "delete tiers/gold",
            "exempt tiers/gold extra",
            "exempt:gold",
        ] {
            let e = Permission::parse(wrong).unwrap_err();
            assert!(e.contains("exempt tiers/TIER"), "{wrong}: {e}");
        }
    }
}
