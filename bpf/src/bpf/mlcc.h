/* SPDX-License-Identifier: (GPL-2.0 OR MIT OR Apache-2.0) */
/*
 * Types shared between the BPF programs and the Rust side (src/raw.rs mirrors them; a Rust test
 * checks that the skeleton's BTF-derived types have the same size and field offsets).
 * Every name is prefixed mlcc_: the kernel's BTF already has types like flow_stats.
 */
#ifndef MLCC_H
#define MLCC_H

/* The per-socket maps' declared size; the loader sets the size used (LoadOptions::max_sockets). */
#define MLCC_MAX_SOCKETS 65536
#define MLCC_CC_NAME_LEN 16

/*
 * A TCP socket, as seen from its own host. IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d)
 * so one layout serves both families and a dual-stack socket talking to an IPv4 peer has the
 * same key as a plain IPv4 one. Addresses in network order, ports in host order.
 */
struct mlcc_sock_key {
	__u64 netns_cookie;
	__u32 src_addr[4];
	__u32 dst_addr[4];
	__u16 src_port;
	__u16 dst_port;
	__u32 _pad;
};

/*
 * The daemon's order for one socket; expires_ns is CLOCK_MONOTONIC, ~0 for never. fill_dscp 0:
 * paced at bytes_per_sec. Else the socket is unpaced, loss-reactive beyond a floor of
 * bytes_per_sec, and its bytes beyond that rate leave marked with this DSCP (a fill class the
 * switches serve only with what the default class leaves).
 */
struct mlcc_rate {
	__u64 bytes_per_sec;
	__u64 expires_ns;
	__u32 fill_dscp;
	__u32 _pad;
};

/* Per socket on a fill order: the token bucket of its guaranteed rate, as the marker keeps it. */
struct mlcc_mark {
	__u64 tokens;
	__u64 last_ns;
};

enum mlcc_mode {
	MLCC_MODE_FALLBACK = 0,
	MLCC_MODE_PACED = 1,
	MLCC_MODE_FILL = 2,
};

/* What the CC saw at the socket's last ACK. */
struct mlcc_sock_stats {
	__u64 bytes_sent;
	__u64 bytes_acked;
	__u64 delivery_rate_bytes_per_sec;
	__u64 pacing_rate_bytes_per_sec;
	__u64 updated_ns;
	__u32 retransmits;
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 snd_cwnd;
	__u32 mode;
	/* Segments delivered, SACKed ones included (tp->delivered; wraps). */
	__u32 delivered_segs;
	/*
	 * Bytes the application wrote and the peer has not acknowledged (write_seq - snd_una), at
	 * the last ACK or the last start of transmission after idle: what the socket holds for its
	 * process, as a progress file's backlog is what the library handed over.
	 */
	__u32 queued_bytes;
	__u32 reserved;
	/*
	 * The socket's inode number, as /proc/<pid>/fd names it (socket:[N]), from the first ACK
	 * after a process holds it; 0 before (a connection not accepted yet) and on an orphan.
	 * mlccd finds a process's scheduled sockets by it without walking the kernel's TCP table.
	 */
	__u64 sock_ino;
};

/* Settings the operator may change while sockets run; one entry at index 0. */
struct mlcc_config {
	char cc_name[MLCC_CC_NAME_LEN];
	__u32 cwnd_gain_pct;
	__u32 min_cwnd_segs;
	/* The RTT the cwnd cap assumes at least: ACKs from a busy host come late. */
	__u32 rtt_floor_us;
	/*
	 * Floor of the retransmission timeout for sockets that start on the CC afterwards (0: the
	 * kernel's, 200 ms). Raised to two timer ticks, the least the kernel takes.
	 */
	__u32 rto_min_us;
	/* What a socket runs without an order (enum mlcc_fallback); read at every ACK. */
	__u32 fallback;
};

/*
 * The kernel CC a socket runs through its kfuncs while it has no order. Each keeps its state in
 * the socket's icsk_ca_priv, which mlcc_cc leaves to it (its own is in socket storage).
 */
enum mlcc_fallback {
	MLCC_FALLBACK_RENO = 0,
	MLCC_FALLBACK_CUBIC = 1,
	/* BBR's model (struct bbr) fills icsk_ca_priv. */
	MLCC_FALLBACK_BBR = 2,
};

#endif
