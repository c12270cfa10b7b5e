//! mlcc-switchd over a real TCP socket: a tonic client against the server on 127.0.0.1.

use crate::common;

use common::*;
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::Slot;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_client::SwitchClient;
use pb::RejectReason as R;
use tonic::Code;
use tonic::transport::Channel;

const L2: &str = "sw1->h2";
const L3: &str = "sw1->h3";

#[tokio::test]
async fn update_then_feedback_round_trip_and_replace() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut c = h.client().await;
    let r = publish(
        &mut c,
        "h1",
        vec![item("a", L2, START, &[1.0, 2.0, 3.0, 4.0])],
    )
    .await;
    assert_eq!((r.accepted, r.switch_slot), (1, START));
    assert!(r.rejected.is_empty());

    let fb = c
        .fetch_feedback(pb::FetchFeedbackRequest {
            host: "h3".into(),
            slot: START,
            flows: vec![query("b", &[L2, L3], 0)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((fb.switch_slot, fb.from_slot), (START, START));
    let links = &fb.flows[0].links;
    assert_eq!(links[0].link, L2);
    assert_eq!(links[0].capacity_bytes_per_sec, CAP);
    assert_eq!(links[0].load_bytes_per_sec, vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(links[1].load_bytes_per_sec, vec![0.0; K]);

    // Republishing replaces, it does not add.
    publish(&mut c, "h1", vec![item("a", L2, START, &[5.0])]).await;
    assert_eq!(
        load(&mut c, "h3", query("b", &[L2], 0), 0).await,
        vec![5.0, 0.0, 0.0, 0.0]
    );
    // A later window: from the next slot on.
    publish(&mut c, "h1", vec![item("a", L2, START + 1, &[7.0, 8.0])]).await;
    assert_eq!(
        load(&mut c, "h3", query("b", &[L2], 0), START + 1).await,
        vec![7.0, 8.0, 0.0, 0.0]
    );
    h.check_invariants();
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn feedback_excludes_the_asking_flow_and_the_asking_host() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut c = h.client().await;
    publish(
        &mut c,
        "h1",
        vec![
            item("a", L2, START, &[10.0; 4]),
            item("c", L2, START, &[1.0; 4]),
        ],
    )
    .await;
    publish(&mut c, "h4", vec![item("d", L2, START, &[100.0; 4])]).await;
    // h1 asking for its own flow a: its own entries (a and c) are left out; d remains.
    assert_eq!(
        load(&mut c, "h1", query("a", &[L2], 0), 0).await,
        vec![100.0; 4]
    );
    // Another host asking about flow a: a's own entry goes, c and d remain.
    assert_eq!(
        load(&mut c, "h3", query("a", &[L2], 0), 0).await,
        vec![101.0; 4]
    );
    // A new flow of a third host sees everything.
    assert_eq!(
        load(&mut c, "h3", query("new", &[L2], 0), 0).await,
        vec![111.0; 4]
    );
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn precedence_mode_counts_only_earlier_flows() {
    let h = Harness::start(FeedbackMode::Precedence).await;
    let mut c = h.client().await;
    let mut early = item("b-early", L2, START, &[10.0; 4]);
    early.rank = 5;
    let mut late = item("a-late", L2, START, &[20.0; 4]);
    late.rank = 6;
    publish(&mut c, "h1", vec![early]).await;
    publish(&mut c, "h3", vec![late]).await;
    assert_eq!(
        load(&mut c, "h4", query("a-late", &[L2], 6), 0).await,
        vec![10.0; 4]
    );
    assert_eq!(
        load(&mut c, "h4", query("b-early", &[L2], 5), 0).await,
        vec![0.0; 4]
    );
    // Same iteration start: the flow id breaks the tie ("a-late" < "b-early").
    assert_eq!(
        load(&mut c, "h4", query("b-early", &[L2], 6), 0).await,
        vec![20.0; 4]
    );
    h.running.stop().await.unwrap();
}

async fn committed_of(c: &mut SwitchClient<Channel>, q: pb::FeedbackQuery) -> Option<f64> {
    let r = c
        .fetch_feedback(pb::FetchFeedbackRequest {
            host: "h1".into(),
            slot: START,
            flows: vec![q],
        })
        .await
        .unwrap()
        .into_inner();
    r.flows[0].links[0].committed_bytes_per_sec
}

#[tokio::test]
async fn a_query_that_asks_gets_what_lower_ranked_flows_committed_for_its_slot() {
    let h = Harness::start(FeedbackMode::Precedence).await;
    let mut c = h.client().await;
    let mut low = item("z-low", L2, START, &[30.0; 4]);
    low.rank = 9;
    publish(&mut c, "h3", vec![low]).await;
    let ask = |committed| pb::FeedbackQuery {
        committed,
        ..query("a-high", &[L2], 1)
    };
    assert_eq!(committed_of(&mut c, ask(true)).await, Some(30.0));
    assert_eq!(committed_of(&mut c, ask(false)).await, None);
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn entries_expire_after_k_slots_and_done_withdraws() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut c = h.client().await;
    publish(
        &mut c,
        "h1",
        vec![
            item("a", L2, START, &[10.0; 4]),
            item("b", L2, START, &[1.0; 4]),
        ],
    )
    .await;
    let mut gone = item("b", L2, START, &[]);
    gone.done = true;
    assert_eq!(publish(&mut c, "h1", vec![gone]).await.accepted, 1);
    h.set_slot(START + K as u64 - 1);
    assert_eq!(
        load(&mut c, "h3", query("x", &[L2], 0), 0).await,
        vec![10.0, 0.0, 0.0, 0.0]
    );
    h.set_slot(START + K as u64);
    assert_eq!(
        load(&mut c, "h3", query("x", &[L2], 0), 0).await,
        vec![0.0; 4]
    );
    let t = c
        .table(pb::TableRequest {
            link: L2.into(),
            max_entries: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.links[0].entry_count, 0);
    h.check_invariants();
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_items_are_rejected_with_reasons_and_valid_ones_apply() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut c = h.client().await;
    let mut two_links = item("two", L2, START, &[1.0]);
    two_links.links.push("sw1->h9".into());
    let items = vec![
        item("ok", L2, START, &[3.0; 4]),
        item("nan", L2, START, &[f64::NAN]),
        item("inf", L2, START, &[f64::INFINITY]),
        item("neg", L2, START, &[-1.0]),
        item("huge", L2, START, &[4.0 * CAP + 1.0]),
        item("many", L2, START, &[1.0; K + 1]),
        item("far", L2, START + 100, &[1.0]),
        item("unknown", "tor9->h1", START, &[1.0]),
        item("uplink", "h1->sw1", START, &[1.0]),
        two_links,
        item(&"x".repeat(129), L2, START, &[1.0]),
        item("", L2, START, &[1.0]),
        pb::ScheduleItem {
            flow_id: "nolinks".into(),
            ..Default::default()
        },
    ];
    let r = publish(&mut c, "h1", items).await;
    assert_eq!(r.accepted, 1);
    let got: Vec<(u32, i32)> = r.rejected.iter().map(|x| (x.index, x.reason)).collect();
    let want = vec![
        (1, R::NotFinite),
        (2, R::NotFinite),
        (3, R::Negative),
        (4, R::TooLarge),
        (5, R::TooManyRates),
        (6, R::SlotOutOfWindow),
        (7, R::UnknownLink),
        (8, R::UnknownLink),
        (9, R::UnknownLink),
        (10, R::InvalidFlowId),
        (11, R::InvalidFlowId),
        (12, R::NoLinks),
    ];
    let want: Vec<(u32, i32)> = want.into_iter().map(|(i, r)| (i, r as i32)).collect();
    assert_eq!(got, want);
    assert!(
        r.rejected[6].message.contains("unknown link"),
        "{}",
        r.rejected[6].message
    );
    assert_eq!(r.rejected[8].link, "sw1->h9");
    assert!(
        r.rejected[3].message.contains("4x"),
        "{}",
        r.rejected[3].message
    );
    // An item is all or nothing: "two" booked nothing on sw1->h2.
    assert_eq!(
        load(&mut c, "h3", query("x", &[L2], 0), 0).await,
        vec![3.0; 4]
    );

    // Feedback queries are checked the same way.
    let fb = c
        .fetch_feedback(pb::FetchFeedbackRequest {
            host: "h3".into(),
            slot: 0,
            flows: vec![
                query("x", &[L2], 0),
                query("y", &["nope"], 0),
                query("", &[L2], 0),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fb.flows.len(), 1);
    let reasons: Vec<i32> = fb.rejected.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        vec![R::UnknownLink as i32, R::InvalidFlowId as i32]
    );
    h.check_invariants();
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn call_level_faults_are_invalid_argument() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let mut c = h.client().await;
    let too_many = c
        .fetch_feedback(pb::FetchFeedbackRequest {
            host: "h1".into(),
            slot: 0,
            flows: vec![query("a", &[L2], 0); 65_537],
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert!(
        too_many.message().contains("65536"),
        "{}",
        too_many.message()
    );
    for host in ["", "nobody", "h\u{7}1"] {
        let e = c
            .update_schedule(pb::UpdateScheduleRequest {
                host: host.into(),
                slot: 0,
                flows: vec![item("a", L2, START, &[1.0])],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{host:?}: {e}");
    }
    let e = c
        .table(pb::TableRequest {
            link: "nope".into(),
            max_entries: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    h.running.stop().await.unwrap();
}

/// Raw bytes for a method, so the test can send what no well-behaved client would.
async fn raw_call(addr: std::net::SocketAddr, path: &'static str, body: Vec<u8>) -> tonic::Status {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Raw {
        // Field 1 is `host` (a string) in both requests: bytes let the test send invalid UTF-8.
        #[prost(bytes = "vec", tag = "1")]
        host: Vec<u8>,
        // Field 3 is `flows` (a message): a varint there is a wire-type error.
        #[prost(uint64, optional, tag = "3")]
        flows: Option<u64>,
        #[prost(bytes = "vec", tag = "99")]
        pad: Vec<u8>,
    }
    let raw = if body.is_empty() {
        Raw {
            host: vec![0xff, 0xfe],
            flows: None,
            pad: vec![],
        }
    } else {
        Raw {
            host: b"h1".to_vec(),
            flows: (body == b"wire").then_some(7),
            pad: if body == b"wire" { vec![] } else { body },
        }
    };
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Raw, pb::FetchFeedbackReply>::default();
    grpc.unary(
        tonic::Request::new(raw),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        codec,
    )
    .await
    .unwrap_err()
}

#[tokio::test]
async fn malformed_and_oversized_requests_fail_cleanly() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    for path in [
        "/mlcc.v1.Switch/FetchFeedback",
        "/mlcc.v1.Switch/UpdateSchedule",
    ] {
        let bad_utf8 = raw_call(h.addr(), path, vec![]).await;
        assert_eq!(bad_utf8.code(), Code::Internal, "{bad_utf8}");
        let bad_wire = raw_call(h.addr(), path, b"wire".to_vec()).await;
        assert_eq!(bad_wire.code(), Code::Internal, "{bad_wire}");
        // Over the 16 MiB decoding limit.
        let big = raw_call(h.addr(), path, vec![0u8; 17 << 20]).await;
        assert!(
            matches!(big.code(), Code::OutOfRange | Code::ResourceExhausted),
            "{big}"
        );
    }
    // Still serving.
    let mut c = h.client().await;
    assert_eq!(
        publish(&mut c, "h1", vec![item("a", L2, START, &[1.0])])
            .await
            .accepted,
        1
    );
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn restart_loses_the_table_and_republishing_rebuilds_it_within_k_slots() {
    let h = Harness::start(FeedbackMode::AllOthers).await;
    let addr = h.addr();
    let mut publisher = client(addr).await;
    let mut asker = client(addr).await;
    let plan = [10.0, 20.0, 30.0, 40.0];
    let mut slot = START;
    publish(&mut publisher, "h1", vec![item("a", L2, slot, &plan)]).await;
    assert_eq!(load(&mut asker, "h3", query("b", &[L2], 0), 0).await, plan);
    h.running.stop().await.unwrap();

    // A new server on the same port starts empty.
    slot += 1;
    let h = Harness::start_on(addr, FeedbackMode::AllOthers, Slot(slot)).await;
    let mut rebuilt_at = None;
    for _ in 0..K {
        h.set_slot(slot);
        // The clients' connections died with the old server: a call may fail once while the
        // channel reconnects, as a real scheduler's would; it tries again next slot.
        let published = publisher
            .update_schedule(pb::UpdateScheduleRequest {
                host: "h1".into(),
                slot,
                flows: vec![item("a", L2, slot, &plan)],
            })
            .await;
        let fb = asker
            .fetch_feedback(pb::FetchFeedbackRequest {
                host: "h3".into(),
                slot,
                flows: vec![query("b", &[L2], 0)],
            })
            .await;
        if let (Ok(_), Ok(fb)) = (published, fb)
            && fb.get_ref().flows[0].links[0].load_bytes_per_sec == plan
        {
            rebuilt_at = Some(slot);
            break;
        }
        slot += 1;
    }
    let rebuilt_at = rebuilt_at.expect("full feedback within K slots of the restart");
    assert!(rebuilt_at < START + 1 + K as u64);
    h.running.stop().await.unwrap();
}

#[tokio::test]
async fn describe_health_and_metrics() {
    let h = Harness::start(FeedbackMode::Precedence).await;
    let mut c = h.client().await;
    let d = c
        .describe(pb::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.switch_name, "sw1");
    assert_eq!(d.horizon as usize, K);
    assert_eq!(d.slot_ns, TAU.as_nanos() as u64);
    assert_eq!(d.switch_slot, START);
    assert_eq!(d.feedback_mode, pb::FeedbackMode::Precedence as i32);
    let names: Vec<&str> = d.links.iter().map(|l| l.link.as_str()).collect();
    assert_eq!(names, vec!["sw1->h1", "sw1->h2", "sw1->h3", "sw1->h4"]);

    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(ch);
    let s = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "mlcc.v1.Switch".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        s.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    publish(
        &mut c,
        "h1",
        vec![
            item("a", L2, START, &[f64::NAN]),
            item("b", L2, START, &[7.0]),
        ],
    )
    .await;
    h.running.shared.tick();
    let text = http_get(h.running.metrics_addr.unwrap(), "/metrics").await;
    for want in [
        "mlcc_switch_rpcs_total{method=\"update_schedule\",code=\"ok\"} 1",
        "mlcc_switch_rejected_items_total{method=\"update_schedule\",reason=\"not_finite\"} 1",
        "mlcc_switch_link_entries{link=\"sw1->h2\"} 1",
        "mlcc_switch_link_load_bytes_per_sec{link=\"sw1->h2\"} 7",
        "mlcc_switch_rpc_duration_seconds_bucket",
        &format!("mlcc_switch_slot {START}"),
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    h.running.stop().await.unwrap();
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(
        out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"),
        "{out}"
    );
    out
}
