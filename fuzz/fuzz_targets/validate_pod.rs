//! `/validate-pod` on any body: no panic (a verdict or a 400).
#![no_main]
mod common;

use libfuzzer_sys::fuzz_target;
use gpu_admission_properties::check_validate;

fuzz_target!(|data: &[u8]| {
    let (_, policy) = common::scorer();
    let _ = check_validate(data, policy);
});
