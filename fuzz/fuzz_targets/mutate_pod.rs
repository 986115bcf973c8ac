//! `/mutate-pod` on any body: no panic; any patch applies to the review's object and gives a Pod.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use webhook_frontend::admission::fuzzing::check_mutate;

fuzz_target!(|data: &[u8]| {
    let (core, policy) = common::scorer();
    check_mutate(data, policy, &mut |req| common::explain(core, req));
});
