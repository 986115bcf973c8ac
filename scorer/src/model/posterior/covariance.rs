//! How two classes' estimates of one job type move together ([`Posterior::covariance`]): what a run on
//! one class teaches about its gap to another (see [`crate::model::value`]).
use super::{JobRef, Posterior, log_var_of};
use crate::policy::Policy;

impl Posterior {
    /// The covariance of the 1-GPU log-runtime estimates of `job` on classes `s` and `e`: how much the two
    /// are not known independently (the job's size, its exponent and the shared class parameters move
    /// both). Equals the estimate's variance when `s == e`.
    pub fn covariance(&self, policy: &Policy, job: JobRef, s: usize, e: usize) -> f64 {
        if s == e {
            return self.estimate(policy, job, s).log_var;
        }
        let xs = policy.classes[s].relative_throughput.ln();
        let xe = policy.classes[e].relative_throughput.ln();
        let (w, family, block, shrink) = match job {
            JobRef::Known(j) => (
                self.workload_of[j],
                self.family_of[j],
                Some(&self.blocks[j]),
                self.shrink[[j, s]] * self.shrink[[j, e]],
            ),
            JobRef::Unknown(w) => (w.index(), None, None, 1.0),
        };
        let (ps, pe) = (
            self.shared.features(w, family, s, xs),
            self.shared.features(w, family, e, xe),
        );
        let mut cov = 0.0;
        for &(i, fi) in ps.iter() {
            for &(k, fk) in pe.iter() {
                cov += fi * fk * self.cov[[i, k]];
            }
        }
        let (zs, ze) = ([1.0, -xs], [1.0, -xe]);
        match (job, block) {
            (JobRef::Known(_), Some(b)) => {
                let n = self.shared.len();
                for r in 0..2 {
                    for (q, zq) in ze.iter().enumerate() {
                        cov += zs[r] * zq * b.cov[r][q];
                    }
                    if !b.cross.is_empty() {
                        let dot = |phi: &[(usize, f64)]| -> f64 {
                            phi.iter().map(|&(i, f)| f * b.cross[r * n + i]).sum()
                        };
                        cov += zs[r] * dot(&pe) + ze[r] * dot(&ps);
                    }
                }
            }
            (JobRef::Known(_), None) => {}
            (JobRef::Unknown(wc), _) => {
                let l = &policy.learning;
                let profile = policy.workload_profile(wc);
                cov += log_var_of(profile.relative_stddev) + xs * xe * l.exponent_stddev.powi(2);
            }
        }
        cov * shrink
    }
}

#[cfg(test)]
mod tests {
    use super::super::UnlistedJobTypes;
    use super::*;
    use crate::model::estimate::RuntimeTable;
    use crate::policy::{WorkloadClass, embedded_default};

    #[test]
    fn a_new_job_types_size_moves_every_class_alike() {
        let policy = embedded_default().unwrap();
        let class = |n: &str| policy.class_index(n).unwrap();
        let (h100, mi300x, l4) = (class("H100-80GB"), class("MI300X-192GB"), class("L4-24GB"));
        let post = Posterior::compute(
            &policy,
            &RuntimeTable::default(),
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        let var = |who, c| post.estimate(&policy, who, c).log_var;
        for who in [
            JobRef::Known(policy.job_index("train-bert").unwrap()),
            JobRef::Unknown(WorkloadClass::Batch),
        ] {
            for (s, e) in [(h100, mi300x), (h100, l4)] {
                let c = post.covariance(&policy, who, s, e);
                // A covariance: symmetric, |c| ≤ √(v_s·v_e).
                assert!((c - post.covariance(&policy, who, e, s)).abs() < 1e-12);
                assert!(c * c < var(who, s) * var(who, e), "{who:?}: {c}");
            }
            assert_eq!(post.covariance(&policy, who, h100, h100), var(who, h100));
            // Two classes of about the same throughput share a large part of what is unknown (the size,
            // the exponent), which a run on either teaches without telling which of them is cheaper.
            let c = post.covariance(&policy, who, h100, mi300x);
            assert!(
                c > 0.3 * var(who, h100).min(var(who, mi300x)),
                "{who:?}: {c}"
            );
        }
        // A job type whose size is known to ±30 % but whose gain from a faster class is not: on classes
        // far apart in throughput the exponent moves them in opposite directions.
        let bert = JobRef::Known(policy.job_index("train-bert").unwrap());
        assert!(post.covariance(&policy, bert, h100, l4) < 0.0);
        // An unlisted job type's size (σ 0.5) outweighs that.
        assert!(post.covariance(&policy, JobRef::Unknown(WorkloadClass::Batch), h100, l4) > 0.0);
    }

    #[test]
    fn runs_on_both_classes_leave_little_shared() {
        let policy = embedded_default().unwrap();
        let (h100, l4) = (
            policy.class_index("H100-80GB").unwrap(),
            policy.class_index("L4-24GB").unwrap(),
        );
        let bert = JobRef::Known(policy.job_index("train-bert").unwrap());
        let mut t = RuntimeTable::default();
        for _ in 0..20 {
            t.record("train-bert", "H100-80GB", 7000f64.ln(), 1);
            t.record("train-bert", "L4-24GB", 40000f64.ln(), 1);
        }
        let post = Posterior::compute(
            &policy,
            &t,
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        let c = post.covariance(&policy, bert, h100, l4);
        let v = post.estimate(&policy, bert, h100).log_var;
        assert!(c.abs() < 0.05 * v, "{c} against {v}");
    }
}
