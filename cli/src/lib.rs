//! `gpu-admission`, offline: what the webhooks would answer for manifests under a policy, with no cluster and
//! no network. Core's decision functions and the scorer's model run in process (see [`engine`]):
//!
//! - [`load`]: manifests (multi-document YAML/JSON, Lists, AdmissionReviews, Namespaces' tier labels);
//! - [`review`]: the AdmissionReviews the apiserver would send (the object, the Pods of its templates);
//! - [`engine`]: `/mutate-pod` and `/validate-pod` on those reviews; [`evaluate`]: one object through both;
//! - [`report`]: `check`'s table and JSON; [`testfile`]: `test DIR`; [`policy`], [`diff`]: `policy validate`
//!   and `policy diff`.

pub mod diff;
pub mod engine;
pub mod evaluate;
pub mod floor;
pub mod load;
pub mod policy;
pub mod quota;
pub mod report;
pub mod review;
pub mod testfile;

use std::path::PathBuf;

use anyhow::Context;
use gpu_admission_core::authority::Permission;
use scorer::model::Learned;

use engine::{Engine, Options};
use evaluate::Evaluation;
use load::{Input, Tiers};
use report::Counts;
use review::User;

/// What a run decides with, besides the manifests.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The policy file or ConfigMap; `None`: the embedded default policy.
    pub policy: Option<PathBuf>,
    pub policy_key: Option<String>,
    /// `Enforce`, `Warn` or `Audit` instead of the policy's own mode.
    pub mode: Option<String>,
    /// A scorer learned-state snapshot (the scorer's `--state` file) to decide with.
    pub state: Option<PathBuf>,
    pub tiers: Tiers,
    pub requester: User,
    pub no_kube: bool,
    pub default_namespace: String,
    /// A GPU quota usage snapshot (`gpu_admission_core::quota::Usage`, YAML or JSON) the Pods are counted on.
    pub usage: Option<PathBuf>,
}

/// What RBAC grants the requester, as `--grant` (and a test file's `grants:`) state it offline: each a power
/// of gpu-admission.io as `kubectl auth can-i` spells it (`exempt tiers/gold`, [`Permission::parse`]).
pub fn parse_grants(grants: &[String]) -> anyhow::Result<Vec<Permission>> {
    grants
        .iter()
        .map(|g| Permission::parse(g).map_err(|e| anyhow::anyhow!("grant {g:?}: {e}")))
        .collect()
}

/// The embedded default policy, no tiers given, the default requester, nothing else.
impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            policy: None,
            policy_key: None,
            mode: None,
            state: None,
            tiers: Tiers::default(),
            requester: User::default_requester(),
            no_kube: false,
            default_namespace: "default".into(),
            usage: None,
        }
    }
}

/// The webhooks over one policy, ready to check manifests.
pub struct Run {
    pub engine: Engine,
}

/// What `check` found.
#[derive(Debug)]
pub struct Checked {
    pub evaluations: Vec<Evaluation>,
    pub counts: Counts,
    /// What `check` warns about on stderr: a tier that names no tier of the policy (and which applies
    /// instead), an object or quantity the webhooks cannot decide.
    pub warnings: Vec<String>,
}

impl Run {
    pub fn new(settings: &RunSettings) -> anyhow::Result<Self> {
        Self::with_policy(settings, |_| {})
    }

    /// Like [`Run::new`], with the parsed policy adjusted by `adjust` first.
    pub fn with_policy(
        settings: &RunSettings,
        adjust: impl FnOnce(&mut scorer::policy::Policy),
    ) -> anyhow::Result<Self> {
        let text = policy::read(settings.policy.as_deref(), settings.policy_key.as_deref())?;
        let mut parsed = policy::parse(&text)?;
        if let Some(mode) = &settings.mode {
            parsed.enforcement.mode = policy::parse_mode(mode)?;
        }
        adjust(&mut parsed);
        let learned = match &settings.state {
            Some(path) => scorer::state::load(path)
                .with_context(|| format!("reading the learned state {}", path.display()))?
                .with_context(|| format!("{}: no such learned-state file", path.display()))?,
            None => Learned::default(),
        };
        let options = Options {
            tiers: settings.tiers.clone(),
            requester: settings.requester.clone(),
            no_kube: settings.no_kube,
            default_namespace: settings.default_namespace.clone(),
            decided_at: None,
            claims: Default::default(),
            exceptions: Vec::new(),
            usage: match &settings.usage {
                Some(path) => Some(
                    serde_yaml::from_str(
                        &std::fs::read_to_string(path)
                            .with_context(|| format!("reading {}", path.display()))?,
                    )
                    .with_context(|| format!("{}: not a quota usage snapshot", path.display()))?,
                ),
                None => None,
            },
        };
        Ok(Run {
            engine: Engine::new(parsed, learned, options),
        })
    }

    /// Every Pod and workload of `paths` through the webhooks, in input order.
    pub fn check(self, paths: &[PathBuf]) -> anyhow::Result<Checked> {
        let inputs = load::inputs(&load::files(paths)?)?;
        Ok(self.check_inputs(&inputs))
    }

    /// [`Run::check`] on inputs already read (the Namespaces among them give their tiers first).
    pub fn check_inputs(mut self, inputs: &[Input]) -> Checked {
        self.check_in_place(inputs)
    }

    /// [`Run::check_inputs`] without giving up the run: the tiers and claims `inputs` name are forgotten after,
    /// so the next inputs are checked as if alone (a quota usage snapshot keeps what they added).
    pub fn check_alone(&mut self, inputs: &[Input]) -> Checked {
        let options = self.engine.options.clone();
        let checked = self.check_in_place(inputs);
        self.engine.options = options;
        self.engine.refresh_floor();
        checked
    }

    fn check_in_place(&mut self, inputs: &[Input]) -> Checked {
        let tier_label = self.engine.policy().tier_label().to_string();
        self.engine.options.tiers.learn(inputs, &tier_label);
        let default_namespace = self.engine.options.default_namespace.clone();
        self.engine.options.claims.learn(inputs, &default_namespace);
        crate::engine::learn_exceptions(
            &mut self.engine.options.exceptions,
            inputs,
            &default_namespace,
        );
        self.engine.refresh_floor();
        let evaluations: Vec<Evaluation> = inputs
            .iter()
            .filter_map(|i| evaluate::evaluate(&self.engine, i))
            .collect();
        let ignored = inputs
            .iter()
            .filter(|i| matches!(i, Input::Ignored(_)))
            .count();
        let counts = Counts::of(&evaluations, ignored);
        let mut warnings = self.engine.options.tiers.unknown(self.engine.policy());
        for e in &evaluations {
            for u in &e.undecidable {
                warnings.push(format!(
                    "{} ({}): undecidable, /validate-pod denies it in Enforce: {u}",
                    e.object, e.source
                ));
            }
            for f in e.floor_answers() {
                let warning = match f {
                    floor::FloorAnswer::Undecidable(why) => {
                        format!("{} ({}): the floor alone: {why}", e.object, e.source)
                    }
                    _ => continue,
                };
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
        }
        Checked {
            evaluations,
            counts,
            warnings,
        }
    }
}
