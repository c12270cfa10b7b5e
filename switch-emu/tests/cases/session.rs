//! The `Session` stream over real TCP: the same semantics as the unary calls, replies matched by
//! seq, per-message faults answered in-stream, undecodable messages ending only their stream.

use crate::common;

use std::time::Duration;

use common::*;
use mlcc_core::load_table::FeedbackMode;
use mlcc_proto::v1 as pb;
use mlcc_switch_emu::Clock;
use pb::RejectReason as R;
use pb::session_reply::Reply;
use pb::session_request::Request as Req;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

const L2: &str = "sw1->h2";
const L3: &str = "sw1->h3";

struct Session {
    tx: mpsc::Sender<pb::SessionRequest>,
    rx: Streaming<pb::SessionReply>,
}

impl Session {
    async fn open(h: &Harness) -> Session {
        let (tx, rx) = mpsc::channel(256);
        let rx = h
            .client()
            .await
            .session(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Session { tx, rx }
    }

    async fn send(&self, seq: u64, r: Req) {
        self.tx
            .send(pb::SessionRequest {
                seq,
                request: Some(r),
                deadline_unix_ns: 0,
            })
            .await
            .unwrap();
    }

    async fn next(&mut self) -> pb::SessionReply {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a reply within 10 s")
            .expect("the stream goes on")
            .expect("the stream is open")
    }
}

fn fetch(host: &str, q: Vec<pb::FeedbackQuery>) -> Req {
    Req::FetchFeedback(pb::FetchFeedbackRequest {
        host: host.into(),
        slot: 0,
        flows: q,
    })
}

fn update(host: &str, items: Vec<pb::ScheduleItem>) -> Req {
    Req::UpdateSchedule(pb::UpdateScheduleRequest {
        host: host.into(),
        slot: 0,
        flows: items,
    })
}

fn loads(r: &pb::SessionReply) -> Vec<Vec<f64>> {
    match &r.reply {
        Some(Reply::FetchFeedback(f)) => f.flows[0]
            .links
            .iter()
            .map(|l| l.load_bytes_per_sec.clone())
            .collect(),
        other => panic!("not a fetch reply: {other:?}"),
    }
}

fn accepted(r: &pb::SessionReply) -> u32 {
    match &r.reply {
        Some(Reply::UpdateSchedule(u)) => u.accepted,
        other => panic!("not an update reply: {other:?}"),
    }
}

#[tokio::test]
async fn interleaved_updates_and_fetches_match_by_seq_and_agree_with_unary() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut s = Session::open(&h).await;
    // Pipelined without waiting: replies come back in order, each with its request's seq.
    s.send(
        10,
        update("h1", vec![item("a", L2, START, &[1.0, 2.0, 3.0, 4.0])]),
    )
    .await;
    s.send(11, fetch("h3", vec![query("b", &[L2, L3], 0)]))
        .await;
    s.send(12, update("h1", vec![item("a", L2, START, &[5.0])]))
        .await;
    s.send(13, fetch("h3", vec![query("b", &[L2], 0)])).await;
    let r = s.next().await;
    assert_eq!((r.seq, accepted(&r)), (10, 1));
    let r = s.next().await;
    assert_eq!(r.seq, 11);
    assert_eq!(
        loads(&r),
        vec![vec![1.0, 2.0, 3.0, 4.0], vec![0.0; K]],
        "{r:?}"
    );
    let Some(Reply::FetchFeedback(f)) = &r.reply else {
        unreachable!()
    };
    assert_eq!((f.switch_slot, f.from_slot), (START, START));
    assert_eq!(f.flows[0].links[0].capacity_bytes_per_sec, CAP);
    let r = s.next().await;
    assert_eq!((r.seq, accepted(&r)), (12, 1));
    let r = s.next().await;
    assert_eq!((r.seq, loads(&r)), (13, vec![vec![5.0, 0.0, 0.0, 0.0]]));

    // The unary calls see the same table, and the session sees what they publish.
    let mut c = h.client().await;
    assert_eq!(
        load(&mut c, "h3", query("b", &[L2], 0), 0).await,
        vec![5.0, 0.0, 0.0, 0.0]
    );
    publish(&mut c, "h4", vec![item("d", L2, START, &[100.0; 4])]).await;
    s.send(14, fetch("h3", vec![query("b", &[L2], 0)])).await;
    assert_eq!(
        loads(&s.next().await),
        vec![vec![105.0, 100.0, 100.0, 100.0]]
    );
    h.check_invariants();
    drop(s);
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_message_gets_an_error_reply_and_the_stream_goes_on() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut s = Session::open(&h).await;
    // Per-item rejections, exactly as with UpdateSchedule.
    s.send(
        1,
        update(
            "h1",
            vec![
                item("ok", L2, START, &[3.0; 4]),
                item("nan", L2, START, &[f64::NAN]),
                item("unknown", "tor9->h1", START, &[1.0]),
            ],
        ),
    )
    .await;
    // Faults of a whole message: unknown host, invalid host, too many flows, nothing set.
    s.send(2, update("nobody", vec![item("a", L2, START, &[1.0])]))
        .await;
    s.send(3, fetch("h\u{7}1", vec![query("a", &[L2], 0)]))
        .await;
    s.send(4, fetch("h1", vec![query("a", &[L2], 0); 65_537]))
        .await;
    s.tx.send(pb::SessionRequest {
        seq: 5,
        request: None,
        deadline_unix_ns: 0,
    })
    .await
    .unwrap();
    s.send(
        6,
        fetch("h3", vec![query("x", &[L2], 0), query("y", &["nope"], 0)]),
    )
    .await;

    let r = s.next().await;
    let Some(Reply::UpdateSchedule(u)) = &r.reply else {
        panic!("{r:?}")
    };
    assert_eq!((r.seq, u.accepted), (1, 1));
    let got: Vec<(u32, i32)> = u.rejected.iter().map(|x| (x.index, x.reason)).collect();
    assert_eq!(
        got,
        vec![(1, R::NotFinite as i32), (2, R::UnknownLink as i32)]
    );
    for (seq, want) in [
        (2, "not in this switch"),
        (3, "invalid host"),
        (4, "65536"),
        (5, "no request"),
    ] {
        let r = s.next().await;
        assert_eq!(r.seq, seq);
        let Some(Reply::Error(e)) = &r.reply else {
            panic!("{r:?}")
        };
        assert_eq!(e.code, Code::InvalidArgument as i32, "{e:?}");
        assert!(e.message.contains(want), "#{seq}: {e:?}");
    }
    let r = s.next().await;
    assert_eq!(r.seq, 6);
    let Some(Reply::FetchFeedback(f)) = &r.reply else {
        panic!("{r:?}")
    };
    assert_eq!(f.flows[0].links[0].load_bytes_per_sec, vec![3.0; K]);
    assert_eq!(f.rejected[0].reason, R::UnknownLink as i32);
    h.check_invariants();
    drop(s);
    h.running.stop().await.unwrap();
}

/// A message read after its deadline is answered DEADLINE_EXCEEDED and not applied (counted in
/// the metrics); the stream goes on, and messages on time or without a deadline are served.
#[tokio::test]
async fn a_message_past_its_deadline_is_refused_unapplied_and_the_stream_goes_on() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut s = Session::open(&h).await;
    let now = h.clock.now_ns();
    let with_deadline = |seq, r, deadline_unix_ns| pb::SessionRequest {
        seq,
        request: Some(r),
        deadline_unix_ns,
    };
    // Stale: an update that must not book anything, and a fetch.
    for m in [
        with_deadline(
            1,
            update("h1", vec![item("late", L2, START, &[7.0; 4])]),
            now - 1,
        ),
        with_deadline(2, fetch("h3", vec![query("x", &[L2], 0)]), now - 1_000_000),
        // On time (the deadline is this instant or later), and no deadline at all.
        with_deadline(3, update("h1", vec![item("ok", L2, START, &[2.0; 4])]), now),
        with_deadline(4, fetch("h3", vec![query("x", &[L2], 0)]), now + 1),
        with_deadline(5, fetch("h3", vec![query("x", &[L2], 0)]), 0),
    ] {
        s.tx.send(m).await.unwrap();
    }
    for (seq, late_ms) in [(1, "0.000"), (2, "1.000")] {
        let r = s.next().await;
        assert_eq!(r.seq, seq);
        let Some(Reply::Error(e)) = &r.reply else {
            panic!("{r:?}")
        };
        assert_eq!(e.code, Code::DeadlineExceeded as i32, "{e:?}");
        assert!(e.message.contains(late_ms), "{e:?}");
    }
    let r = s.next().await;
    assert!(
        matches!(&r.reply, Some(Reply::UpdateSchedule(u)) if u.accepted == 1),
        "{r:?}"
    );
    for seq in [4, 5] {
        let r = s.next().await;
        assert_eq!(r.seq, seq);
        // Only "ok" is booked: the stale update never reached the table.
        assert_eq!(loads(&r), vec![vec![2.0; K]], "{r:?}");
    }
    let m = h.running.shared.metrics.encode();
    for method in ["fetch_feedback", "update_schedule"] {
        let line = format!("mlcc_switch_session_expired_messages_total{{method=\"{method}\"}} 1");
        assert!(m.contains(&line), "{line} not in\n{m}");
    }
    h.check_invariants();
    drop(s);
    h.running.stop().await.unwrap();
}

/// A session request whose fields the test controls at the byte level.
#[derive(Clone, PartialEq, prost::Message)]
struct RawRequest {
    #[prost(uint64, tag = "1")]
    seq: u64,
    /// `fetch_feedback` as raw bytes: anything, valid or not.
    #[prost(bytes = "vec", optional, tag = "2")]
    fetch: Option<Vec<u8>>,
}

async fn raw_session(h: &Harness) -> (mpsc::Sender<RawRequest>, Streaming<pb::SessionReply>) {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await.unwrap();
    let (tx, rx) = mpsc::channel(16);
    let codec = tonic_prost::ProstCodec::<RawRequest, pb::SessionReply>::default();
    let replies = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            tonic::codegen::http::uri::PathAndQuery::from_static("/mlcc.v1.Switch/Session"),
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    (tx, replies)
}

fn valid_fetch() -> Vec<u8> {
    use prost::Message;
    pb::FetchFeedbackRequest {
        host: "h3".into(),
        slot: 0,
        flows: vec![query("x", &[L2], 0)],
    }
    .encode_to_vec()
}

#[tokio::test]
async fn an_undecodable_message_ends_only_its_stream() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut bystander = Session::open(&h).await;
    bystander
        .send(1, update("h1", vec![item("a", L2, START, &[2.0; 4])]))
        .await;
    assert_eq!(accepted(&bystander.next().await), 1);

    // (what to send, the codes it may end the stream with)
    let bad_utf8 = {
        let mut v = valid_fetch();
        // The host "h3" is field 1, bytes 2..4: make it invalid UTF-8.
        v[2] = 0xff;
        v
    };
    let cases: Vec<(&str, Vec<u8>, Vec<Code>)> = vec![
        ("invalid UTF-8", bad_utf8, vec![Code::Internal]),
        // Field 3 (flows, a message) sent as a varint: a wire-type error.
        ("wire type", vec![0x18, 0x07], vec![Code::Internal]),
        // Over the 16 MiB decoding limit.
        (
            "oversized",
            vec![0u8; 17 << 20],
            vec![Code::OutOfRange, Code::ResourceExhausted],
        ),
    ];
    for (what, bytes, codes) in cases {
        let (tx, mut rx) = raw_session(&h).await;
        tx.send(RawRequest {
            seq: 1,
            fetch: Some(valid_fetch()),
        })
        .await
        .unwrap();
        let r = rx.message().await.unwrap().unwrap();
        assert_eq!(r.seq, 1, "{what}");
        assert!(matches!(r.reply, Some(Reply::FetchFeedback(_))), "{what}");
        tx.send(RawRequest {
            seq: 2,
            fetch: Some(bytes),
        })
        .await
        .unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), rx.message())
            .await
            .expect("the stream ends")
            .expect_err("with an error status");
        assert!(codes.contains(&end.code()), "{what}: {end}");

        // The other session and new callers are unaffected.
        bystander
            .send(2, fetch("h3", vec![query("x", &[L2], 0)]))
            .await;
        let r = bystander.next().await;
        assert_eq!((r.seq, loads(&r)), (2, vec![vec![2.0; K]]), "{what}");
    }
    let mut c = h.client().await;
    assert_eq!(
        load(&mut c, "h3", query("x", &[L2], 0), 0).await,
        vec![2.0; K]
    );
    drop(bystander);
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_stops_reading_has_its_session_ended() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut s = Session::open(&h).await;
    // Big replies (~40 kB each), never read while sending: once the HTTP/2 windows are full the
    // switch's bounded reply queue fills too, and the switch ends the stream instead of
    // buffering more.
    let queries = vec![query("x", &[L2, L3], 0); 500];
    let sent = 400;
    let sender = {
        let tx = s.tx.clone();
        tokio::spawn(async move {
            for seq in 0..sent {
                let m = pb::SessionRequest {
                    seq,
                    request: Some(fetch("h3", queries.clone())),
                    deadline_unix_ns: 0,
                };
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        })
    };
    // Let the switch run into the limit before reading anything.
    let stats = || h.running.shared.metrics.encode();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !stats().contains("mlcc_switch_sessions_ended_total{reason=\"unread\"} 1") {
        assert!(std::time::Instant::now() < deadline, "{}", stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut replies = 0;
    let end = loop {
        match s.rx.message().await {
            Ok(Some(r)) => {
                assert_eq!(r.seq, replies);
                replies += 1;
            }
            Ok(None) => panic!("ended without a status after {replies} replies"),
            Err(e) => break e,
        }
    };
    assert_eq!(end.code(), Code::ResourceExhausted, "{end}");
    assert!(replies < sent, "{replies}");
    sender.abort();
    // The switch still serves others.
    let mut other = Session::open(&h).await;
    other.send(1, fetch("h3", vec![query("x", &[L2], 0)])).await;
    assert_eq!(other.next().await.seq, 1);
    drop((s, other));
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn stopping_the_server_ends_open_sessions() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut s = Session::open(&h).await;
    s.send(1, fetch("h3", vec![query("x", &[L2], 0)])).await;
    assert_eq!(s.next().await.seq, 1);
    let started = std::time::Instant::now();
    h.running.stop().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let end = tokio::time::timeout(Duration::from_secs(5), s.rx.message())
        .await
        .expect("the stream ends");
    match end {
        Err(e) => assert!(
            matches!(
                e.code(),
                Code::Unavailable | Code::Unknown | Code::Cancelled
            ),
            "{e}"
        ),
        Ok(None) => {}
        Ok(Some(r)) => panic!("unexpected reply {r:?}"),
    }
}
