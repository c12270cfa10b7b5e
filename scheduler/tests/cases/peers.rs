//! The Peer service's ExchangeStream served by a real mlccd over loopback: each message answered
//! with its seq, a faulty one refused alone, and the stream ended when mlccd stops.

use std::time::Duration;

use mlcc_core::slot::SlotConfig;
use mlcc_proto::v1 as pb;
use mlcc_scheduler::config::Config;
use mlcc_scheduler::daemon::Running;
use pb::peer_reply::Reply;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const DEADLINE: Duration = Duration::from_secs(5);

async fn mlccd(dir: &std::path::Path) -> Running {
    let pl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slots = SlotConfig::new(Duration::from_millis(20), 4).unwrap();
    let cfg = Config {
        rpc_deadline: Duration::from_millis(5),
        ..crate::common::daemon_config("h1", dir, pl.local_addr().unwrap(), slots)
    };
    crate::common::start_daemon(cfg, pl).await
}

fn exchange(seq: u64, slot: u64) -> pb::PeerRequest {
    pb::PeerRequest {
        seq,
        exchange: Some(pb::ExchangeRequest {
            sender_host: "h2".into(),
            slot,
            flows: vec![],
        }),
    }
}

/// A raw client's stream to `running`: the sender of its messages and the replies.
async fn open(
    running: &Running,
) -> (
    mpsc::Sender<pb::PeerRequest>,
    tonic::Streaming<pb::PeerReply>,
) {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", running.peer_addr))
        .unwrap()
        .connect_lazy();
    let (tx, rx) = mpsc::channel(8);
    let replies = tokio::time::timeout(
        DEADLINE,
        pb::peer_client::PeerClient::new(ch).exchange_stream(ReceiverStream::new(rx)),
    )
    .await
    .expect("no answer to the stream's opening")
    .expect("mlccd refused the stream")
    .into_inner();
    (tx, replies)
}

async fn next(
    replies: &mut tonic::Streaming<pb::PeerReply>,
) -> Result<pb::PeerReply, tonic::Status> {
    tokio::time::timeout(DEADLINE, replies.message())
        .await
        .expect("no reply within the deadline")
        .map(|m| m.expect("stream closed without a status"))
}

#[tokio::test]
async fn a_peer_answers_each_stream_message_with_its_seq_and_refuses_a_faulty_one_alone() {
    let dir = tempfile::tempdir().unwrap();
    let running = mlccd(dir.path()).await;
    let (tx, mut replies) = open(&running).await;
    tx.send(exchange(7, 1)).await.unwrap();
    tx.send(pb::PeerRequest {
        seq: 8,
        exchange: None,
    })
    .await
    .unwrap();
    tx.send(exchange(9, 2)).await.unwrap();
    let r = next(&mut replies).await.unwrap();
    assert_eq!(r.seq, 7);
    let Some(Reply::Exchange(e)) = r.reply else {
        panic!("seq 7: {r:?}")
    };
    assert_eq!(e.receiver_host, "h1");
    let r = next(&mut replies).await.unwrap();
    assert_eq!(r.seq, 8);
    let Some(Reply::Error(e)) = r.reply else {
        panic!("seq 8: {r:?}")
    };
    assert_eq!(e.code, tonic::Code::InvalidArgument as i32, "{e:?}");
    let r = next(&mut replies).await.unwrap();
    assert_eq!(r.seq, 9);
    assert!(matches!(r.reply, Some(Reply::Exchange(_))), "seq 9: {r:?}");
    running.stop().await;
}

#[tokio::test]
async fn stopping_mlccd_ends_its_peers_streams_instead_of_waiting_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let running = mlccd(dir.path()).await;
    let (tx, mut replies) = open(&running).await;
    tx.send(exchange(1, 1)).await.unwrap();
    assert_eq!(next(&mut replies).await.unwrap().seq, 1);
    // The sender keeps its side open: graceful shutdown must not wait for it.
    tokio::time::timeout(DEADLINE, running.stop())
        .await
        .expect("mlccd did not stop with a peer's stream open");
    let end = next(&mut replies).await.unwrap_err();
    assert_eq!(end.code(), tonic::Code::Unavailable, "{end:?}");
    drop(tx);
}
