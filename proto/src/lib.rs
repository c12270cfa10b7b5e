//! mlcc-proto: the generated code of `mlcc.proto` (package `mlcc.v1`, docs/design.md §10).
//!
//! Kept apart from every other crate so that a client (mlccd, a test, a third-party tool) can
//! speak the protocol without pulling in the planning core, and the wire stays one piece.

pub mod codec;

pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("mlcc.v1");

    /// Encoded `FileDescriptorSet` of mlcc.proto, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/mlcc_descriptor.bin"));
}

/// Largest request a server decodes, and the default for clients. 65 536 flows of ~200 bytes
/// each fit with room to spare; anything bigger is a broken or hostile peer.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Most flows one call may carry (docs/design.md §10).
pub const MAX_FLOWS_PER_CALL: usize = 65_536;

impl From<tonic::Status> for v1::SessionError {
    /// A stream message's own fault, as the unary call would have failed with it (no clock).
    fn from(s: tonic::Status) -> Self {
        v1::SessionError {
            code: s.code() as i32,
            message: s.message().to_string(),
            switch_unix_ns: 0,
        }
    }
}
