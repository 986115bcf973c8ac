//! The gRPC schema between the webhook frontend and the scorer (`gpuadmission.scorer.v1`).
//!
//! Compiled at build time by `protox` (a pure-Rust protobuf compiler, so no system `protoc`) and
//! `tonic-prost-build`. [`FILE_DESCRIPTOR_SET`] feeds gRPC server reflection.

/// `gpuadmission.scorer.v1`: messages, and with the `grpc` feature the `Scorer` client and server trait.
pub mod scorer {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/gpuadmission.scorer.v1.rs"));
    }
}

/// One decision per workload: what a Pod of a workload asks, keyed the same way by the scorer (its answer cache)
/// and the frontend (its copy of the scorer's answers).
pub mod workload {
    use crate::scorer::v1::ScoreRequest;
    use prost::Message;
    use sha2::{Digest, Sha256};

    /// A digest of what a request asks, without its request id and group size (a frontend that could not read
    /// the owner in time leaves the size out): equal for the Pods of one template.
    pub fn asked_digest(req: &ScoreRequest) -> String {
        let asked = ScoreRequest {
            request_id: String::new(),
            group_size: None,
            ..req.clone()
        };
        let d = Sha256::digest(asked.encode_to_vec());
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The GPU resource names counted when a policy does not list its own `gpuResources`: the one default list,
/// used by the scorer (policy without the list) and the frontend (before the first `GetPolicy`). The shipped
/// policy file spells the same list out (a scorer test keeps them equal).
pub mod gpu_resources {
    use crate::scorer::v1::{GpuResourceKind, GpuResourceRule, GpuVendor};

    /// Memory quantities of HAMi's `nvidia.com/gpumem` are MiB.
    pub const MIB_IN_GIB: f64 = 1.0 / 1024.0;

    /// The placeholder of a MIG pattern that captures the slice memory in GiB.
    pub const MEMORY_PLACEHOLDER: &str = "{memoryGiB}";

    /// NVIDIA (whole, shared, MIG, HAMi memory and cores), AMD and Intel (only `i915` / `xe` are devices),
    /// and the vendors' DRA DeviceClasses.
    pub fn default_rules() -> Vec<GpuResourceRule> {
        use GpuResourceKind as K;
        use GpuVendor as V;
        let rule = |name: &str, vendor: V, kind: K, memory_gib_per_unit: f64| GpuResourceRule {
            name: name.to_string(),
            vendor: vendor as i32,
            kind: kind as i32,
            memory_gib_per_unit,
        };
        vec![
            rule("nvidia.com/gpu", V::Nvidia, K::Devices, 0.0),
            rule("nvidia.com/gpu.shared", V::Nvidia, K::SharedDevices, 0.0),
            rule(
                "nvidia.com/mig-*g.{memoryGiB}gb",
                V::Nvidia,
                K::MigSlices,
                0.0,
            ),
            rule("nvidia.com/gpumem", V::Nvidia, K::Memory, MIB_IN_GIB),
            rule("nvidia.com/gpucores", V::Nvidia, K::Cores, 0.0),
            rule("amd.com/gpu", V::Amd, K::Devices, 0.0),
            rule("gpu.intel.com/i915", V::Intel, K::Devices, 0.0),
            rule("gpu.intel.com/xe", V::Intel, K::Devices, 0.0),
            rule("gpu.intel.com/millicores", V::Intel, K::Cores, 0.0),
            rule("gpu.nvidia.com", V::Nvidia, K::DraDeviceClass, 0.0),
            rule("gpu.amd.com", V::Amd, K::DraDeviceClass, 0.0),
            rule("gpu.intel.com", V::Intel, K::DraDeviceClass, 0.0),
        ]
    }
}

/// The limits the scorer enforces on requests, shared with its clients.
pub mod limits;

/// Encoded `FileDescriptorSet` of every proto file in this crate, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/gpuadmission_descriptor.bin"));

#[cfg(test)]
mod tests {
    use prost::Message;

    #[test]
    fn descriptor_set_holds_the_scorer_service() {
        let set = prost_types::FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET).unwrap();
        let file = set
            .file
            .iter()
            .find(|f| f.package() == "gpuadmission.scorer.v1")
            .expect("package gpuadmission.scorer.v1 in the descriptor set");
        let methods: Vec<_> = file.service[0].method.iter().map(|m| m.name()).collect();
        assert_eq!(file.service[0].name(), "Scorer");
        assert_eq!(
            methods,
            [
                "Score",
                "Observe",
                "GetPolicy",
                "Explain",
                "ExportState",
                "ImportState",
                "ValidatePolicy"
            ]
        );
    }
}
