// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * MLTCP (Rajasekaran et al., HotNets'24, arXiv 2402.09589) over Reno or CUBIC, a peer baseline.
 *
 * Each socket's congestion-window increase is scaled by F(r) = intercept + slope * r, where r is
 * the share of its iteration's bytes the socket's process has already sent: a flow further into
 * its communication phase grows faster, gets the larger share of a shared bottleneck, finishes
 * first, and co-located jobs drift into an interleaved schedule over a few iterations.
 *
 * Two struct_ops CCs share everything but the base; the loader creates and registers one of
 * them (libbpf then loads only that one's programs):
 *
 * - mltcp_cc, over Reno: the kernel's own tcp_reno_cong_avoid fed F x acked segments instead of
 *   acked, with the fraction carried to the next ACK: slow start grows by F segments per ACKed
 *   segment (up to ssthresh), congestion avoidance by F segments per window. Loss, recovery and
 *   undo are Reno's; the kernel's PRR runs because this is a cong_avoid CC, not cong_control.
 * - mltcp_cubic_cc, over CUBIC: the kernel's tcp_cubic through its kfuncs (init, ssthresh,
 *   set_state, cwnd_event, pkts_acked: HyStart, the epoch, W_max, fast convergence all CUBIC's),
 *   and cubictcp_cong_avoid fed F x acked the same way. CUBIC's target window is a function of
 *   the time since the last loss, not of the ACKs: F scales how fast cwnd approaches the cubic
 *   curve (tcp_cong_avoid_ai's F x acked / cnt per ACK, and the Reno-friendly estimate), not the
 *   curve itself, and slow start F segments per ACKed segment as over Reno.
 *
 * r comes from mltcp_ratios, written every slot by the feeder (mlcc-scheduler's mltcp-feeder)
 * from host-local knowledge only; slope and intercept from mltcp_config, written at load from
 * mlcc_bpf::mltcp. A socket without a fresh ratio (none yet, or the feeder stopped) runs plain
 * Reno or CUBIC (F = 1).
 *
 * GPL: the tcp_reno_* and cubictcp_* kfuncs are GPL-only.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "mltcp.h"
#include "sock.h"
#include "window.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

_Static_assert(sizeof(struct mlcc_sock_key) == 48, "mlcc_sock_key layout");
_Static_assert(sizeof(struct mltcp_ratio) == 16, "mltcp_ratio layout");
_Static_assert(sizeof(struct mltcp_sock_stats) == 32, "mltcp_sock_stats layout");
_Static_assert(sizeof(struct mltcp_config) == 8, "mltcp_config layout");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MLCC_MAX_SOCKETS);
	__type(key, struct mlcc_sock_key);
	__type(value, struct mltcp_ratio);
} mltcp_ratios SEC(".maps");

/* Every socket on the CC, so the feeder can find the keys (netns cookies) of a process's
 * connections; `release` deletes its entry, LRU guards against one whose release never ran. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MLCC_MAX_SOCKETS);
	__type(key, struct mlcc_sock_key);
	__type(value, struct mltcp_sock_stats);
} mltcp_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mltcp_config);
} mltcp_config SEC(".maps");

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/* tcp_cubic's, registered for struct_ops by tcp_cubic.c. Weak: only mltcp_cubic_cc's programs
 * call them, and the Reno CC loads without them (tcp_cubic a module not loaded, say). */
extern void cubictcp_init(struct sock *sk) __ksym __weak;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym __weak;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym __weak;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym __weak;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event ev) __ksym __weak;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym __weak;

/* Per-socket state in icsk_ca_priv: the fraction of a segment of increase not applied yet. */
struct mltcp_ca {
	__u32 carry_milli;
};

/* It sits at the end of icsk_ca_priv, clear of CUBIC's struct bictcp at its start (Reno keeps
 * nothing there). vmlinux.h is the running kernel's when bpftool is there at build time, so the
 * assertion checks this kernel's bictcp; the verifier refuses a write outside icsk_ca_priv. */
#define CA_PRIV_SIZE sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv)
#define MLTCP_CA_OFFSET (CA_PRIV_SIZE - sizeof(struct mltcp_ca))
_Static_assert(sizeof(struct bictcp) <= MLTCP_CA_OFFSET,
	       "MLTCP's per-socket state would overlap CUBIC's in icsk_ca_priv");

static __always_inline struct mltcp_ca *ca_of(struct sock *sk)
{
	return (struct mltcp_ca *)((char *)inet_csk(sk)->icsk_ca_priv + MLTCP_CA_OFFSET);
}

static __always_inline void note_socket(struct sock *sk, const struct mlcc_sock_key *key,
					__u32 f_milli)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_sock_stats *st = bpf_map_lookup_elem(&mltcp_socks, key);

	if (!st) {
		struct mltcp_sock_stats zero = {};

		bpf_map_update_elem(&mltcp_socks, key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&mltcp_socks, key);
		if (!st)
			return;
	}
	st->bytes_acked = tp->bytes_acked;
	st->updated_ns = bpf_ktime_get_ns();
	st->f_milli = f_milli;
	st->snd_cwnd = tp->snd_cwnd;
	st->snd_ssthresh = tp->snd_ssthresh;
}

/* F for the socket, in thousandths. */
static __always_inline __u32 f_of(const struct mlcc_sock_key *key)
{
	struct mltcp_ratio *r = bpf_map_lookup_elem(&mltcp_ratios, key);
	struct mltcp_config *cfg;
	__u32 zero = 0;
	__u64 ppm;

	if (!r || bpf_ktime_get_ns() >= r->expires_ns)
		return MLTCP_F_ONE;
	cfg = bpf_map_lookup_elem(&mltcp_config, &zero);
	if (!cfg)
		return MLTCP_F_ONE;
	ppm = r->ratio_ppm;
	if (ppm > MLTCP_RATIO_ONE)
		ppm = MLTCP_RATIO_ONE;
	return cfg->intercept_milli + (__u32)((__u64)cfg->slope_milli * ppm / MLTCP_RATIO_ONE);
}

static __always_inline void start_socket(struct sock *sk)
{
	struct mlcc_sock_key key;

	ca_of(sk)->carry_milli = 0;
	sock_key(sk, &key);
	note_socket(sk, &key, MLTCP_F_ONE);
}

/* window.h's guard, with the base's ssthresh. `cubic` is a constant in each caller. */
static __always_inline void repair_ssthresh(struct sock *sk, bool cubic)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 back;

	if (!ssthresh_is_stale(tp))
		return;
	back = window_before_reduction(tp);
	repaired(tp, cubic ? cubictcp_recalc_ssthresh(sk) : tcp_reno_ssthresh(sk), back);
}

/* The base's cong_avoid fed F x acked segments, the fraction carried to the next ACK. `cubic`
 * is a constant in each caller, so each program calls one base's kfunc only. */
static __always_inline void scaled_cong_avoid(struct sock *sk, __u32 ack, __u32 acked, bool cubic)
{
	struct mltcp_ca *ca = ca_of(sk);
	struct mlcc_sock_key key;
	__u32 f_milli, n;
	__u64 scaled;

	sock_key(sk, &key);
	f_milli = f_of(&key);
	scaled = (__u64)acked * f_milli + ca->carry_milli;
	ca->carry_milli = scaled % MLTCP_F_ONE;
	n = (__u32)(scaled / MLTCP_F_ONE);
	if (n) {
		if (cubic)
			cubictcp_cong_avoid(sk, ack, n);
		else
			tcp_reno_cong_avoid(sk, ack, n);
	}
	note_socket(sk, &key, f_milli);
}

/* Over Reno. */

SEC("struct_ops")
void BPF_PROG(mltcp_init, struct sock *sk)
{
	start_socket(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	scaled_cong_avoid(sk, ack, acked, false);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

/* Reno keeps no state of its own; these two only run window.h's guard. */
SEC("struct_ops")
void BPF_PROG(mltcp_set_state, struct sock *sk, __u8 new_state)
{
	repair_ssthresh(sk, false);
}

SEC("struct_ops")
void BPF_PROG(mltcp_acked, struct sock *sk, const struct ack_sample *sample)
{
	repair_ssthresh(sk, false);
}

/* Both bases' (the kernel's CUBIC undoes with Reno's too). */
SEC("struct_ops")
__u32 BPF_PROG(mltcp_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

/* Both bases': the ratio goes with the socket, so a later socket reusing the 4-tuple starts
 * without one. */
SEC("struct_ops")
void BPF_PROG(mltcp_release, struct sock *sk)
{
	struct mlcc_sock_key key;

	sock_key(sk, &key);
	bpf_map_delete_elem(&mltcp_socks, &key);
	bpf_map_delete_elem(&mltcp_ratios, &key);
}

/* Over CUBIC. */

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_init, struct sock *sk)
{
	cubictcp_init(sk);
	start_socket(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	scaled_cong_avoid(sk, ack, acked, true);
}

SEC("struct_ops")
__u32 BPF_PROG(mltcp_cubic_ssthresh, struct sock *sk)
{
	return cubictcp_recalc_ssthresh(sk);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_set_state, struct sock *sk, __u8 new_state)
{
	repair_ssthresh(sk, true);
	cubictcp_state(sk, new_state);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	cubictcp_cwnd_event(sk, ev);
}

SEC("struct_ops")
void BPF_PROG(mltcp_cubic_acked, struct sock *sk, const struct ack_sample *sample)
{
	repair_ssthresh(sk, true);
	cubictcp_acked(sk, sample);
}

/* The loader names the one it registers and leaves the other uncreated. */
SEC(".struct_ops.link")
struct tcp_congestion_ops mltcp_cc = {
	.init = (void *)mltcp_init,
	.cong_avoid = (void *)mltcp_cong_avoid,
	.ssthresh = (void *)mltcp_ssthresh,
	.set_state = (void *)mltcp_set_state,
	.pkts_acked = (void *)mltcp_acked,
	.undo_cwnd = (void *)mltcp_undo_cwnd,
	.release = (void *)mltcp_release,
	.name = "mltcp",
};

SEC(".struct_ops.link")
struct tcp_congestion_ops mltcp_cubic_cc = {
	.init = (void *)mltcp_cubic_init,
	.cong_avoid = (void *)mltcp_cubic_cong_avoid,
	.ssthresh = (void *)mltcp_cubic_ssthresh,
	.set_state = (void *)mltcp_cubic_set_state,
	.cwnd_event = (void *)mltcp_cubic_cwnd_event,
	.pkts_acked = (void *)mltcp_cubic_acked,
	.undo_cwnd = (void *)mltcp_undo_cwnd,
	.release = (void *)mltcp_release,
	.name = "mltcp_cubic",
};
