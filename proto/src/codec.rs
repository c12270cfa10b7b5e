//! The gRPC codec of every mlcc service: prost's, except that a unary request carrying more
//! than [`MAX_FLOWS_PER_CALL`] flows is refused from a count of its fields on the wire, before
//! it is decoded. Decoding and dropping 65 537 flows costs a server about as much as serving
//! them, on the thread that serves every other connection; counting them costs a scan of the
//! bytes the transport has already buffered.
//!
//! Stream messages are not counted here: a decode error ends a stream, and a session's
//! over-cap message is answered on its own, after decoding, without ending the session.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::MAX_FLOWS_PER_CALL;
use crate::v1 as pb;

/// Where a message carries its flows on the wire, if it is a request whose flows are capped.
pub trait FlowsField {
    /// Field number of the repeated flows field counted before decoding; `None`: not counted.
    const FLOWS: Option<u32> = None;
}

/// Refusal of a call over the cap, in the words the switch and mlccd use after decoding.
pub fn too_many_flows(got: usize) -> Status {
    Status::invalid_argument(format!(
        "{got} flows in one call; at most {MAX_FLOWS_PER_CALL} are allowed (split the batch)"
    ))
}

/// How many times top-level field `field` occurs in an encoded message; `None` where the bytes
/// are not a well-formed sequence of fields (prost's decoder then says what is wrong).
pub fn count_field(mut bytes: &[u8], field: u32) -> Option<usize> {
    let mut count = 0;
    while bytes.has_remaining() {
        let key = prost::encoding::decode_varint(&mut bytes).ok()?;
        let skip = match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut bytes).ok()?;
                0
            }
            1 => 8,
            2 => usize::try_from(prost::encoding::decode_varint(&mut bytes).ok()?).ok()?,
            5 => 4,
            _ => return None,
        };
        if skip > bytes.remaining() {
            return None;
        }
        bytes.advance(skip);
        if key >> 3 == u64::from(field) && key & 7 == 2 {
            count += 1;
        }
    }
    Some(count)
}

/// The refusal of an encoded `U` that carries more flows than one call may.
pub fn over_cap<U: FlowsField>(bytes: &[u8]) -> Option<Status> {
    let n = count_field(bytes, U::FLOWS?)?;
    (n > MAX_FLOWS_PER_CALL).then(|| too_many_flows(n))
}

/// [`ProstCodec`] with the flow cap counted before decoding.
#[derive(Debug, Clone)]
pub struct CappedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for CappedCodec<T, U> {
    fn default() -> Self {
        CappedCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for CappedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + FlowsField + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CappedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        CappedDecoder(ProstCodec::<T, U>::default().decoder())
    }
}

/// Prost's decoder behind the count.
#[derive(Debug, Clone)]
pub struct CappedDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default + FlowsField> Decoder for CappedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // The transport hands a unary message over whole, in one contiguous buffer; where it
        // does not, prost decodes and the service counts after it, as for streams.
        if buf.chunk().len() == buf.remaining()
            && let Some(refused) = over_cap::<U>(buf.chunk())
        {
            buf.advance(buf.remaining());
            return Err(refused);
        }
        self.0.decode(buf)
    }

    fn buffer_settings(&self) -> tonic::codec::BufferSettings {
        self.0.buffer_settings()
    }
}

/// Counted requests: the unary calls that carry flows.
macro_rules! counted {
    ($($t:ident = $field:literal),* $(,)?) => {
        $(impl FlowsField for pb::$t { const FLOWS: Option<u32> = Some($field); })*
    };
}

/// Every other message a service sends or receives.
macro_rules! not_counted {
    ($($t:ident),* $(,)?) => { $(impl FlowsField for pb::$t {})* };
}

counted!(
    FetchFeedbackRequest = 3,
    UpdateScheduleRequest = 3,
    ExchangeRequest = 3,
);

not_counted!(
    FetchFeedbackReply,
    UpdateScheduleReply,
    DescribeRequest,
    DescribeReply,
    TableRequest,
    TableReply,
    SessionRequest,
    SessionReply,
    ExchangeReply,
    PeerRequest,
    PeerReply,
    StatusRequest,
    StatusReply,
    ListJobsRequest,
    ListJobsReply,
    ListFlowsRequest,
    ListFlowsReply,
    ListLinksRequest,
    ListLinksReply,
    ListSwitchesRequest,
    ListSwitchesReply,
    AddJobRequest,
    AddJobReply,
    RemoveJobRequest,
    RemoveJobReply,
);

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(flows: usize) -> pb::FetchFeedbackRequest {
        let one = pb::FeedbackQuery {
            flow_id: "j/h1>h2/agg".into(),
            links: vec!["sw1->h2".into()],
            rank: 1,
            committed: false,
        };
        pb::FetchFeedbackRequest {
            host: "h1".into(),
            slot: 7,
            flows: vec![one; flows],
        }
    }

    #[test]
    fn counts_the_repeated_field_and_skips_the_others() {
        for n in [0, 1, 3, 300] {
            let bytes = fetch(n).encode_to_vec();
            assert_eq!(count_field(&bytes, 3), Some(n));
            assert_eq!(count_field(&bytes, 1), Some(1), "host, once");
            assert_eq!(
                count_field(&bytes, 2),
                Some(0),
                "slot is a varint, not counted"
            );
        }
    }

    #[test]
    fn malformed_bytes_are_left_to_prost() {
        let bytes = fetch(3).encode_to_vec();
        assert_eq!(count_field(&bytes[..bytes.len() - 1], 3), None, "torn");
        assert_eq!(count_field(&[0x0b], 1), None, "group wire type");
        assert_eq!(count_field(&[0x1a, 0xff], 3), None, "length past the end");
        assert_eq!(count_field(&[0x80; 11], 3), None, "varint too long");
    }

    #[test]
    fn a_call_over_the_cap_is_refused_and_one_at_it_is_not() {
        let at = fetch(MAX_FLOWS_PER_CALL).encode_to_vec();
        assert!(over_cap::<pb::FetchFeedbackRequest>(&at).is_none());
        let over = fetch(MAX_FLOWS_PER_CALL + 1).encode_to_vec();
        let s = over_cap::<pb::FetchFeedbackRequest>(&over).expect("refused");
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().starts_with("65537 flows in one call"), "{s}");
    }

    #[test]
    fn only_the_unary_requests_with_flows_are_counted() {
        let over = fetch(MAX_FLOWS_PER_CALL + 1);
        let session = pb::SessionRequest {
            seq: 1,
            request: Some(pb::session_request::Request::FetchFeedback(over)),
            deadline_unix_ns: 0,
        };
        // A session's over-cap message is answered alone after decoding (the stream goes on).
        assert!(over_cap::<pb::SessionRequest>(&session.encode_to_vec()).is_none());
        let reply = pb::FetchFeedbackReply {
            flows: vec![Default::default(); MAX_FLOWS_PER_CALL + 1],
            ..Default::default()
        };
        assert!(over_cap::<pb::FetchFeedbackReply>(&reply.encode_to_vec()).is_none());
    }
}
