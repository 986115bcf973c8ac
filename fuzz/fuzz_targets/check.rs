//! `gpu-admission check` on any bytes as a file of manifests: no panic (the floor's CEL included), a verdict
//! for every object that describes Pods, or the load error `check` prints.
#![no_main]

use std::cell::RefCell;

use gpu_admission_properties::cli_check::{Run, check_cli, cli_run};
use libfuzzer_sys::fuzz_target;

thread_local! {
    // One run for every input (the policy parsed and the floor compiled once); each input is checked alone.
    static RUN: RefCell<Run> = RefCell::new(cli_run());
}

fuzz_target!(|data: &[u8]| {
    RUN.with_borrow_mut(|run| {
        let _ = check_cli(data, run);
    });
});
