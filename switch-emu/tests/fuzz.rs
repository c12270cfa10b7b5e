//! Fuzz targets for everything mlcc-switchd reads from the network or from its operator: each
//! RPC's request bytes, the Session stream's frames, and the config file.
//!
//! bolero harnesses: under plain `cargo test` (stable) each replays its kept corpus in
//! `tests/__fuzz__/<target>/{corpus,crashes}` and then runs random inputs for
//! `BOLERO_RANDOM_TEST_TIME_MS` (1 s if unset); `scripts/fuzz.sh` sets the CI budget.
//! Structured request sequences are also covered by `tests/properties.rs` (proptest).
//!
//! The handlers are called through the generated service trait (`Switch`), exactly as tonic
//! calls them, with messages decoded from the fuzz input by prost — the same decoding the
//! server applies to bytes off the wire. Properties: no panic; a batched reply accounts for
//! every item exactly once; the load table's invariants hold after every call; a Session ends
//! with an error status on undecodable frames and answers every decodable one.

mod common;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use bolero::{TypeGenerator, check, produce};
use common::*;
use http_body_util::Full;
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::Slot;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::Switch;
use mlcc_switch_emu::config::ServeArgs;
use mlcc_switch_emu::grpc::{Shared, SwitchService};
use mlcc_switch_emu::metrics::Metrics;
use mlcc_switch_emu::{Clock, Emulator, ManualClock};
use prost::Message;
use tokio_stream::StreamExt;
use tonic::Request;
use tonic::codec::Streaming;

#[path = "../../core/tests/support/toml_doc.rs"]
mod toml_doc;

struct Fixture {
    rt: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    svc: SwitchService,
}

fn fixture() -> Fixture {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new(slots().start_ns(Slot(START))));
    let emu = Emulator::new(
        &topology(),
        "sw1",
        slots(),
        FeedbackMode::Precedence,
        Slot(START),
    )
    .unwrap();
    let shared = Arc::new(Shared::new(
        emu,
        clock as Arc<dyn Clock>,
        Arc::new(Metrics::new()),
    ));
    let svc = SwitchService::new(shared.clone());
    Fixture { rt, shared, svc }
}

fn check_table(shared: &Shared) {
    if let Err(e) = shared.lock().table().check_invariants() {
        panic!("load table broken: {e}");
    }
}

/// One RPC: its request decoded from the bytes, called through the service trait.
fn call(f: &Fixture, kind: u8, bytes: &[u8]) {
    let svc = &f.svc;
    match kind % 4 {
        0 => {
            let Ok(req) = pb::FetchFeedbackRequest::decode(bytes) else {
                return;
            };
            let n = req.flows.len();
            if let Ok(r) = f.rt.block_on(svc.fetch_feedback(Request::new(req))) {
                let r = r.into_inner();
                assert_eq!(r.flows.len() + r.rejected.len(), n);
                for l in r.flows.iter().flat_map(|f| &f.links) {
                    assert_eq!(l.load_bytes_per_sec.len(), K);
                    assert!(
                        l.load_bytes_per_sec
                            .iter()
                            .all(|x| x.is_finite() && *x >= 0.0)
                    );
                }
            }
        }
        1 => {
            let Ok(req) = pb::UpdateScheduleRequest::decode(bytes) else {
                return;
            };
            let n = req.flows.len();
            if let Ok(r) = f.rt.block_on(svc.update_schedule(Request::new(req))) {
                let r = r.into_inner();
                assert_eq!(r.accepted as usize + r.rejected.len(), n);
            }
        }
        2 => {
            let Ok(req) = pb::TableRequest::decode(bytes) else {
                return;
            };
            if let Ok(r) = f.rt.block_on(svc.table(Request::new(req))) {
                let r = r.into_inner();
                let entries: usize = r.links.iter().map(|l| l.entries.len()).sum();
                assert!(entries <= mlcc_switch_emu::emulator::DEFAULT_TABLE_ENTRIES.max(1 << 32));
            }
        }
        _ => {
            let Ok(req) = pb::DescribeRequest::decode(bytes) else {
                return;
            };
            let r = f.rt.block_on(svc.describe(Request::new(req))).unwrap();
            assert_eq!(r.into_inner().horizon as usize, K);
        }
    }
    check_table(&f.shared);
}

/// Input: a sequence of `[kind][len][message bytes]` records, so one input can book entries and
/// then query them. The corpus holds encoded valid requests.
#[test]
fn rpc_bytes() {
    let f = std::panic::AssertUnwindSafe(fixture());
    check!().for_each(|mut b: &[u8]| {
        while let [kind, len, rest @ ..] = b {
            let len = (*len as usize).min(rest.len());
            call(&f, *kind, &rest[..len]);
            b = &rest[len..];
        }
    });
}

/// A gRPC message frame: flag byte, big-endian length, message.
fn frame(out: &mut VecDeque<u8>, compressed: u8, len: u32, msg: &[u8]) {
    out.push_back(compressed);
    out.extend(len.to_be_bytes());
    out.extend(msg);
}

/// Runs one Session over `body` (already framed) and checks its replies; returns them.
fn session(
    f: &Fixture,
    body: VecDeque<u8>,
    sent: &[u64],
) -> Vec<Result<pb::SessionReply, tonic::Status>> {
    let inbound = Streaming::new_request(
        tonic_prost::ProstDecoder::<pb::SessionRequest>::default(),
        Full::new(body),
        None,
        Some(mlcc_proto::MAX_MESSAGE_BYTES),
    );
    let replies = f.rt.block_on(async {
        let out = f.svc.session(Request::new(inbound)).await.unwrap();
        out.into_inner().collect::<Vec<_>>().await
    });
    for r in replies.iter().flatten() {
        assert!(sent.contains(&r.seq), "reply to seq {} never sent", r.seq);
        assert!(r.reply.is_some());
    }
    // Only the last item may be an error status: the session ends there.
    if let Some(i) = replies.iter().position(Result::is_err) {
        assert_eq!(
            i,
            replies.len() - 1,
            "replies after the session's end status"
        );
    }
    check_table(&f.shared);
    replies
}

/// The raw bytes of a Session request body: framing, lengths and messages all arbitrary.
#[test]
fn session_bytes() {
    let f = std::panic::AssertUnwindSafe(fixture());
    check!().for_each(|b: &[u8]| {
        session(&f, b.iter().copied().collect(), &[]);
    });
}

#[derive(Debug, TypeGenerator)]
enum Frame {
    /// A well-formed frame around a message built from the fields below.
    Fetch {
        seq: u64,
        host: u8,
        links: u8,
        flows: u8,
    },
    Update {
        seq: u64,
        host: u8,
        links: u8,
        rate: f64,
        first: i8,
        flows: u8,
    },
    /// A session message naming no request.
    Empty { seq: u64 },
    /// A frame around arbitrary bytes.
    Garbage(#[generator(produce::<Vec<u8>>().with().len(0usize..64))] Vec<u8>),
    /// A frame whose length says more than follows, or more than the size limit.
    Lying { len: u32 },
    /// The compression flag set although nothing was negotiated.
    Compressed,
}

fn host(i: u8) -> String {
    ["h1", "h2", "h3", "h4", "h9", "", "bad host"][i as usize % 7].to_string()
}

fn links(i: u8) -> Vec<String> {
    let all = ["sw1->h1", "sw1->h2", "h1->sw1", "sw1->h9", ""];
    (0..i % 4)
        .map(|j| all[(i as usize + j as usize) % all.len()].to_string())
        .collect()
}

impl Frame {
    fn encode(&self, out: &mut VecDeque<u8>, sent: &mut Vec<u64>) {
        use pb::session_request::Request as R;
        let msg = |seq: u64, request: Option<R>| {
            pb::SessionRequest {
                seq,
                request,
                deadline_unix_ns: 0,
            }
            .encode_to_vec()
        };
        let m = match self {
            Frame::Fetch {
                seq,
                host: h,
                links: l,
                flows,
            } => {
                sent.push(*seq);
                msg(
                    *seq,
                    Some(R::FetchFeedback(pb::FetchFeedbackRequest {
                        host: host(*h),
                        slot: 0,
                        flows: (0..flows % 8)
                            .map(|i| pb::FeedbackQuery {
                                flow_id: format!("j/h1>h{}/agg", i % 3 + 2),
                                links: links(l.wrapping_add(i)),
                                rank: START,
                                committed: false,
                            })
                            .collect(),
                    })),
                )
            }
            Frame::Update {
                seq,
                host: h,
                links: l,
                rate,
                first,
                flows,
            } => {
                sent.push(*seq);
                msg(
                    *seq,
                    Some(R::UpdateSchedule(pb::UpdateScheduleRequest {
                        host: host(*h),
                        slot: 0,
                        flows: (0..flows % 8)
                            .map(|i| pb::ScheduleItem {
                                flow_id: format!("j/h1>h{}/agg", i % 3 + 2),
                                links: links(l.wrapping_add(i)),
                                first_slot: START.wrapping_add_signed(*first as i64),
                                rates_bytes_per_sec: vec![*rate; (i as usize) % (K + 2)],
                                rank: START,
                                done: i % 5 == 4,
                            })
                            .collect(),
                    })),
                )
            }
            Frame::Empty { seq } => {
                sent.push(*seq);
                msg(*seq, None)
            }
            Frame::Garbage(b) => {
                // Arbitrary bytes are often a valid message (protobuf skips unknown fields).
                if let Ok(m) = pb::SessionRequest::decode(&b[..]) {
                    sent.push(m.seq);
                }
                b.clone()
            }
            Frame::Lying { len } => {
                if *len == 0 {
                    sent.push(0); // an empty message: seq 0, no request
                }
                frame(out, 0, *len, &[0; 8]);
                return;
            }
            Frame::Compressed => {
                frame(out, 1, 2, &[8, 1]);
                return;
            }
        };
        frame(out, 0, m.len() as u32, &m);
    }
}

/// Sessions of well-formed, malformed and lying frames in any order.
#[test]
fn session_frames() {
    let f = std::panic::AssertUnwindSafe(fixture());
    check!()
        .with_generator(produce::<Vec<Frame>>().with().len(0usize..12))
        .for_each(|frames| {
            let mut body = VecDeque::new();
            let mut sent = Vec::new();
            for fr in frames {
                fr.encode(&mut body, &mut sent);
            }
            let replies = session(&f, body, &sent);
            // Until the first frame that cannot be decoded, every message gets its reply.
            let good = frames
                .iter()
                .take_while(|fr| {
                    matches!(
                        fr,
                        Frame::Fetch { .. } | Frame::Update { .. } | Frame::Empty { .. }
                    )
                })
                .count();
            let answered = replies.iter().filter(|r| r.is_ok()).count();
            assert!(
                answered >= good,
                "{answered} replies for {good} good messages"
            );
        });
}

/// A config file per target and process, rewritten for every input.
fn config_path(target: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mlcc-fuzz-{target}-{}.toml", std::process::id()))
}

fn check_config(path: &PathBuf, text: &[u8]) -> bool {
    std::fs::write(path, text).unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        ..Default::default()
    };
    match args.resolve() {
        Ok(c) => {
            assert!(!c.switch.is_empty() || text.windows(8).any(|w| w == b"switch ="));
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

const SWITCHD_SEEDS: &[&str] = &[
    include_str!("../../deploy/switchd.example.toml"),
    "topology = \"t.toml\"\nswitch = \"sw1\"\ntau = \"20ms\"\nhorizon = 4\nfeedback_mode = \"all-others\"\nworker_threads = 1\nlog_format = \"json\"\n",
];

const SWITCHD_WORDS: toml_doc::Vocabulary = toml_doc::Vocabulary {
    tables: &["switch", "peers", "x"],
    keys: &[
        "listen",
        "metrics_listen",
        "topology",
        "switch",
        "tau",
        "horizon",
        "feedback_mode",
        "log_format",
        "worker_threads",
    ],
    strings: &[
        "0.0.0.0:50061",
        "[::1]:1",
        "127.0.0.1:99999",
        "t.toml",
        "sw1",
        "60ms",
        "9ms",
        "1s",
        "1.000000001s",
        "1e3ms",
        "precedence",
        "all-others",
        "human",
        "json",
        "",
    ],
};

#[test]
fn switchd_config_mutated() {
    let path = config_path("switchd_config_mutated");
    check!().with_type::<toml_doc::Mutated>().for_each(|m| {
        check_config(&path, m.render(SWITCHD_SEEDS, &SWITCHD_WORDS).as_bytes());
    });
    let _ = std::fs::remove_file(path);
}

#[test]
fn switchd_config_bytes() {
    let path = config_path("switchd_config_bytes");
    check!().for_each(|b: &[u8]| {
        check_config(&path, b);
    });
    let _ = std::fs::remove_file(path);
}

/// Writes the seed corpus of `rpc_bytes` (valid requests of each kind); run with
/// `cargo test -p mlcc-switch-emu --test fuzz -- --ignored write_rpc_corpus` after a protocol
/// change.
#[test]
#[ignore = "writes the corpus into the source tree"]
fn write_rpc_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/__fuzz__/rpc_bytes/corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let item = |flow: &str, link: &str| pb::ScheduleItem {
        flow_id: flow.into(),
        links: vec![link.into()],
        first_slot: START,
        rates_bytes_per_sec: vec![1e8; K],
        rank: START,
        done: false,
    };
    let update = pb::UpdateScheduleRequest {
        host: "h1".into(),
        slot: START,
        flows: vec![
            item("j/h1>h2/agg", "sw1->h2"),
            item("j/h1>h3/agg", "sw1->h3"),
        ],
    };
    let fetch = pb::FetchFeedbackRequest {
        host: "h2".into(),
        slot: START,
        flows: vec![pb::FeedbackQuery {
            flow_id: "k/h2>h3/agg".into(),
            links: vec!["sw1->h3".into()],
            rank: START,
            committed: false,
        }],
    };
    let table = pb::TableRequest {
        link: "sw1->h2".into(),
        max_entries: 5,
    };
    let rec = |kind: u8, m: Vec<u8>| {
        let mut v = vec![kind, m.len().min(255) as u8];
        v.extend(m);
        v
    };
    let files = [
        ("update", rec(1, update.encode_to_vec())),
        ("fetch", rec(0, fetch.encode_to_vec())),
        ("table", rec(2, table.encode_to_vec())),
        ("describe", rec(3, Vec::new())),
        (
            "update-then-fetch",
            [
                rec(1, update.encode_to_vec()),
                rec(0, fetch.encode_to_vec()),
                rec(2, Vec::new()),
            ]
            .concat(),
        ),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
