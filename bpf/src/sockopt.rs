//! Per-socket congestion-control selection, for hosts without the sock_ops selector (or tests).

use std::io;
use std::os::fd::AsFd;

use crate::config::CcName;
use crate::sys;

/// The congestion control a TCP socket runs (getsockopt TCP_CONGESTION).
pub fn congestion_control(socket: impl AsFd) -> io::Result<String> {
    sys::tcp_congestion(socket.as_fd())
}

/// `TCP_INFO` of a TCP socket: what the kernel's own counters say (acked bytes, RTO,
/// retransmissions), for tests and the testbed's trainers.
pub fn tcp_info(socket: impl AsFd) -> io::Result<libc::tcp_info> {
    sys::tcp_info(socket.as_fd())
}

/// Retransmission timeouts a TCP socket has had (`tcpi_total_rto`, Linux 6.7; None before).
pub fn tcp_total_rto(socket: impl AsFd) -> io::Result<Option<u16>> {
    sys::tcp_total_rto(socket.as_fd())
}

/// Puts a TCP socket on `cc` (setsockopt TCP_CONGESTION).
pub fn set_congestion_control(socket: impl AsFd, cc: &CcName) -> io::Result<()> {
    sys::set_tcp_congestion(socket.as_fd(), cc.as_str())
}

/// The cookie of a network namespace, as the CC sees it in [`crate::SocketKey`]: of the
/// caller's own namespace, or of the one at `netns` (`/run/netns/<name>`, `/proc/<pid>/ns/net`).
/// Cookies are assigned at boot order, so they must be looked up, not assumed.
pub fn netns_cookie(netns: Option<&std::path::Path>) -> io::Result<u64> {
    let probe = || -> io::Result<u64> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
        sys::netns_cookie(s.as_fd())
    };
    let Some(path) = netns else { return probe() };
    let ns = std::fs::File::open(path)?;
    sys::in_netns(ns.as_fd(), probe)
}
