/* SPDX-License-Identifier: (GPL-2.0 OR MIT OR Apache-2.0) */
/*
 * Types shared between mltcp.bpf.c and the Rust side (src/mltcp.rs mirrors them; a Rust test
 * checks the offsets against the skeleton's BTF). Sockets are keyed like mlcc's (mlcc.h).
 */
#ifndef MLTCP_H
#define MLTCP_H

#include "mlcc.h"

/* r, the share of its iteration's bytes a socket's process has sent, in millionths. */
#define MLTCP_RATIO_ONE 1000000U
/* F in thousandths: F = 1000 is Reno's own increase. */
#define MLTCP_F_ONE 1000U

/* What the feeder wrote for one socket; expires_ns is CLOCK_MONOTONIC. */
struct mltcp_ratio {
	__u32 ratio_ppm;
	__u32 _pad;
	__u64 expires_ns;
};

/* What the CC saw and did at the socket's last ACK that could raise cwnd. */
struct mltcp_sock_stats {
	__u64 bytes_acked;
	__u64 updated_ns;
	/* The F applied, in thousandths (MLTCP_F_ONE without a fresh ratio). */
	__u32 f_milli;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 _pad;
};

/* F(r) = intercept + slope * r, both in thousandths; one entry at index 0. */
struct mltcp_config {
	__u32 slope_milli;
	__u32 intercept_milli;
};

#endif
