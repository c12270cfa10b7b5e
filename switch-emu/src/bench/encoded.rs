//! A simulated host's two session messages, encoded once. Each slot patches the slot numbers
//! and rates in place, at the offsets recorded when the message was built, and appends `seq` and
//! `deadline_unix_ns` after the request, so the generator runs no protobuf encoder per message.
//! Protobuf reads fields in any order, so the appended ones decode as if written first.

use mlcc_core::slot::Slot;
use mlcc_proto::v1 as pb;
use prost::bytes::{BufMut, Bytes};
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

/// Field numbers of mlcc.proto's messages that the generator writes.
mod tag {
    pub const SESSION_SEQ: u32 = 1;
    pub const SESSION_FETCH: u32 = 2;
    pub const SESSION_UPDATE: u32 = 3;
    pub const SESSION_DEADLINE: u32 = 4;
    /// `host`, `slot` and `flows` are 1, 2, 3 in both requests.
    pub const REQUEST_HOST: u32 = 1;
    pub const REQUEST_SLOT: u32 = 2;
    pub const REQUEST_FLOWS: u32 = 3;
    /// `flow_id` and `links` are 1 and 2 in both items.
    pub const ITEM_FLOW: u32 = 1;
    pub const ITEM_LINKS: u32 = 2;
    pub const QUERY_RANK: u32 = 3;
    pub const QUERY_COMMITTED: u32 = 4;
    pub const SCHEDULE_FIRST_SLOT: u32 = 3;
    pub const SCHEDULE_RATES: u32 = 4;
    pub const SCHEDULE_RANK: u32 = 5;
}

/// What one host's messages carry: its name, its flows (flow id, link) and their rank, and
/// whether its queries ask for the committed load.
pub(super) struct Spec {
    pub host: String,
    pub flows: Vec<(String, String, f64)>,
    pub rank: u64,
    pub committed: bool,
    /// Rates per schedule item (K).
    pub horizon: usize,
}

impl Spec {
    /// The fetch for `slot`, built the ordinary way (unary mode sends it as it is).
    pub fn fetch_request(&self, slot: Slot) -> pb::FetchFeedbackRequest {
        pb::FetchFeedbackRequest {
            host: self.host.clone(),
            slot: slot.0,
            flows: self
                .flows
                .iter()
                .map(|(f, l, _)| pb::FeedbackQuery {
                    flow_id: f.clone(),
                    links: vec![l.clone()],
                    rank: self.rank,
                    committed: self.committed,
                })
                .collect(),
        }
    }

    /// The update for `slot`, item `j` booking `rate(j, t)` in its plan's slot `t`, built the
    /// ordinary way.
    pub fn update_request(
        &self,
        slot: Slot,
        rate: impl Fn(usize, usize) -> f64,
    ) -> pb::UpdateScheduleRequest {
        pb::UpdateScheduleRequest {
            host: self.host.clone(),
            slot: slot.0,
            flows: self
                .flows
                .iter()
                .enumerate()
                .map(|(j, (f, l, _))| pb::ScheduleItem {
                    flow_id: f.clone(),
                    links: vec![l.clone()],
                    first_slot: slot.0,
                    rates_bytes_per_sec: (0..self.horizon).map(|t| rate(j, t)).collect(),
                    rank: self.rank,
                    done: false,
                })
                .collect(),
        }
    }
}

/// Which of the two messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Fetch,
    Update,
}

/// One message, encoded for a slot whose number has `slot_width` varint bytes.
pub(super) struct Encoded {
    kind: Kind,
    bytes: Vec<u8>,
    slot_width: usize,
    /// Offsets of the slot varints: the request's, and each schedule item's first slot.
    slots: Vec<usize>,
    /// Offset of each schedule item's first rate; `horizon` little-endian doubles follow.
    rates: Vec<usize>,
}

fn varint_field(buf: &mut Vec<u8>, tag: u32, v: u64) -> usize {
    encode_key(tag, WireType::Varint, buf);
    let at = buf.len();
    encode_varint(v, buf);
    at
}

fn bytes_field(buf: &mut Vec<u8>, tag: u32, inner: &[u8]) -> usize {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(inner.len() as u64, buf);
    let at = buf.len();
    buf.extend_from_slice(inner);
    at
}

fn doubles_field(buf: &mut Vec<u8>, tag: u32, n: usize) -> usize {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(8 * n as u64, buf);
    let at = buf.len();
    buf.resize(at + 8 * n, 0);
    at
}

impl Encoded {
    /// `kind` for `spec`, its slot numbers set to `slot` and its rates to 0.
    pub fn new(kind: Kind, spec: &Spec, slot: Slot) -> Self {
        let mut body = Vec::new();
        bytes_field(&mut body, tag::REQUEST_HOST, spec.host.as_bytes());
        let mut slots = vec![varint_field(&mut body, tag::REQUEST_SLOT, slot.0)];
        let mut rates = Vec::new();
        for (flow, link, _) in &spec.flows {
            let mut item = Vec::new();
            bytes_field(&mut item, tag::ITEM_FLOW, flow.as_bytes());
            bytes_field(&mut item, tag::ITEM_LINKS, link.as_bytes());
            let (first, rate) = match kind {
                Kind::Fetch => {
                    varint_field(&mut item, tag::QUERY_RANK, spec.rank);
                    if spec.committed {
                        varint_field(&mut item, tag::QUERY_COMMITTED, 1);
                    }
                    (None, None)
                }
                Kind::Update => {
                    let f = varint_field(&mut item, tag::SCHEDULE_FIRST_SLOT, slot.0);
                    let r = doubles_field(&mut item, tag::SCHEDULE_RATES, spec.horizon);
                    varint_field(&mut item, tag::SCHEDULE_RANK, spec.rank);
                    (Some(f), Some(r))
                }
            };
            let at = bytes_field(&mut body, tag::REQUEST_FLOWS, &item);
            slots.extend(first.map(|f| at + f));
            rates.extend(rate.map(|r| at + r));
        }
        let mut bytes = Vec::new();
        let field = match kind {
            Kind::Fetch => tag::SESSION_FETCH,
            Kind::Update => tag::SESSION_UPDATE,
        };
        let at = bytes_field(&mut bytes, field, &body);
        Encoded {
            kind,
            bytes,
            slot_width: encoded_len_varint(slot.0),
            slots: slots.into_iter().map(|s| at + s).collect(),
            rates: rates.into_iter().map(|r| at + r).collect(),
        }
    }

    /// This slot's message: the slot numbers set to `slot` (the message is built again when
    /// the number's varint has another width), `rate(item, t)` as the rates, then `seq` and
    /// `deadline_ns`.
    pub fn message(
        &mut self,
        spec: &Spec,
        (seq, slot, deadline_ns): (u64, Slot, u64),
        rate: impl Fn(usize, usize) -> f64,
    ) -> Bytes {
        if encoded_len_varint(slot.0) != self.slot_width {
            *self = Encoded::new(self.kind, spec, slot);
        }
        for &at in &self.slots {
            encode_varint(slot.0, &mut &mut self.bytes[at..at + self.slot_width]);
        }
        for (item, &at) in self.rates.iter().enumerate() {
            let mut dst = &mut self.bytes[at..at + 8 * spec.horizon];
            for t in 0..spec.horizon {
                dst.put_f64_le(rate(item, t));
            }
        }
        let mut out = Vec::with_capacity(self.bytes.len() + 24);
        out.extend_from_slice(&self.bytes);
        varint_field(&mut out, tag::SESSION_SEQ, seq);
        varint_field(&mut out, tag::SESSION_DEADLINE, deadline_ns);
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::session_request::Request as Req;
    use prost::Message;

    fn flows() -> Vec<(String, String, f64)> {
        (0..3)
            .map(|j| (format!("bench/h7>l{j}/f{j}"), format!("l{j}"), 1e9))
            .collect()
    }

    fn spec(committed: bool) -> Spec {
        Spec {
            host: "h7".into(),
            flows: flows(),
            rank: 29_000_000_123,
            committed,
            horizon: 4,
        }
    }

    fn rate(item: usize, t: usize) -> f64 {
        (item * 10 + t) as f64 * 1.5e6
    }

    /// What prost makes of the same message, built the ordinary way.
    fn expected(
        kind: Kind,
        spec: &Spec,
        seq: u64,
        slot: Slot,
        deadline: u64,
    ) -> pb::SessionRequest {
        let request = match kind {
            Kind::Fetch => Req::FetchFeedback(spec.fetch_request(slot)),
            Kind::Update => Req::UpdateSchedule(spec.update_request(slot, rate)),
        };
        pb::SessionRequest {
            seq,
            request: Some(request),
            deadline_unix_ns: deadline,
        }
    }

    #[test]
    fn patched_messages_decode_as_prost_builds_them() {
        for (kind, spec) in [
            (Kind::Fetch, spec(true)),
            (Kind::Fetch, spec(false)),
            (Kind::Update, spec(true)),
        ] {
            let mut m = Encoded::new(kind, &spec, Slot(30_000_000_000));
            // The same width as built, then a narrower and a wider slot number (rebuilt), and
            // a seq that grows past one varint byte.
            for (seq, slot) in [
                (1, 30_000_000_001),
                (127, 31_000_000_000),
                (128, 5),
                (300, 1 << 40),
            ] {
                let deadline = 1_790_000_000_000_000_000 + seq;
                let bytes = m.message(&spec, (seq, Slot(slot), deadline), rate);
                let got = pb::SessionRequest::decode(bytes.as_ref()).unwrap();
                assert_eq!(
                    got,
                    expected(kind, &spec, seq, Slot(slot), deadline),
                    "{kind:?} slot {slot}, committed {}",
                    spec.committed
                );
            }
        }
    }
}
