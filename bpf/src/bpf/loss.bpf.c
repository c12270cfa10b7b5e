// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * mlcc_loss: random loss for the testbed, where this kernel has no netem.
 *
 * A tc classifier on the clsact ingress of the device where a link delivers (a drop at the
 * sender's own egress would be a local drop its socket hears of, not a loss) that drops TCP
 * segments carrying payload on the
 * data-plane ports (either end in [port_lo, port_hi]) with probability threshold / 2^32: pure
 * ACKs, handshakes and control traffic (gRPC to switches and peers, iperf3's control) pass, so
 * the loss hits what the paper's Fig. 10 loses, the training data. The random source is a
 * xorshift64* per CPU seeded from `seed` (logged by the loader), so a run's loss pattern is as
 * reproducible as the CPU interleaving allows. Segments, not skbs, are the unit: the link's
 * sender is set to gso_max_segs 1, and a GSO skb that still arrives counts (and drops) whole.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define ETH_HLEN 14

/* Set before load. */
const volatile __u32 threshold = 0;
const volatile __u64 seed = 0;
const volatile __u16 port_lo = 0;
const volatile __u16 port_hi = 0;

/* Per-CPU counters, summed by the loader: data segments seen and dropped, other packets passed. */
struct mlcc_loss_counters {
	__u64 data_segs;
	__u64 dropped_segs;
	__u64 other_pkts;
	__u64 rng;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mlcc_loss_counters);
} mlcc_loss_counters SEC(".maps");

static __always_inline __u32 next_random(struct mlcc_loss_counters *c)
{
	__u64 x = c->rng;

	if (x == 0) {
		/* splitmix64 of seed and CPU: distinct, non-zero streams per CPU. */
		x = seed + 0x9E3779B97F4A7C15ULL * (bpf_get_smp_processor_id() + 1);
		x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
		x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
		x ^= x >> 31;
		if (x == 0)
			x = 1;
	}
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->rng = x;
	return (__u32)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

SEC("tc")
int mlcc_loss(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct mlcc_loss_counters *c;
	__u32 zero = 0, l4_off, payload, segs, i;
	struct tcphdr *th;
	__u16 sport, dport;

	c = bpf_map_lookup_elem(&mlcc_loss_counters, &zero);
	if (!c)
		return TC_ACT_OK;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + ETH_HLEN;

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
			goto other;
		l4_off = ETH_HLEN + ip->ihl * 4;
		payload = bpf_ntohs(ip->tot_len);
		if (payload < ip->ihl * 4)
			goto other;
		payload -= ip->ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + ETH_HLEN;

		/* Extension headers are not followed: the testbed sends none. */
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			goto other;
		l4_off = ETH_HLEN + sizeof(*ip6);
		payload = bpf_ntohs(ip6->payload_len);
	} else {
		goto other;
	}
	th = data + l4_off;
	if ((void *)(th + 1) > end)
		goto other;
	if (payload <= th->doff * 4U)
		goto other;
	sport = bpf_ntohs(th->source);
	dport = bpf_ntohs(th->dest);
	if (!((sport >= port_lo && sport <= port_hi) || (dport >= port_lo && dport <= port_hi)))
		goto other;

	segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	c->data_segs += segs;
	/* A GSO skb goes or stays whole: dropped if any of its segments would have been. */
	for (i = 0; i < 64 && i < segs; i++) {
		if (next_random(c) < threshold) {
			c->dropped_segs += segs;
			return TC_ACT_SHOT;
		}
	}
	return TC_ACT_OK;
other:
	c->other_pkts++;
	return TC_ACT_OK;
}
