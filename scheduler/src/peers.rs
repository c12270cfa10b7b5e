//! The sender's side of the per-slot exchange with each peer: one long-lived `ExchangeStream` per
//! peer (crate::stream), and the unary `Exchange` for a peer that does not speak the stream (an
//! mlccd from before it, during a rolling upgrade), tried again on a stream now and then.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use pb::peer_reply::Reply;
use tonic::Code;
use tonic::transport::Channel;

use crate::daemon::{Outcome, call};
use crate::stream::{Numbered, NumberedStream, StreamFailure};

/// Slots a peer that refused the stream is called unary before the stream is tried again
/// (30 s at τ = 30 ms).
pub const UNARY_SLOTS: u64 = 1000;

impl Numbered for pb::PeerReply {
    fn seq(&self) -> u64 {
        self.seq
    }
}

type ExchangeStream = NumberedStream<pb::PeerRequest, pb::PeerReply>;

/// How this host reaches one peer.
enum Way {
    Stream(Arc<ExchangeStream>),
    /// The peer refused the stream as unknown: unary calls until this slot.
    Unary {
        until: u64,
    },
}

/// Each peer's way, by address.
#[derive(Default)]
pub(crate) struct PeerStreams(HashMap<String, Way>);

/// One exchange's route: the peer's stream, or none for a unary call on the channel.
pub(crate) struct Route {
    stream: Option<Arc<ExchangeStream>>,
    channel: Channel,
}

impl PeerStreams {
    /// How to reach the peer at `addr` in `slot`, opening a stream on `channel` where none is
    /// open.
    pub(crate) fn route(&mut self, addr: &str, slot: u64, channel: Channel) -> Route {
        let stream = match self.0.get(addr) {
            Some(Way::Stream(s)) if s.refused() == Some(Code::Unimplemented) => {
                tracing::info!(
                    peer = addr,
                    "peer does not serve ExchangeStream; exchanging by unary calls"
                );
                self.0.insert(
                    addr.to_string(),
                    Way::Unary {
                        until: slot.saturating_add(UNARY_SLOTS),
                    },
                );
                None
            }
            Some(Way::Stream(s)) if s.is_alive() => Some(s.clone()),
            Some(Way::Unary { until }) if slot < *until => None,
            _ => {
                let s = Arc::new(open(channel.clone()));
                self.0.insert(addr.to_string(), Way::Stream(s.clone()));
                Some(s)
            }
        };
        Route { stream, channel }
    }
}

fn open(channel: Channel) -> ExchangeStream {
    NumberedStream::open("exchange stream", move |requests| async move {
        client(channel).exchange_stream(requests).await
    })
}

fn client(channel: Channel) -> pb::peer_client::PeerClient<Channel> {
    pb::peer_client::PeerClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// One exchange on its route, within `deadline`; its outcome and how long it took. A stream
/// that has not answered yet keeps a copy of the request, so that a peer refusing the stream
/// is called unary in the same slot.
pub(crate) async fn exchange(
    route: Route,
    req: pb::ExchangeRequest,
    deadline: Duration,
) -> (Outcome<pb::ExchangeReply>, Duration) {
    let Some(stream) = route.stream else {
        return call(deadline, client(route.channel).exchange(req)).await;
    };
    let t0 = Instant::now();
    let copy = (!stream.answered()).then(|| req.clone());
    let reply = stream
        .request(deadline, |seq| pb::PeerRequest {
            seq,
            exchange: Some(req),
        })
        .await;
    let out = match reply {
        Ok(pb::PeerReply {
            reply: Some(Reply::Exchange(r)),
            ..
        }) => Outcome::Ok(r),
        Ok(pb::PeerReply {
            reply: Some(Reply::Error(e)),
            ..
        }) => Outcome::Error(format!(
            "peer refused the exchange (code {}): {}",
            e.code, e.message
        )),
        Ok(pb::PeerReply { reply: None, .. }) => {
            Outcome::Error("the peer answered with an empty reply".into())
        }
        Err(StreamFailure::Timeout) => Outcome::Timeout,
        Err(StreamFailure::Ended(why)) => match copy {
            Some(req) if stream.refused() == Some(Code::Unimplemented) => {
                let left = deadline.saturating_sub(t0.elapsed());
                let (out, _) = call(left, client(route.channel).exchange(req)).await;
                out
            }
            _ => Outcome::Error(why),
        },
    };
    (out, t0.elapsed())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio_stream::wrappers::TcpListenerStream;

    use super::*;

    /// An mlccd from before ExchangeStream: unary exchanges only, counted.
    #[derive(Clone, Default)]
    struct OldPeer(Arc<AtomicUsize>);

    #[tonic::async_trait]
    impl pb::peer_server::Peer for OldPeer {
        async fn exchange(
            &self,
            req: tonic::Request<pb::ExchangeRequest>,
        ) -> Result<tonic::Response<pb::ExchangeReply>, tonic::Status> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(tonic::Response::new(pb::ExchangeReply {
                receiver_host: "old".into(),
                slot: req.into_inner().slot,
                flows: vec![],
            }))
        }

        type ExchangeStreamStream =
            tokio_stream::wrappers::ReceiverStream<Result<pb::PeerReply, tonic::Status>>;

        async fn exchange_stream(
            &self,
            _req: tonic::Request<tonic::Streaming<pb::PeerRequest>>,
        ) -> Result<tonic::Response<Self::ExchangeStreamStream>, tonic::Status> {
            // What tonic's router answers for a method the server does not know.
            Err(tonic::Status::unimplemented("no such method"))
        }
    }

    async fn serve(peer: OldPeer) -> Channel {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::peer_server::PeerServer::new(peer))
                .serve_with_incoming(TcpListenerStream::new(l)),
        );
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy()
    }

    fn request(slot: u64) -> pb::ExchangeRequest {
        pb::ExchangeRequest {
            sender_host: "h2".into(),
            slot,
            flows: vec![],
        }
    }

    const DEADLINE: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_peer_without_the_stream_is_answered_unary_in_the_same_slot_and_tried_again_later() {
        let peer = OldPeer::default();
        let ch = serve(peer.clone()).await;
        let mut streams = PeerStreams::default();

        let route = streams.route("old", 1, ch.clone());
        assert!(route.stream.is_some(), "a stream is tried first");
        let (out, _) = exchange(route, request(1), DEADLINE).await;
        let Outcome::Ok(r) = out else {
            panic!("the refused stream's exchange was not made unary")
        };
        assert_eq!((r.receiver_host.as_str(), r.slot), ("old", 1));

        let route = streams.route("old", 2, ch.clone());
        assert!(route.stream.is_none(), "a refusing peer is called unary");
        let (out, _) = exchange(route, request(2), DEADLINE).await;
        assert!(matches!(out, Outcome::Ok(r) if r.slot == 2));
        assert_eq!(peer.0.load(Ordering::Relaxed), 2, "one unary call a slot");

        let route = streams.route("old", 2 + UNARY_SLOTS - 1, ch.clone());
        assert!(route.stream.is_none());
        let route = streams.route("old", 2 + UNARY_SLOTS, ch);
        assert!(route.stream.is_some(), "the stream is tried again");
    }
}
