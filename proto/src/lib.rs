//! The gRPC schema between the webhook frontend and the scorer (`gpuadmission.scorer.v1`).
//!
//! Compiled at build time by `protox` (a pure-Rust protobuf compiler, so no system `protoc`) and
//! `tonic-prost-build`. [`FILE_DESCRIPTOR_SET`] feeds gRPC server reflection.

/// `gpuadmission.scorer.v1`: messages, and with the `grpc` feature the `Scorer` client and server trait.
pub mod scorer {
    // Generated: `ScoreAnswer.result` holds a `ScoreResponse` inline (one answer per call; boxing it would
    // change the generated API for no measurable gain).
    #[allow(clippy::large_enum_variant)]
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

    /// What a request asks, as its encoding without its request id, group size (a frontend that could not
    /// read the owner in time leaves the size out) and dry-run flag (a dry run is answered with the
    /// workload's decision too): equal for the Pods of one template. The three fields are put back before
    /// this returns; every other field, including ones added later, is part of the answer.
    pub fn asked_bytes(req: &mut ScoreRequest) -> Vec<u8> {
        let request_id = std::mem::take(&mut req.request_id);
        let group_size = req.group_size.take();
        let dry_run = std::mem::take(&mut req.dry_run);
        let asked = req.encode_to_vec();
        req.request_id = request_id;
        req.group_size = group_size;
        req.dry_run = dry_run;
        asked
    }

    /// A short digest of [`asked_bytes`], for keys that are logged or kept many times.
    pub fn asked_digest(req: &ScoreRequest) -> String {
        let d = Sha256::digest(asked_bytes(&mut req.clone()));
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The codec of the generated client and server.
#[cfg(feature = "grpc")]
mod codec;

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
                "ScoreCalls",
                "Observe",
                "GetPolicy",
                "Explain",
                "ExportState",
                "ImportState",
                "ValidatePolicy"
            ]
        );
    }

    #[test]
    fn asked_bytes_leave_out_the_request_id_group_size_and_dry_run_only_and_put_them_back() {
        use super::scorer::v1::ScoreRequest;
        use super::workload::{asked_bytes, asked_digest};
        let mut first = ScoreRequest {
            request_id: "a".into(),
            workload_key: "batch/Job/ml/train".into(),
            gpu_count: 2,
            group_size: Some(4),
            ..Default::default()
        };
        let before = first.clone();
        let asked = asked_bytes(&mut first);
        assert_eq!(first, before, "the request is unchanged");
        let mut sibling = ScoreRequest {
            request_id: "b".into(),
            group_size: None,
            dry_run: true,
            ..before.clone()
        };
        assert_eq!(asked_bytes(&mut sibling), asked);
        assert_eq!(asked_digest(&sibling), asked_digest(&before));
        let mut other = ScoreRequest {
            gpu_count: 1,
            ..before.clone()
        };
        assert_ne!(asked_bytes(&mut other), asked);
        let mut other_workload = ScoreRequest {
            workload_key: "batch/Job/ml/eval".into(),
            ..before
        };
        assert_ne!(asked_bytes(&mut other_workload), asked);
    }
}
