//! The gRPC schema between the webhook frontend and the scorer (`gpuadmission.scorer.v1`).
//!
//! Compiled at build time by `protox` (a pure-Rust protobuf compiler, so no system `protoc`) and
//! `tonic-prost-build`. [`FILE_DESCRIPTOR_SET`] feeds gRPC server reflection.

/// `gpuadmission.scorer.v1`: messages, the `Scorer` client and the `Scorer` server trait.
pub mod scorer {
    pub mod v1 {
        tonic::include_proto!("gpuadmission.scorer.v1");
    }
}

/// The limits the scorer enforces on requests, shared with its clients.
pub mod limits;

/// Encoded `FileDescriptorSet` of every proto file in this crate, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("gpuadmission_descriptor");

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
