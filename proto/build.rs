//! Generates the mlcc.v1 code. `protox` parses the .proto in pure Rust, so building needs no
//! `protoc` binary (nothing CI or a user would have to install); its descriptors go straight to
//! `tonic-prost-build`, and are also saved for gRPC server reflection.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=mlcc.proto");
    let fds = protox::compile(["mlcc.proto"], ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("mlcc_descriptor.bin"), fds.encode_to_vec())?;
    // Prost's codec, with requests over the flow cap refused before decoding (src/codec.rs).
    tonic_prost_build::configure()
        .codec_path("crate::codec::CappedCodec")
        .compile_fds(fds)?;
    Ok(())
}
