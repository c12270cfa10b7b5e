//! Optional mTLS (docs/design.md §16, deploy/SECURITY.md) with certificates generated per test:
//! a real mlcc-switchd server and a real mlccd Peer server behind mTLS, reached the way mlccd
//! reaches them (`mlcc_daemon::tls::endpoint`, the Session stream, the Peer client).
//! Cluster members get through; a plaintext client, a TLS client without a certificate and a
//! client whose certificate another CA signed are refused; a client refuses a server whose
//! certificate its CA did not sign.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mlcc_core::Slot;
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::SlotConfig;
use mlcc_core::topology::Topology;
use mlcc_core::units::BytesPerSec;
use mlcc_daemon::tls::{Tls, TlsFiles, endpoint};
use mlcc_proto::v1 as pb;
use mlcc_scheduler::config::Config;
use mlcc_scheduler::session::Session;
use mlcc_switch_emu::{Clock, Emulator, ManualClock, server};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

const DEADLINE: Duration = Duration::from_secs(5);

/// A throwaway certificate authority.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// Writes `<name>.crt`/`<name>.key` (a leaf for 127.0.0.1 and localhost, usable as server
    /// and client) and this CA's certificate as `trust`'s CA file.
    fn leaf(&self, dir: &Path, name: &str, trust: &Ca) -> TlsFiles {
        let mut p = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let files = TlsFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join(format!("{name}-ca.crt")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, trust.issuer.pem()).unwrap();
        files
    }
}

fn slots() -> SlotConfig {
    SlotConfig::new(Duration::from_millis(20), 4).unwrap()
}

async fn switch_with_tls(tls: &Tls) -> server::Running {
    let topo = Topology::single_switch(2, BytesPerSec(1e9)).unwrap();
    let slot = Slot(1000);
    let emu = Emulator::new(&topo, "sw1", slots(), FeedbackMode::Precedence, slot).unwrap();
    let clock = Arc::new(ManualClock::new(slots().start_ns(slot)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    server::start_with_tls(emu, clock as Arc<dyn Clock>, listener, None, Some(tls))
        .await
        .unwrap()
}

/// A health check over `ep`: Ok(serving?) or the error text.
async fn health(ep: Endpoint) -> Result<bool, String> {
    let ch = tokio::time::timeout(DEADLINE, ep.connect())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e:?}"))?;
    let r = tokio::time::timeout(
        DEADLINE,
        HealthClient::new(ch).check(HealthCheckRequest {
            service: String::new(),
        }),
    )
    .await
    .map_err(|_| "call timed out".to_string())?
    .map_err(|s| format!("call: {s}"))?;
    Ok(r.into_inner().status == ServingStatus::Serving as i32)
}

#[tokio::test]
async fn switch_serves_cluster_members_only() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, foreign) = (Ca::new("mlcc cluster CA"), Ca::new("some other CA"));
    let switch_files = cluster.leaf(dir.path(), "switchd", &cluster);
    let mlccd_files = cluster.leaf(dir.path(), "mlccd", &cluster);
    // Signed by another CA, but trusting ours (so only the server can be the one refusing).
    let intruder_files = foreign.leaf(dir.path(), "intruder", &cluster);
    let switch = switch_with_tls(&Tls::load(&switch_files).unwrap()).await;
    let addr = switch.addr.to_string();
    let mlccd = Tls::load(&mlccd_files).unwrap();

    // A cluster member: health, then the Session stream mlccd uses every slot.
    assert_eq!(
        health(endpoint(&addr, Some(&mlccd)).unwrap()).await,
        Ok(true)
    );
    let ch = endpoint(&addr, Some(&mlccd)).unwrap().connect_lazy();
    let session = Session::open(ch);
    let reply = session
        .request(
            pb::session_request::Request::FetchFeedback(pb::FetchFeedbackRequest {
                host: "h1".into(),
                slot: 1000,
                flows: vec![],
            }),
            DEADLINE,
        )
        .await;
    match reply {
        Ok(pb::session_reply::Reply::FetchFeedback(r)) => assert_eq!(r.switch_slot, 1000),
        Ok(other) => panic!("wrong reply {other:?}"),
        Err(e) => panic!("session over mTLS failed: {e:?}"),
    }

    // Plaintext: the server speaks only TLS.
    let e = health(endpoint(&addr, None).unwrap()).await.unwrap_err();
    println!("plaintext client: {e}");
    // TLS but no client certificate: the server requires one.
    let ca = Certificate::from_pem(std::fs::read(&mlccd_files.ca).unwrap());
    let anonymous = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(ca))
        .unwrap();
    let e = health(anonymous).await.unwrap_err();
    println!("client without certificate: {e}");
    assert!(e.contains("CertificateRequired"), "{e}");
    // A certificate of another CA.
    let intruder = Tls::load(&intruder_files).unwrap();
    let e = health(endpoint(&addr, Some(&intruder)).unwrap())
        .await
        .unwrap_err();
    println!("client with a foreign certificate: {e}");
    assert!(e.contains("UnknownCA"), "{e}");
    // And the client side: a member that trusts only the other CA refuses this server.
    let wary_files = TlsFiles {
        ca: foreign.leaf(dir.path(), "ca-holder", &foreign).ca,
        ..mlccd_files.clone()
    };
    let wary = Tls::load(&wary_files).unwrap();
    let e = health(endpoint(&addr, Some(&wary)).unwrap())
        .await
        .unwrap_err();
    println!("client that does not trust the server's CA: {e}");
    assert!(e.contains("UnknownIssuer"), "{e}");
    // The refused clients did not break it for members.
    assert_eq!(
        health(endpoint(&addr, Some(&mlccd)).unwrap()).await,
        Ok(true)
    );
    switch.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_never_finishes_the_handshake_is_dropped() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("mlcc cluster CA");
    let switch = switch_with_tls(&Tls::load(&ca.leaf(dir.path(), "switchd", &ca)).unwrap()).await;
    let mut stalled = tokio::net::TcpStream::connect(switch.addr).await.unwrap();
    // Sends nothing. The server gives up after HANDSHAKE_TIMEOUT and closes the socket: the
    // read ends (EOF or reset) instead of waiting forever. The bound is generous on purpose.
    let bound = mlcc_daemon::tls::HANDSHAKE_TIMEOUT * 6;
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(bound, stalled.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "stalled handshake still open after {bound:?}: {r:?}"
    );
    switch.stop().await.unwrap();
}

#[tokio::test]
async fn mlccd_peer_service_requires_a_cluster_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, foreign) = (Ca::new("mlcc cluster CA"), Ca::new("some other CA"));
    let h1 = cluster.leaf(dir.path(), "h1", &cluster);
    let h2 = cluster.leaf(dir.path(), "h2", &cluster);
    let intruder = foreign.leaf(dir.path(), "intruder", &cluster);
    let pl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = Config {
        rpc_deadline: Duration::from_millis(5),
        tls: Some(h1),
        ..crate::common::daemon_config("h1", dir.path(), pl.local_addr().unwrap(), slots())
    };
    let running = crate::common::start_daemon(cfg, pl).await;
    let addr = running.peer_addr.to_string();
    let exchange = |tls: Option<Tls>| {
        let addr = addr.clone();
        async move {
            let ch = endpoint(&addr, tls.as_ref()).unwrap().connect_lazy();
            let mut c = pb::peer_client::PeerClient::new(ch);
            tokio::time::timeout(
                DEADLINE,
                c.exchange(pb::ExchangeRequest {
                    sender_host: "h2".into(),
                    slot: 1,
                    flows: vec![],
                }),
            )
            .await
            .expect("no answer at all")
        }
    };
    let r = exchange(Some(Tls::load(&h2).unwrap())).await;
    assert_eq!(r.expect("peer over mTLS").into_inner().receiver_host, "h1");
    let e = exchange(None).await.unwrap_err();
    println!("plaintext peer: {e}");
    let e = exchange(Some(Tls::load(&intruder).unwrap()))
        .await
        .unwrap_err();
    println!("peer with a foreign certificate: {e}");
    assert!(format!("{e:?}").contains("UnknownCA"), "{e:?}");
    running.stop().await;
}

#[test]
fn a_half_configured_tls_is_a_config_error() {
    let args = mlcc_scheduler::config::DaemonArgs {
        host: Some("h1".into()),
        topology: Some("t.toml".into()),
        tls: mlcc_daemon::tls::TlsArgs {
            tls_cert: Some("c.pem".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = args.resolve().unwrap_err().to_string();
    assert!(e.contains("tls_key") && e.contains("tls_ca"), "{e}");
}
