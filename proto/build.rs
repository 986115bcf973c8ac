//! Compiles `gpuadmission/scorer/v1/scorer.proto` with protox (a pure-Rust compiler: no system protoc),
//! generates the messages (and with the `grpc` feature the tonic client and server), and writes the encoded descriptor set for server reflection.
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "gpuadmission/scorer/v1/scorer.proto";
    println!("cargo:rerun-if-changed={proto}");
    let mut compiler = protox::Compiler::new(["."])?;
    // Source info keeps the proto comments, so `grpcurl describe` shows them.
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files([proto])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("gpuadmission_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    // Default stubs (UNIMPLEMENTED) for server methods, so that a test double implementing only the RPCs
    // it needs keeps compiling when the service gains one. The scorer implements every method.
    let grpc = env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .generate_default_stubs(true)
        // prost decoding from one slice instead of through tonic's buffer (see `src/codec.rs`).
        .codec_path("crate::codec::SliceCodec")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
