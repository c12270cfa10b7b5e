//! Per-socket congestion-control selection, for hosts without the sock_ops selector (or tests).

use std::io;
use std::os::fd::AsFd;

use crate::config::CcName;
use crate::sys;

/// The congestion control a TCP socket runs (getsockopt TCP_CONGESTION).
pub fn congestion_control(socket: impl AsFd) -> io::Result<String> {
    sys::tcp_congestion(socket.as_fd())
}

/// Puts a TCP socket on `cc` (setsockopt TCP_CONGESTION).
pub fn set_congestion_control(socket: impl AsFd, cc: &CcName) -> io::Result<()> {
    sys::set_tcp_congestion(socket.as_fd(), cc.as_str())
}
