//! Helpers shared by the scheduler's integration tests.
#![allow(dead_code, reason = "each test binary uses a subset")]

use std::path::{Path, PathBuf};

use mlcc_scheduler::progress::abi;

/// Writes a valid progress file for job "job" with `pid` by hand, then lets `corrupt` damage it.
pub fn crafted(dir: &Path, name: &str, pid: u32, corrupt: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut b = vec![0u8; abi::FILE_SIZE];
    b[0..8].copy_from_slice(abi::MAGIC);
    b[8..12].copy_from_slice(&abi::VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(abi::HEADER_SIZE as u32).to_le_bytes());
    b[16..19].copy_from_slice(b"job");
    b[104..108].copy_from_slice(&pid.to_le_bytes());
    corrupt(&mut b);
    let p = dir.join(name);
    std::fs::write(&p, &b).unwrap();
    // The writer's mode (mlcc_progress.h); whatever the umask, mlccd refuses group-writable.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    p
}

/// An mlccd configuration for tests: host `host` on a dry-run datapath, its progress files and
/// admin socket in `dir`, serving peers on `peer_listen`, precedence feedback with `slots`, a
/// τ/3 deadline, and everything else at its default. Tests change what they test with `..`.
pub fn daemon_config(
    host: &str,
    dir: &Path,
    peer_listen: std::net::SocketAddr,
    slots: mlcc_core::SlotConfig,
) -> mlcc_scheduler::config::Config {
    use mlcc_scheduler::config::{Config, DatapathKind, LogFormat, PolicyConfig};
    Config {
        host: host.into(),
        topology: "unused".into(),
        shm_dir: dir.to_path_buf(),
        peer_listen,
        peer_port: 0,
        peers: Default::default(),
        admin_socket: dir.join("admin.sock"),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        rpc_deadline: slots.tau() / 3,
        policy: PolicyConfig {
            mode: mlcc_core::FeedbackMode::Precedence,
            ..PolicyConfig::new(slots)
        },
        datapath: DatapathKind::DryRun,
        bpf_pin_dir: "unused".into(),
        bpf_cc_name: Default::default(),
        tcp_tso_rtt_log: mlcc_scheduler::config::TsoRttLog::Keep,
        rto_floor: mlcc_bpf::RtoFloor::default(),
        fallback: mlcc_bpf::Fallback::default(),
        max_sockets: mlcc_bpf::MaxSockets::default(),
        ps_scheduler_port: None,
        log_format: LogFormat::Human,
        worker_threads: 1,
        order_expiry_slots: mlcc_scheduler::host::ORDER_EXPIRY_SLOTS,
        admin_group: None,
        clock_offset_ns: 0,
        progress: Default::default(),
        fill_devs: Vec::new(),
        learn: false,
        learn_environ: true,
        tls: None,
    }
}

/// Starts mlccd with `cfg` on a two-host single-switch topology, an in-memory datapath and no
/// sockets, serving peers on `listener` (bound at `cfg.peer_listen`).
pub async fn start_daemon(
    cfg: mlcc_scheduler::config::Config,
    listener: tokio::net::TcpListener,
) -> mlcc_scheduler::daemon::Running {
    use mlcc_scheduler::datapath::{DatapathPort, MemoryDatapath};
    mlcc_scheduler::daemon::start(
        cfg,
        mlcc_core::topology::Topology::single_switch(2, mlcc_core::units::BytesPerSec(1e9))
            .unwrap(),
        DatapathPort::memory(MemoryDatapath::default()),
        Box::new(mlcc_scheduler::sockets::StaticSockets::default()),
        listener,
        None,
        None,
    )
    .await
    .unwrap()
}
