//! The floor shipped in `deploy/kustomize/base/floor.yaml` is `gpu-admission floor render` of the shipped
//! policy, byte for byte (regenerate it with
//! `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`).

use std::path::Path;

#[test]
fn the_shipped_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/base/floor.yaml"),
    )
    .expect("deploy/kustomize/base/floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_yaml(
        &policy,
        gpu_admission_core::names::DEFAULT_TIER_LABEL,
    )
    .unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/base/floor.yaml is not the render of the default policy: run \
         `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`"
    );
}
