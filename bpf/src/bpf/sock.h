/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Helpers both congestion controls (mlcc.bpf.c, mltcp.bpf.c) use: the socket casts and the
 * socket's map key. Include after vmlinux.h, the libbpf headers and mlcc.h.
 */
#ifndef MLCC_SOCK_H
#define MLCC_SOCK_H

#define AF_INET6 10

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void sock_key(const struct sock *sk, struct mlcc_sock_key *k)
{
	const struct sock_common *c = &sk->__sk_common;

	__builtin_memset(k, 0, sizeof(*k));
	k->netns_cookie = c->skc_net.net->net_cookie;
	k->src_port = c->skc_num;
	k->dst_port = bpf_ntohs(c->skc_dport);
	if (c->skc_family == AF_INET6) {
		k->src_addr[0] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[0];
		k->src_addr[1] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[1];
		k->src_addr[2] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[2];
		k->src_addr[3] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[3];
		k->dst_addr[0] = c->skc_v6_daddr.in6_u.u6_addr32[0];
		k->dst_addr[1] = c->skc_v6_daddr.in6_u.u6_addr32[1];
		k->dst_addr[2] = c->skc_v6_daddr.in6_u.u6_addr32[2];
		k->dst_addr[3] = c->skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		k->src_addr[2] = bpf_htonl(0xffff);
		k->src_addr[3] = c->skc_rcv_saddr;
		k->dst_addr[2] = bpf_htonl(0xffff);
		k->dst_addr[3] = c->skc_daddr;
	}
}

#endif
