/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * A guard both congestion controls (mlcc.bpf.c, mltcp.bpf.c) run: ssthresh repaired when the
 * kernel stored one that no ssthresh program returned. Include after sock.h.
 *
 * On this project's 6.18 x86 VMs, now and then (in about one of three 90-s runs of the MLTCP
 * tests), a socket enters Recovery with ssthresh 0x81104110 while neither the CC's ssthresh
 * program nor its set_state program, traced with bpf_printk, is seen running for it. The value
 * is the low half of a return address in the kernel's SRSO return thunk
 * (srso_alias_return_thunk + 5): a stale stack word the struct_ops trampoline hands back, we
 * believe, for a program it did not run (bpftool counted no recursion misses). Every such miss
 * traced (5 of 3128 state changes) was in softirq on top of one thread of the VM's PID 1. The
 * kernel's PRR (and ours) reads the value as an int below zero and sets cwnd to ssthresh x
 * delivered / prior_cwnd, ~10^9 segments: the socket sends all it has queued at once.
 *
 * The stale word is not always above TCP_INFINITE_SSTHRESH (0x2a5b9280 was seen once), but it is
 * always far above any window: the kernel's ssthresh is TCP_INFINITE_SSTHRESH until the first
 * reduction and a fraction of cwnd after, and cwnd grows only while it limits what is in
 * flight, which a peer's largest window (65535 << 14, 2^30 bytes) bounds to 2^31 bytes of cwnd:
 * 2^24 segments at a 128-byte MSS. So each CC's repair_ssthresh repairs any other value above
 * 2^24 (MAX_PLAUSIBLE_SSTHRESH): in set_state (right after ssthresh on every way into CWR, Recovery
 * and Loss), in pkts_acked (the first callback of every ACK that acks data, before CUBIC's
 * HyStart reads ssthresh), and in mlcc's cong_control (the last, after the ACK may have entered
 * Recovery). MLTCP's cong_avoid needs none: it follows pkts_acked and is not called in a
 * reduction. The repair is
 * what the reduction should have done: the base's ssthresh taken at prior_cwnd (the window the
 * reduction started from, which the lost call would have seen; for CUBIC that also sets W_max
 * and ends the epoch), and cwnd no higher than prior_cwnd. mlcc's CC runs PRR itself, in
 * cong_control after the guard, so its fallback never computes from the stale value; MLTCP is a
 * cong_avoid CC, and the kernel's PRR may run on it once before pkts_acked of the next ACK
 * repairs it: the burst is bounded, not prevented.
 */
#ifndef MLCC_WINDOW_H
#define MLCC_WINDOW_H

#define TCP_INFINITE_SSTHRESH 0x7fffffff

/* Repairs made, read by the loader's owner (mlcc_bpf: `ssthresh_repairs`). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} window_repairs SEC(".maps");

#define MAX_PLAUSIBLE_SSTHRESH (1u << 24)

static __always_inline bool ssthresh_is_stale(const struct tcp_sock *tp)
{
	return tp->snd_ssthresh != TCP_INFINITE_SSTHRESH &&
	       tp->snd_ssthresh > MAX_PLAUSIBLE_SSTHRESH;
}

/* cwnd set to the window the reduction started from, ready for the base's ssthresh; returns
 * the window to go back to once it has run. */
static __always_inline __u32 window_before_reduction(struct tcp_sock *tp)
{
	__u32 prior = tp->prior_cwnd ? tp->prior_cwnd : tp->snd_cwnd;
	__u32 back = tp->snd_cwnd < prior ? tp->snd_cwnd : prior;

	tp->snd_cwnd = prior;
	return back;
}

/* The repair's end: the base's ssthresh (taken with cwnd at window_before_reduction's), cwnd
 * back, and the repair counted. */
static __always_inline void repaired(struct tcp_sock *tp, __u32 ssthresh, __u32 back)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&window_repairs, &zero);

	tp->snd_ssthresh = ssthresh;
	tp->snd_cwnd = back;
	if (n)
		__sync_fetch_and_add(n, 1);
}

#endif
