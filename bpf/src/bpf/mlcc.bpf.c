// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * mlcc kernel datapath.
 *
 * mlcc_cc paces every socket at the rate mlccd wrote for its 4-tuple and caps cwnd near the
 * rate's BDP, so the planned rate, not loss, decides how fast a flow goes. Without an order (none
 * yet, or mlccd stopped renewing it) the socket runs the kernel's Cubic (or Reno or BBR, as the
 * operator chooses) through the kernel's own kfuncs: flows never freeze because the daemon is gone.
 *
 * An order with a fill class (fill_dscp) guarantees its rate and lets the socket send beyond it:
 * the CC runs its fallback unpaced with a cwnd floor of the guaranteed rate's BDP, and
 * mlcc_mark, a tc egress program on the host's uplink, leaves a socket's bytes within a token
 * bucket of that rate in the default class and marks the rest with the fill DSCP, which switches
 * serve only with what the default class leaves.
 *
 * mlcc_sockops puts sockets of the cgroups it is attached to on mlcc_cc, so a job opts in
 * without patching its communication library.
 *
 * The tcp_reno_*, cubictcp_* and bbr_* kfuncs are GPL-only: the programs are licensed "Dual MIT/GPL".
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "mlcc.h"
#include "sock.h"
#include "window.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define AF_INET 2
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define USEC_PER_SEC 1000000ULL
/* Largest TSO/GSO burst the stack sends at once. */
#define MLCC_MAX_BURST_BYTES 65536ULL

_Static_assert(sizeof(struct mlcc_sock_key) == 48, "mlcc_sock_key layout");
_Static_assert(__builtin_offsetof(struct mlcc_sock_key, src_addr) == 8, "mlcc_sock_key.src_addr");
_Static_assert(__builtin_offsetof(struct mlcc_sock_key, dst_addr) == 24, "mlcc_sock_key.dst_addr");
_Static_assert(__builtin_offsetof(struct mlcc_sock_key, src_port) == 40, "mlcc_sock_key.src_port");
_Static_assert(__builtin_offsetof(struct mlcc_sock_key, dst_port) == 42, "mlcc_sock_key.dst_port");
_Static_assert(sizeof(struct mlcc_rate) == 24, "mlcc_rate layout");
_Static_assert(__builtin_offsetof(struct mlcc_rate, fill_dscp) == 16, "mlcc_rate.fill_dscp");
_Static_assert(sizeof(struct mlcc_mark) == 16, "mlcc_mark layout");
_Static_assert(sizeof(struct mlcc_sock_stats) == 80, "mlcc_sock_stats layout");
_Static_assert(__builtin_offsetof(struct mlcc_sock_stats, queued_bytes) == 64, "mlcc_sock_stats.queued_bytes");
_Static_assert(__builtin_offsetof(struct mlcc_sock_stats, sock_ino) == 72, "mlcc_sock_stats.sock_ino");
_Static_assert(sizeof(struct mlcc_config) == 36, "mlcc_config layout");
_Static_assert(__builtin_offsetof(struct mlcc_config, fallback) == 32, "mlcc_config.fallback");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MLCC_MAX_SOCKETS);
	__type(key, struct mlcc_sock_key);
	__type(value, struct mlcc_rate);
} mlcc_rates SEC(".maps");

/*
 * A hash keyed like mlcc_rates rather than sk_storage: mlccd reads all sockets in one batch and
 * lists them by 4-tuple, which sk_storage cannot do without an fd of every socket. `release`
 * deletes a socket's entry; LRU only guards against an entry whose release never ran.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MLCC_MAX_SOCKETS);
	__type(key, struct mlcc_sock_key);
	__type(value, struct mlcc_sock_stats);
} mlcc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mlcc_config);
} mlcc_config SEC(".maps");

/* The marker's token buckets; `release` deletes a socket's, LRU guards against one it missed. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MLCC_MAX_SOCKETS);
	__type(key, struct mlcc_sock_key);
	__type(value, struct mlcc_mark);
} mlcc_marks SEC(".maps");

extern unsigned int CONFIG_HZ __kconfig;

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void cubictcp_init(struct sock *sk) __ksym __weak;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym __weak;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym __weak;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym __weak;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym __weak;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym __weak;
extern void bbr_init(struct sock *sk) __ksym __weak;
extern void bbr_main(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs) __ksym __weak;
extern __u32 bbr_ssthresh(struct sock *sk) __ksym __weak;
extern __u32 bbr_undo_cwnd(struct sock *sk) __ksym __weak;
extern void bbr_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym __weak;
extern void bbr_set_state(struct sock *sk, __u8 new_state) __ksym __weak;
extern __u32 bbr_sndbuf_expand(struct sock *sk) __ksym __weak;
extern __u32 bbr_min_tso_segs(struct sock *sk) __ksym __weak;

/*
 * The cubictcp_* and bbr_* kfuncs are weak: a kernel whose tcp_cubic or tcp_bbr is a module not
 * loaded still loads the datapath (the loader refuses that fallback there), and its sockets fall
 * back to Reno. Each call is guarded by its own bpf_ksym_exists, which the verifier needs to drop
 * the call.
 *
 * The loader writes the fallback before it attaches the CC and nothing rewrites it, so every
 * socket of a datapath runs the same one from the start: BBR's model, which fills
 * icsk_ca_priv, is never read as Cubic's or the other way round.
 */
static __always_inline struct mlcc_config *mlcc_cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&mlcc_config, &zero);
}

static __always_inline int cubic_config(const struct mlcc_config *cfg)
{
	return cfg && cfg->fallback == MLCC_FALLBACK_CUBIC;
}

static __always_inline int bbr_config(const struct mlcc_config *cfg)
{
	return cfg && cfg->fallback == MLCC_FALLBACK_BBR;
}

/* `rate`, as far as the socket may be paced. */
static __always_inline __u64 pacing_cap(const struct sock *sk, __u64 rate)
{
	return rate < sk->sk_max_pacing_rate ? rate : sk->sk_max_pacing_rate;
}

static __always_inline __u32 min_rtt_us(const struct tcp_sock *tp)
{
	__u32 rtt = tp->rtt_min.s[0].v;

	if (rtt == ~0U || rtt == 0)
		rtt = tp->srtt_us >> 3;
	return rtt;
}

/* What the socket holds for its process: written, not yet acknowledged. */
static __always_inline __u32 queued_bytes(const struct tcp_sock *tp)
{
	return tp->write_seq - tp->snd_una;
}

/* The inode of the socket's file (what /proc/<pid>/fd links to), 0 while it has none. */
static __always_inline __u64 sock_ino(const struct sock *sk)
{
	struct socket *so = sk->sk_socket;
	struct file *f;

	if (!so)
		return 0;
	f = so->file;
	if (!f || !f->f_inode)
		return 0;
	return f->f_inode->i_ino;
}

static __always_inline void record_stats(struct sock *sk, const struct mlcc_sock_key *key,
					 const struct rate_sample *rs, __u32 mode)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mlcc_sock_stats *st = bpf_map_lookup_elem(&mlcc_stats, key);

	if (!st) {
		struct mlcc_sock_stats zero = {};

		bpf_map_update_elem(&mlcc_stats, key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&mlcc_stats, key);
		if (!st)
			return;
	}
	st->bytes_sent = tp->bytes_sent;
	st->bytes_acked = tp->bytes_acked;
	st->retransmits = tp->total_retrans;
	st->srtt_us = tp->srtt_us >> 3;
	st->min_rtt_us = tp->rtt_min.s[0].v;
	st->snd_cwnd = tp->snd_cwnd;
	st->pacing_rate_bytes_per_sec = sk->sk_pacing_rate;
	st->mode = mode;
	st->delivered_segs = tp->delivered;
	st->queued_bytes = queued_bytes(tp);
	if (!st->sock_ino)
		st->sock_ino = sock_ino(sk);
	if (rs->interval_us > 0 && rs->delivered > 0)
		st->delivery_rate_bytes_per_sec =
			(__u64)rs->delivered * tp->mss_cache * USEC_PER_SEC / (__u64)rs->interval_us;
	st->updated_ns = bpf_ktime_get_ns();
}

/*
 * cwnd = gain x BDP at the ordered rate plus three bursts: internal pacing releases whole TSO
 * bursts (~1 ms of data, at most 64 KB), and a cwnd of exactly one BDP would let delayed ACKs and
 * those bursts, not the pacer, set the rate (BBR adds the same allowance). The BDP uses min_rtt
 * (not srtt, which grows with the queue the cap is there to bound), raised to rtt_floor_us so
 * that ACKs delayed by a busy receiver or sender CPU do not make cwnd, not the pacer, the limit.
 */
static __always_inline __u32 rate_cwnd(struct sock *sk, __u64 rate, const struct mlcc_config *cfg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u32 rtt = min_rtt_us(tp);
	__u64 burst, cwnd;

	if (rtt < cfg->rtt_floor_us)
		rtt = cfg->rtt_floor_us;
	burst = rate / 1000;
	if (burst > MLCC_MAX_BURST_BYTES)
		burst = MLCC_MAX_BURST_BYTES;
	cwnd = (rate * rtt / USEC_PER_SEC) * cfg->cwnd_gain_pct / 100 / mss + 3 * burst / mss;
	if (cwnd < cfg->min_cwnd_segs)
		cwnd = cfg->min_cwnd_segs;
	if (cwnd < 2)
		cwnd = 2;
	if (cwnd > tp->snd_cwnd_clamp)
		cwnd = tp->snd_cwnd_clamp;
	return cwnd;
}

static __always_inline void pace(struct sock *sk, __u64 rate, const struct mlcc_config *cfg)
{
	sk->sk_pacing_status = SK_PACING_NEEDED;
	sk->sk_pacing_rate = pacing_cap(sk, rate);
	tcp_sk(sk)->snd_cwnd = rate_cwnd(sk, rate, cfg);
}

/*
 * Unpaced, as the kernel's CCs run without fq, with the pacing rate the kernel would keep for
 * them (tcp_update_pacing_rate: cwnd/srtt, twice that in slow start, 1.2 times after), which
 * the kernel skips for a CC with cong_control. It is not a pacing rate here but what TSO burst
 * sizes and TCP small queues (the bytes a socket may leave in the host's qdiscs) are sized by:
 * left at the maximum, a socket on the fallback queued up to tcp_limit_output_bytes in its
 * host's qdisc where the kernel's Cubic queues about a millisecond of its rate.
 */
static __always_inline void fallback_pacing(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd > tp->packets_out ? tp->snd_cwnd : tp->packets_out;
	__u64 rate = (__u64)tp->mss_cache * ((USEC_PER_SEC / 100) << 3);

	rate *= tp->snd_cwnd < tp->snd_ssthresh / 2 ? 200 : 120;
	rate *= cwnd;
	if (tp->srtt_us)
		rate /= tp->srtt_us;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_status = SK_PACING_NONE;
	sk->sk_pacing_rate = rate;
}

/* tcp_input.c's ACK flags, which a CC with cong_control receives as they are. */
#define FLAG_DATA_ACKED 0x04
#define FLAG_SYN_ACKED 0x10
#define FLAG_DATA_SACKED 0x20
#define FLAG_SND_UNA_ADVANCED 0x400
#define FLAG_FORWARD_PROGRESS (FLAG_DATA_ACKED | FLAG_SYN_ACKED | FLAG_DATA_SACKED)

/*
 * mlcc_cc's own per-socket state, in socket storage: icsk_ca_priv belongs to the fallback CC, and
 * BBR's model fills all of it. Only CWR and Recovery touch it (PRR), so an ACK outside them costs
 * no lookup; a socket whose storage cannot be had (no memory) reduces cwnd without PRR's count.
 */
struct mlcc_ca {
	/* What was delivered since CWR or Recovery began; the kernel counts it only in the
	 * function it skips for a CC with cong_control. */
	__u32 prr_delivered;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mlcc_ca);
} mlcc_socks SEC(".maps");

static __always_inline struct mlcc_ca *ca_of(struct sock *sk)
{
	return bpf_sk_storage_get(&mlcc_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
}

/* The socket's order, if it has one with a rate that has not lapsed. */
static __always_inline struct mlcc_rate *live_order(const struct mlcc_sock_key *key)
{
	struct mlcc_rate *order = bpf_map_lookup_elem(&mlcc_rates, key);

	if (order && order->bytes_per_sec > 0 && bpf_ktime_get_ns() < order->expires_ns)
		return order;
	return 0;
}

/* The fallback's ssthresh: Cubic's where it is the fallback and loaded, else Reno's. */
static __always_inline __u32 base_ssthresh(struct sock *sk, const struct mlcc_config *cfg)
{
	if (cubic_config(cfg) && bpf_ksym_exists(cubictcp_recalc_ssthresh))
		return cubictcp_recalc_ssthresh(sk);
	return tcp_reno_ssthresh(sk);
}

/* window.h's guard, with the fallback's ssthresh. */
static __always_inline void repair_ssthresh(struct sock *sk, const struct mlcc_config *cfg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 back;

	if (!ssthresh_is_stale(tp))
		return;
	back = window_before_reduction(tp);
	repaired(tp, base_ssthresh(sk, cfg), back);
}

static __always_inline int in_cwnd_reduction(__u8 state)
{
	return state == TCP_CA_CWR || state == TCP_CA_Recovery;
}

static __always_inline __u32 packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* The kernel's tcp_may_raise_cwnd: grow only on in-order delivery unless reordering is high. */
static __always_inline int may_raise_cwnd(struct sock *sk, int flag)
{
	int threshold = sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_reordering;

	if ((int)tcp_sk(sk)->reordering > threshold)
		return flag & FLAG_FORWARD_PROGRESS;
	return flag & FLAG_DATA_ACKED;
}

/*
 * Proportional rate reduction (RFC 6937), as the kernel's tcp_cwnd_reduction: while more is in
 * flight than ssthresh, send ssthresh/prior_cwnd of what is delivered; below it, grow back to
 * ssthresh no faster than slow start; and always let the fast retransmit go at once. Cutting
 * cwnd straight to ssthresh instead held the retransmission back until a third of the window
 * had drained. The kernel keeps prior_cwnd and prr_out; prr_delivered is ours (the kernel counts
 * it only in the function it skips for a CC with cong_control), counted in every mode.
 */
static __always_inline void prr(struct sock *sk, const struct rate_sample *rs, int flag)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mlcc_ca *ca = ca_of(sk);
	__u32 in_flight = packets_in_flight(tp);
	int delta = (int)tp->snd_ssthresh - (int)in_flight;
	int delivered = rs->acked_sacked;
	int sndcnt;

	int floor = tp->prr_out ? 0 : 1;

	if (!ca || delivered <= 0 || !tp->prior_cwnd)
		return;
	if (delta < 0) {
		__u64 dividend = (__u64)tp->snd_ssthresh * ca->prr_delivered + tp->prior_cwnd - 1;

		sndcnt = (int)(dividend / tp->prior_cwnd) - (int)tp->prr_out;
	} else {
		sndcnt = (int)(ca->prr_delivered - tp->prr_out);
		if (sndcnt < delivered)
			sndcnt = delivered;
		if ((flag & FLAG_SND_UNA_ADVANCED) && !rs->losses)
			sndcnt++;
		if (sndcnt > delta)
			sndcnt = delta;
	}
	if (sndcnt < floor)
		sndcnt = floor;
	tp->snd_cwnd = in_flight + sndcnt;
}

/*
 * The fallback CC (Reno or Cubic), run here because the kernel skips cong_avoid and its cwnd
 * reduction for a CC that has cong_control: PRR in CWR and Recovery, the CC's growth otherwise
 * where the kernel's tcp_may_raise_cwnd would allow it. (BBR is a cong_control of its own and
 * runs whole, in mlcc_cong_control.)
 */
static __always_inline void fallback(struct sock *sk, __u32 ack, const struct rate_sample *rs,
				     int flag, int use_cubic)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (in_cwnd_reduction(inet_csk(sk)->icsk_ca_state)) {
		prr(sk, rs, flag);
	} else if (rs->acked_sacked > 0 && may_raise_cwnd(sk, flag)) {
		if (use_cubic && bpf_ksym_exists(cubictcp_cong_avoid))
			cubictcp_cong_avoid(sk, ack, rs->acked_sacked);
		else
			tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
		tp->snd_cwnd_stamp = (__u32)bpf_jiffies64();
	}
	fallback_pacing(sk);
}

/*
 * A paced flow loses throughput to random loss only where recovery waits for a timer: the 200 ms
 * RTO floor that suits the WAN is 50-200 RTTs in a data centre, and one lost retransmission
 * stalls a whole collective for that long. The floor is the operator's (mlcc_config), applied
 * when a socket joins the CC; the kernel refuses less than two timer ticks, so it is raised to
 * that.
 */
static __always_inline void set_rto_floor(struct sock *sk, const struct mlcc_config *cfg)
{
	int us = cfg->rto_min_us;
	int tick_us = 1000000 / CONFIG_HZ;

	if (us == 0)
		return;
	if (us < 2 * tick_us)
		us = 2 * tick_us;
	bpf_setsockopt(sk, SOL_TCP, TCP_BPF_RTO_MIN, &us, sizeof(us));
}

/*
 * An order with a fill class: the fallback CC, unpaced (BBR: at no less than the guaranteed
 * rate), over a cwnd floor of the guaranteed rate's BDP.
 * Beyond the floor the socket's bytes leave in the fill class (mlcc_mark) and react to loss there
 * as any TCP's; the guaranteed rate itself is not cut by it.
 */
static __always_inline void fill(struct sock *sk, __u32 ack, const struct rate_sample *rs,
				 int flag, __u64 rate, const struct mlcc_config *cfg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 floor = rate_cwnd(sk, rate, cfg);

	if (bbr_config(cfg)) {
		if (sk->sk_pacing_rate < rate)
			sk->sk_pacing_rate = pacing_cap(sk, rate);
	} else {
		fallback(sk, ack, rs, flag, cubic_config(cfg));
	}
	if (tp->snd_cwnd < floor)
		tp->snd_cwnd = floor;
}

SEC("struct_ops")
void BPF_PROG(mlcc_init, struct sock *sk)
{
	struct mlcc_config *cfg = mlcc_cfg();

	sk->sk_pacing_status = SK_PACING_NEEDED;
	if (cfg)
		set_rto_floor(sk, cfg);
	if (bbr_config(cfg)) {
		if (bpf_ksym_exists(bbr_init))
			bbr_init(sk);
		return;
	}
	if (cubic_config(cfg) && bpf_ksym_exists(cubictcp_init))
		cubictcp_init(sk);
}

SEC("struct_ops")
void BPF_PROG(mlcc_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct mlcc_sock_key key;
	struct mlcc_rate *order;
	struct mlcc_config *cfg = mlcc_cfg();
	__u32 mode = MLCC_MODE_FALLBACK;
	struct mlcc_ca *ca;
	int bbr = bbr_config(cfg);

	if (bbr) {
		/*
		 * BBR's model follows every ACK, as Cubic's bookkeeping does, so it is current when an
		 * order lapses; an order then overrides the cwnd and pacing rate it set.
		 */
		if (bpf_ksym_exists(bbr_main))
			bbr_main(sk, ack, flag, rs);
	} else {
		repair_ssthresh(sk, cfg);
		if (in_cwnd_reduction(inet_csk(sk)->icsk_ca_state) && rs->acked_sacked > 0 &&
		    (ca = ca_of(sk)))
			ca->prr_delivered += rs->acked_sacked;
	}
	sock_key(sk, &key);
	order = live_order(&key);
	if (order && cfg) {
		if (order->fill_dscp) {
			fill(sk, ack, rs, flag, order->bytes_per_sec, cfg);
			mode = MLCC_MODE_FILL;
		} else {
			pace(sk, order->bytes_per_sec, cfg);
			mode = MLCC_MODE_PACED;
		}
	} else if (!bbr) {
		fallback(sk, ack, rs, flag, cubic_config(cfg));
	}
	record_stats(sk, &key, rs, mode);
}

SEC("struct_ops")
__u32 BPF_PROG(mlcc_ssthresh, struct sock *sk)
{
	struct mlcc_config *cfg = mlcc_cfg();

	if (bbr_config(cfg) && bpf_ksym_exists(bbr_ssthresh))
		return bbr_ssthresh(sk);
	return base_ssthresh(sk, cfg);
}

/*
 * The kernel's tcp_init_cwnd_reduction and tcp_end_cwnd_reduction, as far as they are skipped for
 * a CC with cong_control: PRR starts counting when CWR or Recovery is entered from outside them,
 * and cwnd is set to ssthresh when they end, unless Recovery was undone. The state changes after
 * this callback returns: icsk_ca_state is still the old one.
 */
static __always_inline void note_reduction(struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u8 old_state = inet_csk(sk)->icsk_ca_state;
	struct mlcc_ca *ca;

	if (in_cwnd_reduction(new_state) && !in_cwnd_reduction(old_state) && (ca = ca_of(sk)))
		ca->prr_delivered = 0;
	if (in_cwnd_reduction(old_state) && new_state < TCP_CA_CWR &&
	    tp->snd_ssthresh < TCP_INFINITE_SSTHRESH &&
	    (old_state == TCP_CA_CWR || tp->undo_marker))
		tp->snd_cwnd = tp->snd_ssthresh;
}

/*
 * The fallback's bookkeeping runs whatever the socket's mode, so it is current when an order
 * lapses. BBR keeps its own cwnd through CWR and Recovery (packet conservation, then its prior
 * cwnd back).
 */
SEC("struct_ops")
void BPF_PROG(mlcc_set_state, struct sock *sk, __u8 new_state)
{
	struct mlcc_config *cfg = mlcc_cfg();

	if (bbr_config(cfg)) {
		if (bpf_ksym_exists(bbr_set_state))
			bbr_set_state(sk, new_state);
		return;
	}
	repair_ssthresh(sk, cfg);
	note_reduction(sk, new_state);
	if (cubic_config(cfg) && bpf_ksym_exists(cubictcp_state))
		cubictcp_state(sk, new_state);
}

/*
 * The kernel restarts a CC's window after idle (tcp_slow_start_after_idle_check, RFC 2861:
 * cwnd halved for each RTO the socket sat idle, down to the initial window, ssthresh kept at
 * 3/4 of the old window) but skips it for a CC with cong_control, as mlcc_cc is. Without it a
 * socket on the Cubic or Reno fallback starts each burst with the whole window its last burst
 * ended with, where under the kernel's own Cubic it starts from half of it: two jobs whose
 * bursts meet then share the link evenly, burst after burst, instead of one finishing first
 * and the two drifting apart (testbed micro-two-jobs-heavy, nothing scheduled: iterations
 * 0.95 s against Cubic's 0.87). So the fallback does it here, at the first send after idle.
 * Idle is measured against the RTO the kernel's own floor gives (net.ipv4.tcp_rto_min_us): the
 * datapath's lower floor is for loss recovery, and Cubic would not restart sooner. BBR, a
 * cong_control CC in the kernel too, is left as the kernel leaves it; a socket with a paced
 * order has its window set by the order. net.ipv4.tcp_slow_start_after_idle = 0 turns it off,
 * as for every other CC.
 */
#define TCP_INIT_CWND 10

/* srtt + max(rttvar, the kernel's floor), in jiffies: the socket's RTO under the kernel's floor. */
static __always_inline __u32 kernel_rto_jiffies(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	int floor = sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_rto_min_us;
	__u64 var = tp->rttvar_us;
	__u64 us;

	if (floor > 0 && var < (__u64)floor)
		var = floor;
	us = (tp->srtt_us >> 3) + var;
	return us * CONFIG_HZ / USEC_PER_SEC;
}

/* tcp_current_ssthresh: in a reduction the ssthresh it set, else at least 3/4 of cwnd. */
static __always_inline __u32 current_ssthresh(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 held = (tp->snd_cwnd >> 1) + (tp->snd_cwnd >> 2);

	if (in_cwnd_reduction(inet_csk(sk)->icsk_ca_state) || tp->snd_ssthresh >= held)
		return tp->snd_ssthresh;
	return held;
}

/*
 * tcp_cwnd_restart, where the kernel would have called it for this socket (less snd_cwnd_used,
 * which BPF may not write and only tcp_cwnd_application_limited reads: not emulated).
 */
static __always_inline void restart_after_idle(struct sock *sk, const struct mlcc_sock_key *key)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 now = (__u32)bpf_jiffies64();
	__s32 idle = (__s32)(now - tp->lsndtime);
	__u32 cwnd = tp->snd_cwnd;
	__u32 restart = cwnd < TCP_INIT_CWND ? cwnd : TCP_INIT_CWND;
	struct mlcc_rate *order;
	__u32 rto;
	int i;

	if (!sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_slow_start_after_idle || tp->packets_out)
		return;
	rto = kernel_rto_jiffies(sk);
	if (!rto || idle <= (__s32)rto)
		return;
	/* A paced order sets the window itself (a fill order runs the fallback above its floor). */
	order = live_order(key);
	if (order && !order->fill_dscp)
		return;
	tp->snd_ssthresh = current_ssthresh(sk);
	for (i = 0; i < 32; i++) {
		idle -= rto;
		if (idle <= 0 || cwnd <= restart)
			break;
		cwnd >>= 1;
	}
	tp->snd_cwnd = cwnd > restart ? cwnd : restart;
	tp->snd_cwnd_stamp = now;
}

/*
 * A socket that sends after idle has had no ACK since its queue emptied: its stats say it holds
 * nothing until the first ACK of what it sends now, unless updated here.
 */
static __always_inline void note_tx_start(struct sock *sk, const struct mlcc_sock_key *key)
{
	struct mlcc_sock_stats *st = bpf_map_lookup_elem(&mlcc_stats, key);

	if (st)
		st->queued_bytes = queued_bytes(tcp_sk(sk));
}

SEC("struct_ops")
void BPF_PROG(mlcc_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct mlcc_config *cfg = mlcc_cfg();

	if (event == CA_EVENT_TX_START) {
		struct mlcc_sock_key key;

		sock_key(sk, &key);
		note_tx_start(sk, &key);
		if (!bbr_config(cfg))
			restart_after_idle(sk, &key);
	}
	if (bbr_config(cfg)) {
		if (bpf_ksym_exists(bbr_cwnd_event))
			bbr_cwnd_event(sk, event);
	} else if (cubic_config(cfg) && bpf_ksym_exists(cubictcp_cwnd_event)) {
		cubictcp_cwnd_event(sk, event);
	}
}

SEC("struct_ops")
void BPF_PROG(mlcc_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct mlcc_config *cfg = mlcc_cfg();

	if (bbr_config(cfg))
		return;
	repair_ssthresh(sk, cfg);
	if (cubic_config(cfg) && bpf_ksym_exists(cubictcp_acked))
		cubictcp_acked(sk, sample);
}

SEC("struct_ops")
__u32 BPF_PROG(mlcc_undo_cwnd, struct sock *sk)
{
	if (bbr_config(mlcc_cfg()) && bpf_ksym_exists(bbr_undo_cwnd))
		return bbr_undo_cwnd(sk);
	return tcp_reno_undo_cwnd(sk);
}

/*
 * The send buffer the kernel grows a socket's to, in windows (tcp_sndbuf_expand): three where
 * BBR is the fallback, as the kernel's BBR asks for, else the kernel's two for a CC that does
 * not say.
 */
SEC("struct_ops")
__u32 BPF_PROG(mlcc_sndbuf_expand, struct sock *sk)
{
	if (bbr_config(mlcc_cfg()) && bpf_ksym_exists(bbr_sndbuf_expand))
		return bbr_sndbuf_expand(sk);
	return 2;
}

/*
 * The TSO bursts the kernel would size for a socket at its default tcp_tso_rtt_log (9): since
 * 5.18 a socket whose min RTT is small sends up to a whole 64 KB burst whatever its rate
 * (tcp_tso_autosize). mlccd sets the namespace's log to 0 so that a paced order sends bursts
 * of its rate; returned as the least burst, this gives a socket with no order the bursts the
 * kernel's own CC would send (at the kernel's default log, not whatever mlccd replaced).
 */
#define KERNEL_TSO_RTT_LOG 9

static __always_inline __u32 kernel_tso_segs(struct sock *sk, __u32 least)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u64 gso = sk->sk_gso_max_size;
	__u64 bytes = sk->sk_pacing_rate >> sk->sk_pacing_shift;
	__u32 r = tp->rtt_min.s[0].v >> KERNEL_TSO_RTT_LOG;

	if (r < 32)
		bytes += gso >> r;
	if (bytes > gso)
		bytes = gso;
	bytes /= mss;
	return bytes > least ? (__u32)bytes : least;
}

/*
 * The fewest segments a TSO burst holds: the sysctl's, as for a CC that does not say, except
 * on the BBR fallback with no order, where it is the burst the kernel's BBR would send. Sent
 * in the bursts of its rate behind another CC's standing queue, BBR's window (two BDPs at the
 * min RTT plus what its ACKs arrive aggregated by) stayed a third of the kernel's BBR's and its
 * job ran 45 % longer (testbed micro-coexistence, docs/notes/2026-12-06-bbr-fallback-bursts.md).
 */
SEC("struct_ops")
__u32 BPF_PROG(mlcc_min_tso_segs, struct sock *sk)
{
	__u32 least = sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_min_tso_segs;
	struct mlcc_sock_key key;

	if (!bbr_config(mlcc_cfg()) || !bpf_ksym_exists(bbr_min_tso_segs))
		return least;
	sock_key(sk, &key);
	if (live_order(&key))
		return least;
	return kernel_tso_segs(sk, bbr_min_tso_segs(sk));
}

/* The order goes with the socket too: a later socket reusing the 4-tuple starts unordered. */
SEC("struct_ops")
void BPF_PROG(mlcc_release, struct sock *sk)
{
	struct mlcc_sock_key key;

	sock_key(sk, &key);
	bpf_map_delete_elem(&mlcc_stats, &key);
	bpf_map_delete_elem(&mlcc_rates, &key);
	bpf_map_delete_elem(&mlcc_marks, &key);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mlcc_cc = {
	.init = (void *)mlcc_init,
	.cong_control = (void *)mlcc_cong_control,
	.ssthresh = (void *)mlcc_ssthresh,
	.undo_cwnd = (void *)mlcc_undo_cwnd,
	.set_state = (void *)mlcc_set_state,
	.cwnd_event = (void *)mlcc_cwnd_event,
	.pkts_acked = (void *)mlcc_pkts_acked,
	.sndbuf_expand = (void *)mlcc_sndbuf_expand,
	.min_tso_segs = (void *)mlcc_min_tso_segs,
	.release = (void *)mlcc_release,
	.name = "mlcc",
};

SEC("sockops")
int mlcc_sockops(struct bpf_sock_ops *skops)
{
	struct mlcc_config *cfg;

	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	cfg = mlcc_cfg();
	if (cfg)
		bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc_name, sizeof(cfg->cc_name));
	return 1;
}

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define ETH_HLEN 14

/*
 * Whether a socket's `len` bytes leaving now fit the token bucket of its guaranteed rate: the
 * bucket fills at the rate and holds a millisecond of it, or one TSO burst where that is under a
 * tenth of a second of the rate, so the default class carries the guaranteed rate in the bursts
 * the stack sends and nothing beyond it (and a token guarantee, none of them).
 */
static __always_inline int within_rate(const struct mlcc_sock_key *key, __u64 rate, __u32 len)
{
	__u64 now = bpf_ktime_get_ns(), depth = rate / 1000, burst = rate / 10;
	struct mlcc_mark *m = bpf_map_lookup_elem(&mlcc_marks, key);

	if (burst > MLCC_MAX_BURST_BYTES)
		burst = MLCC_MAX_BURST_BYTES;
	if (depth < burst)
		depth = burst;
	if (!m) {
		struct mlcc_mark fresh = {.tokens = depth, .last_ns = now};

		bpf_map_update_elem(&mlcc_marks, key, &fresh, BPF_NOEXIST);
		m = bpf_map_lookup_elem(&mlcc_marks, key);
		if (!m)
			return 1;
	}
	if (now > m->last_ns) {
		__u64 add = (now - m->last_ns) * rate / 1000000000ULL;

		m->tokens = m->tokens + add > depth ? depth : m->tokens + add;
		m->last_ns = now;
	}
	if (m->tokens < len)
		return 0;
	m->tokens -= len;
	return 1;
}

/* Sets the DSCP of an IPv4 or IPv6 packet, keeping its ECN bits. */
static __always_inline void set_dscp(struct __sk_buff *skb, __u8 dscp, int v6)
{
	if (v6) {
		__u8 b[2];

		if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2))
			return;
		/* Traffic class: the low 4 bits of byte 0 and the high 4 of byte 1. */
		__u8 tc = (dscp << 2) | (((b[0] & 0x0f) << 4 | b[1] >> 4) & 0x03);

		b[0] = (b[0] & 0xf0) | (tc >> 4);
		b[1] = (b[1] & 0x0f) | (tc << 4);
		bpf_skb_store_bytes(skb, ETH_HLEN, b, 2, 0);
		return;
	}
	__u8 old;

	if (bpf_skb_load_bytes(skb, ETH_HLEN + 1, &old, 1))
		return;
	__u8 tos = (dscp << 2) | (old & 0x03);

	if (tos == old)
		return;
	/* The checksum covers 16-bit words: the TOS byte is the low half of the first. */
	bpf_l3_csum_replace(skb, ETH_HLEN + 10, bpf_htons(old), bpf_htons(tos), 2);
	bpf_skb_store_bytes(skb, ETH_HLEN + 1, &tos, 1, 0);
}

/*
 * tc egress on the host's uplink: a data segment of a socket whose order has a fill class leaves
 * in the default class while it fits the token bucket of the order's rate, else marked with the
 * fill DSCP. Everything else passes unchanged: pure ACKs, sockets without a fill order, sockets
 * not on the CC, orders past their expiry.
 */
SEC("tc")
int mlcc_mark(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct mlcc_sock_key key;
	struct mlcc_rate *order;
	struct bpf_sock *bsk;
	struct tcp_sock *tp;
	__u32 l4_off, hdrs;
	struct tcphdr *th;
	int v6;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
			return TC_ACT_OK;
		l4_off = ETH_HLEN + ip->ihl * 4;
		v6 = 0;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		l4_off = ETH_HLEN + sizeof(*ip6);
		v6 = 1;
	} else {
		return TC_ACT_OK;
	}
	th = data + l4_off;
	if ((void *)(th + 1) > end)
		return TC_ACT_OK;
	hdrs = l4_off + th->doff * 4;
	if (skb->len <= hdrs)
		return TC_ACT_OK;
	bsk = skb->sk;
	if (!bsk)
		return TC_ACT_OK;
	tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return TC_ACT_OK;
	sock_key((struct sock *)tp, &key);
	order = bpf_map_lookup_elem(&mlcc_rates, &key);
	if (!order || !order->fill_dscp || bpf_ktime_get_ns() >= order->expires_ns)
		return TC_ACT_OK;
	if (within_rate(&key, order->bytes_per_sec, skb->len - hdrs))
		return TC_ACT_OK;
	set_dscp(skb, order->fill_dscp & 0x3f, v6);
	return TC_ACT_OK;
}
