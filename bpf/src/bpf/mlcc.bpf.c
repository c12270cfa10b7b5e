// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * mlcc kernel datapath.
 *
 * mlcc_cc paces every socket at the rate mlccd wrote for its 4-tuple and caps cwnd near the
 * rate's BDP, so the planned rate, not loss, decides how fast a flow goes. Without an order (none
 * yet, or mlccd stopped renewing it) the socket runs Reno through the kernel's own kfuncs: flows
 * never freeze because the daemon is gone.
 *
 * mlcc_sockops puts sockets of the cgroups it is attached to on mlcc_cc, so a job opts in
 * without patching its communication library.
 *
 * GPL: the tcp_reno_* kfuncs are GPL-only.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "mlcc.h"
#include "sock.h"

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
_Static_assert(sizeof(struct mlcc_rate) == 16, "mlcc_rate layout");
_Static_assert(sizeof(struct mlcc_sock_stats) == 64, "mlcc_sock_stats layout");
_Static_assert(sizeof(struct mlcc_config) == 32, "mlcc_config layout");

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

extern unsigned int CONFIG_HZ __kconfig;

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

static __always_inline __u32 min_rtt_us(const struct tcp_sock *tp)
{
	__u32 rtt = tp->rtt_min.s[0].v;

	if (rtt == ~0U || rtt == 0)
		rtt = tp->srtt_us >> 3;
	return rtt;
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
static __always_inline void pace(struct sock *sk, __u64 rate, const struct mlcc_config *cfg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u32 rtt = min_rtt_us(tp);

	if (rtt < cfg->rtt_floor_us)
		rtt = cfg->rtt_floor_us;
	__u64 burst, cwnd;

	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;

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
	tp->snd_cwnd = cwnd;
}

/*
 * Reno, run here because the kernel skips cong_avoid (and its cwnd reduction) for a CC that has
 * cong_control. Recovery halves cwnd at once to ssthresh instead of PRR's gradual descent.
 */
static __always_inline void fallback_reno(struct sock *sk, __u32 ack, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u8 state = inet_csk(sk)->icsk_ca_state;

	sk->sk_pacing_rate = sk->sk_max_pacing_rate;
	if (state == TCP_CA_CWR || state == TCP_CA_Recovery) {
		__u32 target = tp->snd_ssthresh > 2 ? tp->snd_ssthresh : 2;

		if (tp->snd_cwnd > target)
			tp->snd_cwnd = target;
		return;
	}
	if (rs->acked_sacked > 0)
		tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
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

SEC("struct_ops")
void BPF_PROG(mlcc_init, struct sock *sk)
{
	struct mlcc_config *cfg;
	__u32 zero = 0;

	sk->sk_pacing_status = SK_PACING_NEEDED;
	cfg = bpf_map_lookup_elem(&mlcc_config, &zero);
	if (cfg)
		set_rto_floor(sk, cfg);
}

SEC("struct_ops")
void BPF_PROG(mlcc_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct mlcc_sock_key key;
	struct mlcc_rate *order;
	struct mlcc_config *cfg;
	__u32 zero = 0;
	__u32 mode = MLCC_MODE_FALLBACK;

	sock_key(sk, &key);
	order = bpf_map_lookup_elem(&mlcc_rates, &key);
	cfg = bpf_map_lookup_elem(&mlcc_config, &zero);
	if (order && cfg && order->bytes_per_sec > 0 && bpf_ktime_get_ns() < order->expires_ns) {
		pace(sk, order->bytes_per_sec, cfg);
		mode = MLCC_MODE_PACED;
	} else {
		fallback_reno(sk, ack, rs);
	}
	record_stats(sk, &key, rs, mode);
}

SEC("struct_ops")
__u32 BPF_PROG(mlcc_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mlcc_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

/* The order goes with the socket too: a later socket reusing the 4-tuple starts unordered. */
SEC("struct_ops")
void BPF_PROG(mlcc_release, struct sock *sk)
{
	struct mlcc_sock_key key;

	sock_key(sk, &key);
	bpf_map_delete_elem(&mlcc_stats, &key);
	bpf_map_delete_elem(&mlcc_rates, &key);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mlcc_cc = {
	.init = (void *)mlcc_init,
	.cong_control = (void *)mlcc_cong_control,
	.ssthresh = (void *)mlcc_ssthresh,
	.undo_cwnd = (void *)mlcc_undo_cwnd,
	.release = (void *)mlcc_release,
	.name = "mlcc",
};

SEC("sockops")
int mlcc_sockops(struct bpf_sock_ops *skops)
{
	struct mlcc_config *cfg;
	__u32 zero = 0;

	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	cfg = bpf_map_lookup_elem(&mlcc_config, &zero);
	if (cfg)
		bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc_name, sizeof(cfg->cc_name));
	return 1;
}
