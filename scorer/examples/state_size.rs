//! The learned state's size as observations grow: `cargo run --release -p scorer --example
//! state_size`. 1 000 000 observations over 5 000 job types (the default policy's 10, the rest unlisted,
//! each seen in turns so that the budget of unlisted job types keeps evicting), 2 % of the runs next to
//! a listed job type (so the pair table fills to its bound), every class; prints the exported snapshot's size (gzip JSON, what `ExportState` sends
//! and the observer stores) at each step.
use scorer::model::{Learned, Observation, learn};
use scorer::policy::embedded_default;

fn main() {
    let policy = embedded_default().expect("the embedded policy");
    let mut learned = Learned::default();
    let classes: Vec<String> = policy.classes.iter().map(|c| c.name.clone()).collect();
    let listed: Vec<String> = policy.job_types.iter().map(|j| j.name.clone()).collect();
    let job = |i: u64| -> String {
        let k = (i.wrapping_mul(2_654_435_761) >> 7) % 5_000;
        match listed.get(k as usize) {
            Some(n) => n.clone(),
            None => format!("team-job-{k}"),
        }
    };
    let checkpoints = [
        1_000u64, 10_000, 30_000, 100_000, 200_000, 500_000, 1_000_000,
    ];
    println!("observations  job types kept  pairs  ids  snapshot bytes");
    let mut i = 0u64;
    for &at in &checkpoints {
        while i < at {
            let colocated = if i.is_multiple_of(50) {
                vec![listed[(i / 50) as usize % listed.len()].clone()]
            } else {
                vec![]
            };
            let obs = Observation {
                id: Some(format!("pod-{i}")),
                job_type: job(i),
                workload_class: None,
                gpu_class: classes[(i % classes.len() as u64) as usize].clone(),
                gpu_count: 1 + (i % 4) as u32,
                runtime_seconds: 3_600.0 * (1.0 + (i % 7) as f64 / 10.0),
                colocated_job_types: colocated,
                tenant: Some(format!("tenant-{}", (i.wrapping_mul(40_503) >> 5) % 500)),
                ..Observation::default()
            };
            learn(&policy, &mut learned, &obs);
            i += 1;
        }
        let bytes = scorer::state::encode_shared(&learned).expect("encodes");
        println!(
            "{at:>12}  {:>14}  {:>5}  {:>5}  {:>14}",
            learned.runtimes.by_job.len(),
            learned.interference.len(),
            learned.observed.len(),
            bytes.len()
        );
    }
}
