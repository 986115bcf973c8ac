//! The quota oracle ([`gpu_admission_properties::quota_oracle`]) over random sequences: 300 sequences of 60
//! steps in `cargo test`, as many as `QUOTA_ORACLE_SEQUENCES` says in CI's fuzz step. Prints the count of
//! sequences, steps, creates the apiserver refused after admission, creates refused by their namespace's rate
//! limit, and counterexamples (0, or the test fails with the first one's trace).
use gpu_admission_properties::op_stream;
use gpu_admission_properties::quota_oracle::run;

/// A sequence's op bytes.
fn ops(seed: u64, steps: usize) -> Vec<u8> {
    op_stream(seed, steps * 2)
}

#[test]
fn no_sequence_breaks_a_max_or_counts_other_than_what_is_held() {
    let sequences: u64 = std::env::var("QUOTA_ORACLE_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let (mut steps, mut not_stored, mut limited) = (0, 0, 0);
    for seed in 0..sequences {
        match run(&ops(seed, 60)) {
            Ok(ran) => {
                steps += ran.steps;
                not_stored += ran.not_stored;
                limited += ran.limited;
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    // The sequences reach what the ledger's rules are for: failed creates, and the rate limit.
    assert!(
        not_stored > 0 && limited > 0,
        "{not_stored} not stored, {limited} limited"
    );
    println!(
        "quota oracle: {sequences} sequences, {steps} steps, {not_stored} creates refused after admission, \
         {limited} refused by their namespace's rate limit, 0 counterexamples"
    );
}
