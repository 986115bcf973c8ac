//! Learning per tenant, with bounded influence.
//!
//! Who a job type's runs are learned for ([`Ownership`]): a job type the policy lists **with an owner**
//! (`jobTypes[].owner`) is learned from its owner's runs; a job type it lists **without one** is learned
//! **per tenant**: every tenant's runs under its own name, so no tenant ever reads another's cells and a
//! tenant without runs reads the prior and the shared parameters (no first reporter can squat it); a job
//! type it does not list is owned by the tenant (namespace) that reported it first. A run of a tenant
//! that does not own the job type is learned under that tenant's own name for it,
//! `<job type>@<namespace>` (no label value can contain `@`, so no Pod can ask for it): a job type of its
//! own, unlisted (under the budget of [`super::unlisted`]), with the listed job type's prior and workload
//! class when there is one. So:
//! - a tenant's runs never enter another tenant's cells. Its own name for a job type another tenant owns
//!   teaches nothing shared (fitted given the shared parameters, it teaches its own size, exponent and cells
//!   only, and its co-located runs no class's contention factor): 120 runs of 2 s or of 10⁷ s under the
//!   owner's job type leave the owner's estimates as they were (tested below);
//! - its own name for a listed job type nobody owns teaches the shared parameters as one job type, each
//!   cell taken within [`BOUND`] (2x) of the catalog prior (`posterior::solve`): what every tenant's runs of
//!   it teach the classes is still shared, and what one tenant moves there is bounded by the bound, not
//!   by its runs (tested below: a first-reporter attack beside the volume attack);
//! - a tenant with runs of its own reads its own estimates ([`Posterior::who`](super::posterior::Posterior::who)), shrunk towards the shared
//!   parameters like any job type's; before that it reads the owner's, or for a job type nobody owns the
//!   prior and the shared parameters (reading is not steering);
//! - a job type the policy does not list joins the family its name matches (`jobTypes[].family`) only
//!   when its owner owns one of the family's listed job types: a tenant's own job type named to match
//!   another tenant's family teaches that family nothing (`posterior::tenancy::Members`);
//! - the job types a tenant invents (not listed, of no family) weigh in the shared parameters together as
//!   many job types as the listed ones it owns, at least one (`posterior::tenancy::invented_weights`): however many
//!   a tenant invents, they move the others no more than that many would.
//!
//! A tenant's co-located runs are kept per direction unless both job types are its own (its names for
//! listed job types nobody owns, or job types it owns), for its own avoid-lists only
//! ([`super::interference`]).
//!
//! Runs reported without a namespace are learned under the plain name, as before. A cluster of one
//! tenant learns its listed job types under its own names, their shared lesson within the bound. At most one owner per job type the state holds is kept: a job type's
//! entry goes when the job type is forgotten.
use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::Policy;

/// ln of how far from the catalog prior a cell of a tenant's own name for a listed job type nobody owns
/// is taken when it teaches the shared parameters (2x): the others read what every tenant's runs teach
/// the classes, but one tenant's runs move it by a bounded amount however many or wild they are.
pub const BOUND: f64 = std::f64::consts::LN_2;

/// Between a job type and the namespace of a tenant that does not own it.
pub const SEPARATOR: char = '@';

/// Who a job type's runs are learned for: what the policy says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership<'p> {
    /// The policy names its owner (`jobTypes[].owner`): the owner's runs are the job type's, every other
    /// tenant's are learned under its own name.
    Declared(&'p str),
    /// Listed without an owner: every tenant's runs are learned under its own name, so no tenant's runs
    /// are ever another tenant's cells (no first reporter can squat it).
    PerTenant,
    /// Not listed (a job type a tenant invented): the first tenant to report it owns it.
    FirstReporter,
}

/// What the policy says of who owns `job_type` ([`Ownership`]).
pub fn ownership<'p>(policy: &'p Policy, job_type: &str) -> Ownership<'p> {
    match policy.job_index(job_type) {
        Some(j) => policy.job_types[j]
            .owner
            .as_deref()
            .map_or(Ownership::PerTenant, Ownership::Declared),
        None => Ownership::FirstReporter,
    }
}

/// The owner (namespace) of each job type learned from runs that carried one: a declared owner, or the
/// first reporter of a job type the policy does not list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Owners(pub BTreeMap<String, String>);

impl Owners {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name a run of `job_type` by `tenant` is learned under: the job type itself when `tenant` owns it
    /// (the owner the policy declares, or for an unlisted job type the first to report it), says none, or
    /// the name already is a tenant's; else `job_type@tenant` (always, for a listed job type without a
    /// declared owner). A declared owner replaces the one recorded (runs learned before the policy named it
    /// stay learned).
    pub fn learned_name<'a>(
        &mut self,
        job_type: &'a str,
        tenant: Option<&str>,
        ownership: Ownership<'_>,
    ) -> Cow<'a, str> {
        let Some(tenant) = tenant.filter(|t| !t.is_empty()) else {
            return Cow::Borrowed(job_type);
        };
        if job_type.contains(SEPARATOR) {
            return Cow::Borrowed(job_type);
        }
        let owner: &str = match ownership {
            Ownership::PerTenant => return Cow::Owned(format!("{job_type}{SEPARATOR}{tenant}")),
            Ownership::Declared(d) => {
                if self.0.get(job_type).is_none_or(|o| o != d) {
                    self.0.insert(job_type.to_string(), d.to_string());
                }
                d
            }
            Ownership::FirstReporter => self
                .0
                .entry(job_type.to_string())
                .or_insert_with(|| tenant.to_string()),
        };
        if owner == tenant {
            Cow::Borrowed(job_type)
        } else {
            Cow::Owned(format!("{job_type}{SEPARATOR}{tenant}"))
        }
    }

    /// The name a run of `job_type` by `tenant` would be learned under now ([`Owners::learned_name`] without
    /// taking ownership: an unlisted job type nobody owns yet is its own name).
    pub fn name_for<'a>(
        &self,
        job_type: &'a str,
        tenant: Option<&str>,
        ownership: Ownership<'_>,
    ) -> Cow<'a, str> {
        let tenant = tenant.filter(|t| !t.is_empty());
        if job_type.contains(SEPARATOR) {
            return Cow::Borrowed(job_type);
        }
        let owner = match ownership {
            Ownership::Declared(d) => Some(d),
            Ownership::PerTenant => None,
            Ownership::FirstReporter => self.0.get(job_type).map(String::as_str),
        };
        match (tenant, ownership, owner) {
            (Some(t), Ownership::PerTenant, _) => Cow::Owned(format!("{job_type}{SEPARATOR}{t}")),
            (Some(t), _, Some(owner)) if owner != t => {
                Cow::Owned(format!("{job_type}{SEPARATOR}{t}"))
            }
            _ => Cow::Borrowed(job_type),
        }
    }

    /// Whether `a` and `b` (learned names) have different owners, both known: their pair is then learned per
    /// direction ([`super::interference`]). A tenant's own name for another's job type is that tenant's.
    pub fn differ(&self, a: &str, b: &str) -> bool {
        matches!((self.tenant_of(a), self.tenant_of(b)), (Some(x), Some(y)) if x != y)
    }

    /// The tenant a learned name's runs come from: its owner, or the tenant of a tenant's own name.
    pub fn tenant_of<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        match name.split_once(SEPARATOR) {
            Some((_, tenant)) => Some(tenant),
            None => self.0.get(name).map(String::as_str),
        }
    }

    /// Forgets a job type (evicted) and its owner.
    pub fn forget(&mut self, job_type: &str) {
        self.0.remove(job_type);
    }
}

/// The name under which `tenant` learns the neighbour `other` of its runs, and reads it: its own name for
/// a listed job type nobody owns ([`Ownership::PerTenant`]), else `other`. So a tenant's pair of two such
/// job types is its own, learned from either side and read by it alone.
pub fn neighbour_of<'a>(policy: &Policy, tenant: Option<&str>, other: &'a str) -> Cow<'a, str> {
    match tenant.filter(|t| !t.is_empty()) {
        Some(t)
            if !other.contains(SEPARATOR) && ownership(policy, other) == Ownership::PerTenant =>
        {
            Cow::Owned(format!("{other}{SEPARATOR}{t}"))
        }
        _ => Cow::Borrowed(other),
    }
}

/// The tenant of a tenant's own name (`train@team-b` → `team-b`).
pub fn tenant_in(name: &str) -> Option<&str> {
    name.split_once(SEPARATOR).map(|(_, t)| t)
}

/// The job type a learned name stands for: `train@team-b` → `train`.
pub fn base(name: &str) -> &str {
    name.split_once(SEPARATOR).map_or(name, |(b, _)| b)
}

/// Whether a learned name is a tenant's own name for another tenant's job type (never on an avoid-list:
/// no Pod carries it).
pub fn is_tenant_name(name: &str) -> bool {
    name.contains(SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::super::{JobRequest, Learned, Observation, learn, observe, score};
    use super::*;
    use crate::model::posterior::{JobRef, Posterior};
    use crate::policy::{Policy, Vendor, embedded_default};

    fn run(tenant: &str, job_type: &str, class: &str, runtime: f64, id: String) -> Observation {
        Observation {
            id: Some(id),
            job_type: job_type.into(),
            gpu_class: class.into(),
            gpu_count: 1,
            runtime_seconds: runtime,
            tenant: Some(tenant.into()),
            ..Observation::default()
        }
    }

    /// Who `train-llama` is for `tenant`'s requests.
    fn llama_of(p: &Policy, post: &Posterior, tenant: &str) -> JobRef {
        post.who(
            "train-llama",
            Some(tenant),
            post.job(p, "train-llama", crate::policy::WorkloadClass::Training),
        )
    }

    /// Gold's 15 real runs of `train-llama` (the numbers).
    fn gold(p: &Policy) -> Learned {
        let mut l = Learned::default();
        for i in 0..15 {
            let (class, t) = [
                ("H100-80GB", 30_000.0),
                ("A100-80GB", 60_000.0),
                ("L4-24GB", 400_000.0),
            ][i % 3];
            let t = t * (1.0 + 0.05 * ((i * 7) % 5) as f64 - 0.1);
            learn(
                p,
                &mut l,
                &run("llm-prod", "train-llama", class, t, format!("g{i}")),
            );
        }
        l
    }

    /// Gold's decision and every class's estimate (seconds) for its next `train-llama`.
    fn decide(p: &Policy, l: &Learned) -> (Option<usize>, Vec<f64>) {
        let mut l = l.clone();
        l.refresh(p);
        let req = JobRequest {
            tier: "gold".into(),
            job_type: "train-llama".into(),
            gpu_count: 1,
            vendor: Some(Vendor::Nvidia),
            memory_gib: Some(20.0),
            tenant: Some("llm-prod".into()),
            ..JobRequest::default()
        };
        let d = score(p, &l, &req, false, 7);
        let mut means = vec![0.0; p.classes.len()];
        for c in &d.candidates {
            means[c.class] = c.runtime.mean;
        }
        (d.accepted().first().map(|c| c.class), means)
    }

    #[test]
    fn another_tenants_runs_under_a_job_type_leave_its_owners_decision_and_estimates_within_2x() {
        let p = embedded_default().unwrap();
        let before = gold(&p);
        let (choice, estimates) = decide(&p, &before);
        assert_eq!(choice, p.class_index("H100-80GB"));
        // The attack, and others like it: 120 runs of 2 s (or of 10⁷ s) on one class, some of
        // them claiming neighbours.
        for (class, runtime) in [
            ("L4-24GB", 2.0),
            ("L40S-48GB", 2.0),
            ("H100-80GB", 1e7),
            ("A100-40GB", 2.0),
        ] {
            let mut l = before.clone();
            for i in 0..120 {
                let mut o = run("students", "train-llama", class, runtime, format!("b{i}"));
                if i % 3 == 0 {
                    o.colocated_job_types = vec!["inference-llm".into()];
                }
                // On 1 and 8 GPUs in the same time (no scaling at all): it teaches its own name's exponent only.
                o.gpu_count = [1, 8][i % 2];
                learn(&p, &mut l, &o);
            }
            // Bronze's runs are learned, under its own name.
            assert_eq!(l.runtimes.get("train-llama@students", class).count, 120);
            assert_ne!(l.runtimes.sizes("train-llama@students"), Default::default());
            assert_eq!(
                l.runtimes.sizes("train-llama"),
                before.runtimes.sizes("train-llama")
            );
            assert_eq!(
                l.runtimes.get("train-llama", class).count,
                before.runtimes.get("train-llama", class).count
            );
            let (after, moved) = decide(&p, &l);
            assert_eq!(
                after, choice,
                "{class} at {runtime} s moved gold's decision"
            );
            for (c, (a, b)) in moved.iter().zip(&estimates).enumerate() {
                let ratio = a / b;
                assert!(
                    (0.5..=2.0).contains(&ratio),
                    "{class} at {runtime} s: gold's {} estimate moved {ratio:.3}x",
                    p.classes[c].name
                );
            }
            // Fake co-location puts nothing on gold's avoid-lists beyond what gold's own runs say.
            assert_eq!(
                l.avoid_list(&p, "train-llama"),
                before.avoid_list(&p, "train-llama")
            );
            assert_eq!(
                l.avoid_list(&p, "inference-llm"),
                before.avoid_list(&p, "inference-llm")
            );
            // The students read their own estimate.
            let mut mine = l.clone();
            let post = mine.refresh(&p);
            let who = llama_of(&p, &post, "students");
            let own = post
                .estimate(&p, who, p.class_index(class).unwrap())
                .seconds()
                .mean;
            assert!(
                (own / runtime).ln().abs() < 1.0,
                "{class}: students read {own} s for {runtime} s"
            );
        }
    }

    #[test]
    fn another_tenants_runs_neither_make_nor_unmake_a_straggled_reading_of_the_owners() {
        let p = embedded_default().unwrap();
        let (a100, h100, l4) = (
            p.class_index("A100-80GB").unwrap(),
            p.class_index("H100-80GB").unwrap(),
            p.class_index("L4-24GB").unwrap(),
        );
        // The owner's runs: many on A100, one 3.5x slow on H100 (a possible straggler), none on L4.
        let mut before = Learned::default();
        let owners = (0..40)
            .map(|i| ("A100-80GB", 60_000.0, format!("g{i}")))
            .chain([("H100-80GB", 105_000.0, "g-h".to_string())]);
        for (class, runtime, id) in owners {
            learn(
                &p,
                &mut before,
                &run("llm-prod", "train-llama", class, runtime, id),
            );
        }
        let readings = |l: &Learned| {
            let mut l = l.clone();
            let post = l.refresh(&p);
            let owner = llama_of(&p, &post, "llm-prod");
            let students = llama_of(&p, &post, "students");
            let of = |who| [a100, h100, l4].map(|c| post.straggled(who, c));
            (of(owner), of(students))
        };
        let (owner_before, _) = readings(&before);
        assert!(
            owner_before[1].is_some(),
            "the owner's H100 run may have straggled"
        );
        assert!(owner_before[0].is_none() && owner_before[2].is_none());
        // Another tenant runs the job type fast on H100 (as if to confirm the class) and once, slowly,
        // on L4 (as if to cast doubt on it): learned under its own name, neither reaches the owner's.
        let students = |l: &mut Learned, class: &str, runtime: f64, id: String| {
            learn(&p, l, &run("students", "train-llama", class, runtime, id));
        };
        let mut after = before.clone();
        for i in 0..20 {
            students(&mut after, "H100-80GB", 20_000.0, format!("s{i}"));
        }
        let expected_on_l4 = {
            let mut l = after.clone();
            let post = l.refresh(&p);
            let who = llama_of(&p, &post, "students");
            post.estimate(&p, who, l4).log_mean.exp()
        };
        students(&mut after, "L4-24GB", 3.5 * expected_on_l4, "s-l4".into());
        let (owner_after, students) = readings(&after);
        // The owner's reading is made or unmade by its own runs only (the students' teach the shared
        // parameters it is read against a bounded amount: its weight may move a little).
        let held = |r: &[Option<crate::model::posterior::Straggled>; 3]| r.map(|s| s.is_some());
        assert_eq!(held(&owner_after), held(&owner_before));
        assert!(
            students[2].is_some(),
            "the students' own L4 run may have straggled"
        );
        assert!(students[1].is_none(), "twenty runs: no straggled reading");
    }

    #[test]
    fn another_tenants_fake_colocation_puts_nothing_on_the_owners_avoid_list() {
        let p = embedded_default().unwrap();
        let before = gold(&p);
        let mut l = before.clone();
        // The students' own job types: 12 of them (more than an avoid-list holds), each run alone, then
        // three times as long "next to" gold's train-llama.
        let noisy: Vec<String> = (0..12).map(|k| format!("noisy-{k:02}")).collect();
        let mut id = 0;
        for name in &noisy {
            for i in 0..40 {
                id += 1;
                let mut o = run("students", name, "L4-24GB", 1_000.0, format!("s{id}"));
                if i >= 10 {
                    o.runtime_seconds = 3_000.0;
                    o.colocated_job_types = vec!["train-llama".into()];
                }
                learn(&p, &mut l, &o);
            }
        }
        // Their own avoid-lists learn it (the evidence is theirs) ...
        assert!(
            l.avoid_list(&p, "noisy-00")
                .contains(&"train-llama".to_string()),
            "{:?}",
            l.avoid_list(&p, "noisy-00")
        );
        // ... gold's does not. Gold's decision stays, and its estimates (the students' invented job types
        // teach nothing shared).
        assert_eq!(
            l.avoid_list(&p, "train-llama"),
            before.avoid_list(&p, "train-llama")
        );
        let ((choice, moved), (was, estimates)) = (decide(&p, &l), decide(&p, &before));
        assert_eq!(choice, was);
        for (a, b) in moved.iter().zip(&estimates) {
            assert!((0.5..=2.0).contains(&(a / b)), "{a} against {b}");
        }
        // Unordered, only what the students read under their own names for train-llama.
        assert!(
            l.interference
                .pairs
                .iter()
                .flat_map(|(a, m)| m.keys().map(move |b| (a, b)))
                .all(|(a, b)| a == "train-llama@students" || b == "train-llama@students"),
            "{:?}",
            l.interference.pairs
        );
        // Within one tenant, a pair is learned from either side, as before.
        let mut one = Learned::default();
        for i in 0..40 {
            let mut o = run("team", "batch-etl", "L4-24GB", 1_000.0, format!("t{i}"));
            if i >= 10 {
                o.runtime_seconds = 3_000.0;
                o.colocated_job_types = vec!["notebook".into()];
            }
            learn(&p, &mut one, &o);
        }
        learn(
            &p,
            &mut one,
            &run("team", "notebook", "L4-24GB", 100.0, "n".into()),
        );
        // Both listed, nobody owns them: the pair is the team's own (its names for both), learned from
        // either side and read by the team alone.
        assert!(one.interference.directed.is_empty());
        assert_eq!(
            one.interference
                .get("batch-etl@team", "notebook@team")
                .count,
            30
        );
        for (job, other) in [
            ("batch-etl@team", "notebook"),
            ("notebook@team", "batch-etl"),
        ] {
            assert!(
                one.avoid_list(&p, job).contains(&other.to_string()),
                "{job}"
            );
        }
        assert_eq!(
            one.avoid_list(&p, "batch-etl"),
            Learned::default().avoid_list(&p, "batch-etl")
        );
    }

    #[test]
    fn a_tenants_own_job_type_and_its_name_for_a_listed_one_read_each_others_runs() {
        let p = embedded_default().unwrap();
        // The team invents `etl-custom` and runs the listed `notebook` (nobody owns it) next to it: only
        // `notebook`'s runs see the slowdown (3x), only `etl-custom`'s the other way round.
        let mut l = Learned::default();
        for i in 0..40 {
            let mut o = run("team", "etl-custom", "L4-24GB", 1_000.0, format!("e{i}"));
            o.workload_class = Some(crate::policy::WorkloadClass::Batch);
            learn(&p, &mut l, &o);
            let mut o = run("team", "notebook", "L4-24GB", 100.0, format!("n{i}"));
            if i >= 10 {
                o.runtime_seconds = 300.0;
                o.colocated_job_types = vec!["etl-custom".into()];
            }
            learn(&p, &mut l, &o);
        }
        // The invented job type reads the listed one by its plain name, and learns from its runs.
        assert!(
            l.avoid_list(&p, "etl-custom")
                .contains(&"notebook".to_string()),
            "{:?}",
            l.avoid_list(&p, "etl-custom")
        );
        assert!(
            l.avoid_list(&p, "notebook@team")
                .contains(&"etl-custom".to_string())
        );
        // Nobody else's reading moves: another tenant's notebook, and notebook read without one.
        let fresh = Learned::default();
        for job in ["notebook", "notebook@gold"] {
            assert_eq!(l.avoid_list(&p, job), fresh.avoid_list(&p, job), "{job}");
        }
    }

    #[test]
    fn an_implausibly_fast_run_is_weighed_down_a_plausible_one_is_not() {
        let p = embedded_default().unwrap();
        let before = gold(&p);
        let l4 = p.class_index("L4-24GB").unwrap();
        let estimate = |l: &Learned| decide(&p, l).1[l4];
        // Gold's own Pod of train-llama that exits after 2 s on L4 (estimated ~400,000 s).
        let mut l = before.clone();
        let learnt = observe(
            &p,
            &mut l,
            &run("llm-prod", "train-llama", "L4-24GB", 2.0, "x".into()),
        );
        assert!(learnt.implausible);
        let (was, now) = (estimate(&before), estimate(&l));
        // Learned at the bound (> 10x faster than the estimate), not at 2 s: one run of six moves the
        // estimate by a bounded step.
        assert!(now < was && now > was / 3.0, "{was} -> {now}");
        // A run 3x faster than the estimate (a prior wrong by a few times) is learned as it is.
        let mut m = before.clone();
        let t = was / 3.0;
        let learnt = observe(
            &p,
            &mut m,
            &run("llm-prod", "train-llama", "L4-24GB", t, "y".into()),
        );
        assert!(!learnt.implausible);
        assert_eq!(m.runtimes.get("train-llama@llm-prod", "L4-24GB").count, 6);
    }

    #[test]
    fn a_listed_job_type_is_learned_per_tenant_an_unlisted_one_by_its_first_reporter() {
        let mut o = Owners::default();
        let (listed, unlisted) = (Ownership::PerTenant, Ownership::FirstReporter);
        assert_eq!(o.learned_name("train", None, listed), "train");
        assert_eq!(o.learned_name("train", Some(""), listed), "train");
        // A listed job type without a declared owner: every tenant under its own name, nobody owns it.
        assert_eq!(o.learned_name("train", Some("gold"), listed), "train@gold");
        assert_eq!(
            o.learned_name("train", Some("bronze"), listed),
            "train@bronze"
        );
        assert!(o.is_empty());
        assert_eq!(o.name_for("train", Some("gold"), listed), "train@gold");
        // An unlisted one: the first reporter owns it.
        assert_eq!(o.learned_name("mine", Some("gold"), unlisted), "mine");
        assert_eq!(o.learned_name("mine", Some("gold"), unlisted), "mine");
        assert_eq!(
            o.learned_name("mine", Some("bronze"), unlisted),
            "mine@bronze"
        );
        assert_eq!(o.name_for("mine", Some("bronze"), unlisted), "mine@bronze");
        assert_eq!(
            o.learned_name("train@bronze", Some("x"), listed),
            "train@bronze"
        );
        assert_eq!(base("train@bronze"), "train");
        assert_eq!(base("train"), "train");
        assert!(is_tenant_name("train@bronze") && !is_tenant_name("train"));
        o.forget("mine");
        assert_eq!(o.learned_name("mine", Some("bronze"), unlisted), "mine");
    }

    #[test]
    fn the_owner_the_policy_names_owns_the_job_type_whoever_reports_first() {
        let text = crate::policy::DEFAULT_POLICY_YAML.replacen(
            "    defaultMemoryGiB: 40\n",
            "    defaultMemoryGiB: 40\n    owner: llm-prod\n",
            1,
        );
        let p = crate::policy::parse(&text, "p.yaml").unwrap();
        assert_eq!(
            ownership(&p, "train-llama"),
            Ownership::Declared("llm-prod")
        );
        assert_eq!(ownership(&p, "train-bert"), Ownership::PerTenant);
        assert_eq!(ownership(&p, "mine"), Ownership::FirstReporter);
        // The students report train-llama first: 2 s runs on L4, learned under their own name; llm-prod's
        // real runs are train-llama's.
        let owner = |l: &Learned| l.owners.0.get("train-llama").cloned();
        let prod = |p: &Policy, l: &mut Learned| {
            let o = run("llm-prod", "train-llama", "H100-80GB", 30_000.0, "g".into());
            learn(p, l, &o);
        };
        let mut l = Learned::default();
        for i in 0..20 {
            let o = run("students", "train-llama", "L4-24GB", 2.0, format!("s{i}"));
            learn(&p, &mut l, &o);
        }
        prod(&p, &mut l);
        assert_eq!(owner(&l).as_deref(), Some("llm-prod"));
        assert_eq!(l.runtimes.get("train-llama", "L4-24GB").count, 0);
        assert_eq!(l.runtimes.get("train-llama@students", "L4-24GB").count, 20);
        assert_eq!(l.runtimes.get("train-llama", "H100-80GB").count, 1);
        // Without the policy naming it, nobody owns it: each tenant learns under its own name.
        let d = embedded_default().unwrap();
        let mut m = Learned::default();
        let o = run("students", "train-llama", "L4-24GB", 2.0, "s".into());
        learn(&d, &mut m, &o);
        assert_eq!(owner(&m), None);
        assert_eq!(m.runtimes.get("train-llama@students", "L4-24GB").count, 1);
        // A policy that names the owner later gives it the job type's own name for the runs to come.
        prod(&p, &mut m);
        assert_eq!(owner(&m).as_deref(), Some("llm-prod"));
        assert_eq!(m.runtimes.get("train-llama", "H100-80GB").count, 1);
    }

    /// The first-reporter attack: a tenant runs a listed job type nobody has run yet, a few runs of 2-3 s on
    /// L4 (as bronze did), or many; the other tenants, who never ran it, read the prior and the shared
    /// parameters: their decision stays and their estimates move less than 2x. Then the owner-to-be runs it
    /// itself: its own runs are its estimate, the first reporter's are not.
    #[test]
    fn the_first_reporter_of_a_listed_job_type_does_not_become_what_others_read() {
        let p = embedded_default().unwrap();
        let empty = Learned::default();
        let (choice, estimates) = decide(&p, &empty);
        assert_eq!(choice, p.class_index("H100-80GB"));
        for (runs, class) in [(6, "L4-24GB"), (120, "L4-24GB"), (120, "H100-80GB")] {
            let mut l = empty.clone();
            for i in 0..runs {
                let t = 2.0 + (i % 2) as f64;
                learn(
                    &p,
                    &mut l,
                    &run("bronze", "train-llama", class, t, format!("b{i}")),
                );
            }
            assert!(l.owners.is_empty(), "nobody owns a listed job type");
            assert_eq!(l.runtimes.get("train-llama@bronze", class).count, runs);
            let (after, moved) = decide(&p, &l);
            assert_eq!(
                after, choice,
                "{runs} runs on {class} moved gold's decision"
            );
            for (c, (a, b)) in moved.iter().zip(&estimates).enumerate() {
                assert!(
                    (0.5..=2.0).contains(&(a / b)),
                    "{runs} runs on {class}: gold's {} estimate moved {:.3}x",
                    p.classes[c].name,
                    a / b
                );
            }
            // Bronze reads its own runs.
            let post = l.refresh(&p);
            let who = llama_of(&p, &post, "bronze");
            let c = p.class_index(class).unwrap();
            let own = post.estimate(&p, who, c).seconds().mean;
            assert!(own < estimates[c] / 10.0, "bronze reads {own} s on {class}");
            // Gold's own runs then are gold's estimate, bronze's stay bronze's.
            let mut g = l.clone();
            for i in 0..6 {
                let o = run(
                    "llm-prod",
                    "train-llama",
                    "H100-80GB",
                    30_000.0,
                    format!("g{i}"),
                );
                learn(&p, &mut g, &o);
            }
            assert_eq!(g.runtimes.get("train-llama@llm-prod", "H100-80GB").count, 6);
            let post = g.refresh(&p);
            let gold = llama_of(&p, &post, "llm-prod");
            let h100 = p.class_index("H100-80GB").unwrap();
            let e = post.estimate(&p, gold, h100).seconds().mean;
            assert!((e / 30_000.0).ln().abs() < 0.3, "gold reads {e} s on H100");
        }
    }

    /// The bound is per tenant, not per run: a tenant's runs of every listed job type, however many, move
    /// another tenant's estimates by no more than a few of them do, and less than 2x.
    #[test]
    fn what_one_tenant_moves_in_anothers_estimates_does_not_grow_with_its_runs() {
        let p = embedded_default().unwrap();
        let (_, estimates) = decide(&p, &Learned::default());
        let l4 = p.class_index("L4-24GB").unwrap();
        let attack = |runs: usize| {
            let mut l = Learned::default();
            for j in &p.job_types {
                if j.name == "train-llama" {
                    continue;
                }
                for i in 0..runs {
                    let o = run("bronze", &j.name, "L4-24GB", 2.0, format!("{}-{i}", j.name));
                    learn(&p, &mut l, &o);
                }
            }
            decide(&p, &l).1[l4] / estimates[l4]
        };
        let (few, many) = (attack(3), attack(300));
        eprintln!("gold's L4 estimate: {few:.3}x after 3 runs of each, {many:.3}x after 300");
        assert!((0.5..=2.0).contains(&many), "{many}");
        assert!(many >= few * 0.8, "{few} then {many}");
    }

    /// A tenant's invented job types (not listed, of no family) weigh in the shared offsets together as
    /// many job types as the listed ones it owns, at least one: however many it invents, they move the
    /// others no more than that.
    #[test]
    fn invented_job_types_weigh_as_the_listed_ones_a_tenant_owns() {
        let p = embedded_default().unwrap();
        let before = gold(&p);
        let l4 = p.class_index("L4-24GB").unwrap();
        // `students` run `n` job types of their own, or the listed `finetune-llm` (which they then own), 6
        // times on H100 as the catalog says and 6 times `factor`x slower than it says on L4.
        let after = |names: &[String], factor: f64| {
            let mut l = before.clone();
            for name in names {
                for i in 0..6 {
                    let id = |c: &str| format!("{name}-{c}-{i}");
                    learn(
                        &p,
                        &mut l,
                        &run("students", name, "H100-80GB", 30_000.0, id("h")),
                    );
                    let slow = 30_000.0 / 0.3 * factor;
                    learn(&p, &mut l, &run("students", name, "L4-24GB", slow, id("l")));
                }
            }
            l
        };
        // Gold's train-llama (its own runs on L4) and inference-llm (never run: it reads the shared
        // offsets): how many times slower on L4.
        let moved = |l: &Learned| {
            let unrun = |l: &Learned| {
                let post = l.posterior(&p);
                let who = post.job(&p, "inference-llm", crate::policy::WorkloadClass::Inference);
                post.estimate(&p, who, l4).log_mean
            };
            let (was, now) = (decide(&p, &before), decide(&p, l));
            assert_eq!(was.0, now.0, "gold's decision moved");
            (now.1[l4] / was.1[l4], (unrun(l) - unrun(&before)).exp())
        };
        let invented: Vec<String> = (0..200).map(|k| format!("invented-{k:03}")).collect();
        for factor in [10.0, 100.0] {
            // 200 invented job types weigh as one (the students own no listed job type): they move gold no
            // more than a single one of them does.
            let (own, unrun) = moved(&after(&invented, factor));
            let (_, one) = moved(&after(&invented[..1], factor));
            eprintln!("{factor}x: train-llama {own}, inference-llm {unrun} (one invented: {one})");
            assert!(own < 1.01, "{own}");
            assert!(unrun > 1.0 && unrun < one * 1.01, "{unrun} against {one}");
        }
        // A listed job type the students reported first is learned under their own name, and teaches the
        // shared offsets within the bound (its cells taken within 2x of the catalog).
        let (own, unrun) = moved(&after(&["finetune-llm".to_string()], 10.0));
        assert!(own < 1.05, "{own}");
        assert!(unrun > 1.001 && unrun < 2.0, "{unrun}");
    }
}
