//! Who may do what the tier rules guard, as Kubernetes RBAC says: each power is a verb on a virtual resource
//! of the product's API group, asked of the apiserver with a SubjectAccessReview at the edge (the frontend)
//! and handed to the pure decisions as [`Grants`]. Three separate powers, so that one does not bring the
//! others (a GitOps controller that manages the policy does not thereby run its Pods outside a tier):
//!
//! | power | RBAC | guards |
//! |---|---|---|
//! | [`Permission::SetTier`] | `update` `tiers/<tier>` in `gpu-admission.io` | putting a namespace in tier `<tier>`, or taking it out |
//! | [`Permission::ChangeRules`] | `update` `policies` in `gpu-admission.io` | changing what a tier gets (the policy ConfigMap's rule fields) |
//! | [`Permission::Exempt`] | `exempt` `tiers/<tier>` in `gpu-admission.io` | one's own workloads outside tier `<tier>`; creating or changing a `GpuPolicyException` in a namespace of tier `<tier>` ([`crate::exception::review`]) |
//! | [`Permission::TuneJobType`] | `update` `jobtypes/<name>` in `gpu-admission.io` | job type `<name>`'s priors in the policy (what steers only the Pods carrying its label) |
//! | [`Permission::AdminAccess`] | `use` `adminaccess` in `gpu-admission.io` | DRA admin access: setting a Namespace's `resource.kubernetes.io/admin-access` label, creating a GPU claim with `adminAccess: true` (devices other tenants' Pods use) |
//!
//! `update policies` includes every job type. Nothing else grants them: where no apiserver can be asked (the
//! offline CLI) the caller states what RBAC would answer, spelled as [`Permission::describe`] spells it without
//! the group (`exempt tiers/gold`, see [`Permission::parse`]).
//!
//! **No power by accident.** A rule with `*` in place of its verbs, its resources or its API groups grants
//! every power of this module's virtual resources without naming one: Argo CD's application controller
//! (`*` on `*`), everyone bound to `cluster-admin` (Flux's controllers), the garbage collector (`update` on
//! `*`). So each power is asked twice more ([`Permission::wildcard_probes`]): the same question with its verb,
//! then its resource, then its group replaced by [`NO_ROLE_NAMES_THIS`], which no role names, so that only a
//! `*` in that place answers yes. A requester whose answer to a probe is yes holds the power only through a
//! wildcard, and is not taken to hold it ([`Answer::ThroughWildcard`]) unless a member of
//! [`SUPERUSER_GROUP`], whom the apiserver grants everything before any authorizer is asked: the person
//! installing the cluster still sets tiers and policies. RBAC has no deny, so a wildcard holder who must hold a
//! power acts as an identity bound to a role naming it (`kubectl --as`), or as `system:masters`.

use std::collections::{BTreeMap, BTreeSet};

/// The API group the virtual resources belong to.
pub const API_GROUP: &str = "gpu-admission.io";

/// The verb, resource and (as `<this>.gpu-admission.io`) API group a wildcard probe puts in place of a
/// power's: a name no role names, so only a `*` grants it.
pub const NO_ROLE_NAMES_THIS: &str = "only-a-wildcard-grants-this";

/// The group whose members the apiserver authorizes for everything before asking any authorizer.
pub const SUPERUSER_GROUP: &str = "system:masters";

/// The group of the group probe: [`NO_ROLE_NAMES_THIS`] under [`API_GROUP`].
const PROBE_GROUP: &str = "only-a-wildcard-grants-this.gpu-admission.io";

/// One question for the authorizer, as a SubjectAccessReview's `resourceAttributes` (and the floor's CEL
/// `authorizer.group(..).resource(..).name(..).check(verb)`) spell it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Question {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
    pub name: Option<String>,
}

/// Which place of a rule held a `*` that granted a power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wildcard {
    /// `verbs: ["*"]`.
    Verb,
    /// `resources: ["*"]`.
    Resource,
    /// `apiGroups: ["*"]`.
    Group,
}

impl Wildcard {
    /// The rule's field, as RBAC spells it.
    pub fn field(self) -> &'static str {
        match self {
            Wildcard::Verb => "verbs",
            Wildcard::Resource => "resources",
            Wildcard::Group => "apiGroups",
        }
    }
}

/// What the authorizer's answers say of one power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Granted by a rule naming it (or to a member of [`SUPERUSER_GROUP`]).
    Held,
    /// Granted, but a probe was granted too: only a `*` in this place grants it, which does not count.
    ThroughWildcard(Wildcard),
    /// Not granted.
    NotHeld,
}

impl Answer {
    /// The decision over the answers: `granted` to the power's own question, `superuser` a member of
    /// [`SUPERUSER_GROUP`], `first_probe_granted` the first of [`Permission::wildcard_probes`] answered yes
    /// (asked only when granted and not a superuser).
    pub fn judge(granted: bool, superuser: bool, first_probe_granted: Option<Wildcard>) -> Self {
        match (granted, superuser, first_probe_granted) {
            (false, _, _) => Answer::NotHeld,
            (true, true, _) | (true, false, None) => Answer::Held,
            (true, false, Some(w)) => Answer::ThroughWildcard(w),
        }
    }
}

/// The requester is a member of [`SUPERUSER_GROUP`].
pub fn is_superuser<S: AsRef<str>>(groups: &[S]) -> bool {
    groups.iter().any(|g| g.as_ref() == SUPERUSER_GROUP)
}

/// One power over the tier rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// Put a namespace in this tier (or take it out of it).
    SetTier(String),
    /// Change the rules (the policy's fields that decide what a tier gets).
    ChangeRules,
    /// Run one's own workloads outside this tier (what the holder creates itself, not what controllers create
    /// for it), and create or change GpuPolicyExceptions in namespaces of this tier (which reach those).
    Exempt(String),
    /// Change this job type's priors (the policy's `jobTypes[<name>]` fields that are no rule).
    TuneJobType(String),
    /// DRA admin access to GPUs: label a namespace `resource.kubernetes.io/admin-access`, claim GPUs with
    /// `adminAccess: true`.
    AdminAccess,
}

impl Permission {
    /// The SubjectAccessReview's `verb`.
    pub fn verb(&self) -> &'static str {
        match self {
            Permission::SetTier(_) | Permission::ChangeRules | Permission::TuneJobType(_) => {
                "update"
            }
            Permission::Exempt(_) => "exempt",
            Permission::AdminAccess => "use",
        }
    }

    /// The SubjectAccessReview's `resource` (in [`API_GROUP`]).
    pub fn resource(&self) -> &'static str {
        match self {
            Permission::SetTier(_) | Permission::Exempt(_) => "tiers",
            Permission::ChangeRules => "policies",
            Permission::TuneJobType(_) => "jobtypes",
            Permission::AdminAccess => "adminaccess",
        }
    }

    /// The SubjectAccessReview's `name`, when the power is about one tier.
    pub fn name(&self) -> Option<&str> {
        match self {
            Permission::SetTier(t) | Permission::Exempt(t) | Permission::TuneJobType(t) => Some(t),
            Permission::ChangeRules | Permission::AdminAccess => None,
        }
    }

    /// The question the authorizer answers for this power.
    pub fn question(&self) -> Question {
        Question {
            group: API_GROUP,
            resource: self.resource(),
            verb: self.verb(),
            name: self.name().map(str::to_string),
        }
    }

    /// The questions only a wildcard answers yes: [`Self::question`] with its verb, its resource, then its
    /// group replaced by a name no role names (in the order asked: the cheapest to rule out first is any).
    pub fn wildcard_probes(&self) -> [(Wildcard, Question); 3] {
        let q = self.question();
        [
            (
                Wildcard::Verb,
                Question {
                    verb: NO_ROLE_NAMES_THIS,
                    ..q.clone()
                },
            ),
            (
                Wildcard::Resource,
                Question {
                    resource: NO_ROLE_NAMES_THIS,
                    ..q.clone()
                },
            ),
            (
                Wildcard::Group,
                Question {
                    group: PROBE_GROUP,
                    ..q
                },
            ),
        ]
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
            (Some("use"), "adminaccess", None, 2) => Permission::AdminAccess,
            _ => {
                return Err(format!(
                    "`{text}` is no power of {API_GROUP}: `exempt tiers/TIER`, `update tiers/TIER`, \
                     `update policies`, `update jobtypes/JOB_TYPE` or `use adminaccess`"
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
    /// Granted only through a `*` (not held): kept so that a message can say why.
    through_wildcard: BTreeMap<Permission, Wildcard>,
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
            through_wildcard: BTreeMap::new(),
        }
    }

    /// From the authorizer's [`Answer`] to each power asked.
    pub fn from_answers(answers: impl IntoIterator<Item = (Permission, Answer)>) -> Self {
        let mut g = Self::none();
        for (p, a) in answers {
            match a {
                Answer::Held => {
                    g.held.insert(p);
                }
                Answer::ThroughWildcard(w) => {
                    g.through_wildcard.insert(p, w);
                }
                Answer::NotHeld => {}
            }
        }
        g
    }

    pub fn allows(&self, p: &Permission) -> bool {
        self.held.contains(p)
    }

    /// RBAC granted `p` only through a `*` in this place of a rule (so it is not held).
    pub fn through_wildcard(&self, p: &Permission) -> Option<Wildcard> {
        self.through_wildcard.get(p).copied()
    }

    /// Why `p` is missing, for a message: empty unless only a wildcard granted it.
    pub fn why_missing(&self, p: &Permission) -> String {
        match self.through_wildcard(p) {
            Some(w) => format!(
                " (RBAC grants it to this requester only through a rule with {} [\"*\"], which does not \
                 count: bind a role that names it)",
                w.field()
            ),
            None => String::new(),
        }
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

    /// Each probe differs from the power's question in one place only, by a name no role names; a power
    /// granted with a probe is held only by a superuser.
    #[test]
    fn a_power_granted_only_through_a_wildcard_is_not_held() {
        let p = Permission::SetTier("gold".into());
        let q = p.question();
        assert_eq!(
            (q.group, q.resource, q.verb, q.name.as_deref()),
            (API_GROUP, "tiers", "update", Some("gold"))
        );
        let probes = p.wildcard_probes();
        for (w, probe) in &probes {
            let differs: Vec<&str> = [
                (probe.group != q.group).then_some("apiGroups"),
                (probe.resource != q.resource).then_some("resources"),
                (probe.verb != q.verb).then_some("verbs"),
                (probe.name != q.name).then_some("name"),
            ]
            .into_iter()
            .flatten()
            .collect();
            assert_eq!(differs, [w.field()], "{w:?}");
        }
        assert_eq!(
            probes[2].1.group,
            format!("{NO_ROLE_NAMES_THIS}.{API_GROUP}")
        );
        assert_eq!(Answer::judge(false, true, None), Answer::NotHeld);
        assert_eq!(Answer::judge(true, false, None), Answer::Held);
        assert_eq!(
            Answer::judge(true, false, Some(Wildcard::Resource)),
            Answer::ThroughWildcard(Wildcard::Resource)
        );
        assert_eq!(
            Answer::judge(true, true, Some(Wildcard::Verb)),
            Answer::Held
        );
        assert!(is_superuser(&["system:authenticated", "system:masters"]));
        assert!(!is_superuser(&[
            "system:authenticated",
            "kubeadm:cluster-admins"
        ]));
        let g = Grants::from_answers([
            (p.clone(), Answer::ThroughWildcard(Wildcard::Verb)),
            (Permission::ChangeRules, Answer::Held),
            (Permission::Exempt("gold".into()), Answer::NotHeld),
        ]);
        assert!(!g.allows(&p) && g.allows(&Permission::ChangeRules));
        assert_eq!(g.through_wildcard(&p), Some(Wildcard::Verb));
        assert!(g.why_missing(&p).contains("verbs [\"*\"]"));
        assert_eq!(g.why_missing(&Permission::Exempt("gold".into())), "");
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
            ("use adminaccess", Permission::AdminAccess),
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
