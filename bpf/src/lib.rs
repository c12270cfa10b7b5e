//! mlcc's kernel datapath (docs/design.md §12): a BPF TCP congestion control that paces each socket
//! at the rate mlccd orders, a cgroup sock_ops program that opts sockets in, and the safe API
//! mlccd drives them with ([`Datapath`], implemented by [`KernelDatapath`] and, for tests of
//! callers, [`MemoryDatapath`]). [`mltcp`] is a second CC, MLTCP over Reno or CUBIC, a peer
//! baseline.

pub mod classes;
mod clock;
mod config;
mod datapath;
mod error;
mod kernel;
mod key;
mod loss;
mod memory;
pub mod mltcp;
mod pins;
mod probe;
mod rate;
mod sockopt;
mod stats;
mod sys;
pub mod testbed;

#[allow(clippy::all, unsafe_op_in_unsafe_fn, unused_imports, missing_docs)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/mlcc.skel.rs"));
}

#[allow(clippy::all, unsafe_op_in_unsafe_fn, unused_imports, missing_docs)]
mod mltcp_skel {
    include!(concat!(env!("OUT_DIR"), "/mltcp.skel.rs"));
}

#[allow(clippy::all, unsafe_op_in_unsafe_fn, unused_imports, missing_docs)]
mod loss_skel {
    include!(concat!(env!("OUT_DIR"), "/loss.skel.rs"));
}

pub use clock::MonotonicNs;
pub use config::{
    CcName, CwndPolicy, DEFAULT_PIN_DIR, Fallback, LoadOptions, MaxSockets, RtoFloor,
};
pub use datapath::Datapath;
pub use error::DatapathError;
pub use kernel::{KernelDatapath, ProgRunStats, unload_pinned};
pub use key::SocketKey;
pub use loss::{LossCounters, LossInjector, LossSpec, send_single_segments};
pub use memory::MemoryDatapath;
pub use probe::probe;
pub use rate::{Dscp, Expiry, ParseRateError, Rate, RateOrder};
pub use sockopt::{
    congestion_control, netns_cookie, set_congestion_control, tcp_info, tcp_total_rto,
};
pub use stats::{Pacing, SocketInode, SocketStats};
pub use sys::{device_with_address, in_netns};

/// BPF run-time accounting (`run_time_ns`, `run_cnt`) stays on while the guard lives.
pub fn enable_bpf_run_time_stats() -> Result<std::os::fd::OwnedFd, DatapathError> {
    sys::enable_run_time_stats().map_err(DatapathError::io("enabling BPF run-time stats"))
}

#[cfg(test)]
mod layout_tests {
    //! The Rust encoders use fixed offsets; these compare them with the types libbpf-cargo
    //! generated from the BPF object's BTF, i.e. with what clang laid out for the C structs.
    use std::mem::{offset_of, size_of};

    use crate::skel::types::{mlcc_config, mlcc_rate, mlcc_sock_key, mlcc_sock_stats};

    #[test]
    fn socket_key_matches_bpf() {
        use crate::key::layout as l;
        assert_eq!(size_of::<mlcc_sock_key>(), l::SIZE);
        assert_eq!(offset_of!(mlcc_sock_key, netns_cookie), l::NETNS_COOKIE);
        assert_eq!(offset_of!(mlcc_sock_key, src_addr), l::SRC_ADDR);
        assert_eq!(offset_of!(mlcc_sock_key, dst_addr), l::DST_ADDR);
        assert_eq!(offset_of!(mlcc_sock_key, src_port), l::SRC_PORT);
        assert_eq!(offset_of!(mlcc_sock_key, dst_port), l::DST_PORT);
    }

    #[test]
    fn rate_matches_bpf() {
        use crate::rate::layout as l;
        assert_eq!(size_of::<mlcc_rate>(), l::SIZE);
        assert_eq!(offset_of!(mlcc_rate, bytes_per_sec), l::BYTES_PER_SEC);
        assert_eq!(offset_of!(mlcc_rate, expires_ns), l::EXPIRES_NS);
        assert_eq!(offset_of!(mlcc_rate, fill_dscp), l::FILL_DSCP);
    }

    #[test]
    fn stats_match_bpf() {
        use crate::stats::layout as l;
        assert_eq!(size_of::<mlcc_sock_stats>(), l::SIZE);
        assert_eq!(offset_of!(mlcc_sock_stats, bytes_sent), l::BYTES_SENT);
        assert_eq!(offset_of!(mlcc_sock_stats, bytes_acked), l::BYTES_ACKED);
        assert_eq!(
            offset_of!(mlcc_sock_stats, delivery_rate_bytes_per_sec),
            l::DELIVERY_RATE
        );
        assert_eq!(
            offset_of!(mlcc_sock_stats, pacing_rate_bytes_per_sec),
            l::PACING_RATE
        );
        assert_eq!(offset_of!(mlcc_sock_stats, updated_ns), l::UPDATED_NS);
        assert_eq!(offset_of!(mlcc_sock_stats, retransmits), l::RETRANSMITS);
        assert_eq!(offset_of!(mlcc_sock_stats, srtt_us), l::SRTT_US);
        assert_eq!(offset_of!(mlcc_sock_stats, min_rtt_us), l::MIN_RTT_US);
        assert_eq!(offset_of!(mlcc_sock_stats, snd_cwnd), l::SND_CWND);
        assert_eq!(offset_of!(mlcc_sock_stats, mode), l::MODE);
        assert_eq!(offset_of!(mlcc_sock_stats, delivered_segs), l::DELIVERED);
        assert_eq!(offset_of!(mlcc_sock_stats, queued_bytes), l::QUEUED);
        assert_eq!(offset_of!(mlcc_sock_stats, sock_ino), l::SOCK_INO);
    }

    #[test]
    fn mltcp_types_match_bpf() {
        use crate::mltcp::layout as l;
        use crate::mltcp_skel::types::{mltcp_config, mltcp_ratio, mltcp_sock_stats};
        assert_eq!(size_of::<mltcp_ratio>(), l::RATIO_SIZE);
        assert_eq!(offset_of!(mltcp_ratio, ratio_ppm), l::RATIO_PPM);
        assert_eq!(offset_of!(mltcp_ratio, expires_ns), l::RATIO_EXPIRES_NS);
        assert_eq!(size_of::<mltcp_sock_stats>(), l::SOCK_SIZE);
        assert_eq!(
            offset_of!(mltcp_sock_stats, bytes_acked),
            l::SOCK_BYTES_ACKED
        );
        assert_eq!(offset_of!(mltcp_sock_stats, updated_ns), l::SOCK_UPDATED_NS);
        assert_eq!(offset_of!(mltcp_sock_stats, f_milli), l::SOCK_F_MILLI);
        assert_eq!(offset_of!(mltcp_sock_stats, snd_cwnd), l::SOCK_SND_CWND);
        assert_eq!(
            offset_of!(mltcp_sock_stats, snd_ssthresh),
            l::SOCK_SND_SSTHRESH
        );
        assert_eq!(size_of::<mltcp_config>(), l::CONFIG_SIZE);
        assert_eq!(offset_of!(mltcp_config, slope_milli), l::CONFIG_SLOPE);
        assert_eq!(
            offset_of!(mltcp_config, intercept_milli),
            l::CONFIG_INTERCEPT
        );
    }

    #[test]
    fn config_matches_bpf() {
        use crate::config::layout as l;
        assert_eq!(size_of::<mlcc_config>(), l::SIZE);
        assert_eq!(offset_of!(mlcc_config, cc_name), l::CC_NAME);
        assert_eq!(offset_of!(mlcc_config, cwnd_gain_pct), l::CWND_GAIN_PCT);
        assert_eq!(offset_of!(mlcc_config, min_cwnd_segs), l::MIN_CWND_SEGS);
        assert_eq!(offset_of!(mlcc_config, rtt_floor_us), l::RTT_FLOOR_US);
        assert_eq!(offset_of!(mlcc_config, rto_min_us), l::RTO_MIN_US);
        assert_eq!(offset_of!(mlcc_config, fallback), l::FALLBACK);
    }
}
