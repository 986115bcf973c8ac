//! `/mutate-pod` on any body, through the handler's own decision functions: no panic; any patch applies to the
//! review's object and gives a Pod.
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use gpu_admission_properties::check_mutate;

fuzz_target!(|data: &[u8]| {
    let (core, policy) = common::scorer();
    check_mutate(data, policy, &mut |req| common::explain(core, req));
});
