// SPDX-License-Identifier: GPL-2.0
/*
 * zcnic: a pair of software NICs, each the other's wire, that the kernel
 * treats as a NIC with memory providers: queue management ops, header split,
 * a page pool per RX queue that a devmem TCP dma-buf or an io_uring zcrx area
 * can replace, and netmem TX.
 *
 * "The device" is this driver's NAPI poll: it reads the sender's frame through
 * the DMA addresses of its buffers and writes it into buffers of the receiving
 * queue's page pool through theirs. In the lab's guests a DMA address is the
 * physical address (no IOMMU), which the module checks when it loads.
 *
 * See docs/design.md, "Software NIC (kmod/zcnic)".
 */

#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/device/faux.h>
#include <linux/if_vlan.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/jhash.h>
#include <linux/module.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <net/ip.h>
#include <net/netdev_lock.h>
#include <net/netdev_queues.h>
#include <net/netdev_rx_queue.h>
#include <net/netmem.h>
#include <net/page_pool/helpers.h>
#include <net/rtnetlink.h>

#include "zcnic.h"

static unsigned int queues = 4;
module_param(queues, uint, 0444);
MODULE_PARM_DESC(queues, "RX and TX queues per device (1-16, default 4)");

static unsigned int pairs = 1;
module_param(pairs, uint, 0444);
MODULE_PARM_DESC(pairs, "device pairs: zcnic0/zcnic1, zcnic2/zcnic3, ... (1-8, default 1)");

struct device *zcnic_dma_dev;
static struct faux_device *zcnic_faux;
static struct net_device **zcnic_devs;
static unsigned int zcnic_ndevs;

/* ---- the wire: xmit parses and steers, the peer's NAPI does the "DMA" ---- */

static void zcnic_parse(struct sk_buff *skb, struct zcnic_frame *f)
{
	unsigned int off = ETH_HLEN;
	struct ethhdr _eth, *eth;
	u8 l4 = 0;

	memset(f, 0, sizeof(*f));
	/* Headers sit in the linear part; skb_header_pointer() refuses to read
	 * unreadable (net_iov) frags rather than touch them.
	 */
	eth = skb_header_pointer(skb, 0, sizeof(_eth), &_eth);
	if (!eth)
		return;
	if (eth->h_proto == htons(ETH_P_IP)) {
		struct iphdr _iph, *iph;

		iph = skb_header_pointer(skb, off, sizeof(_iph), &_iph);
		if (!iph || iph->ihl < 5)
			return;
		f->ipv = 4;
		f->saddr = iph->saddr;
		f->daddr = iph->daddr;
		off += iph->ihl * 4;
		if (!(iph->frag_off & htons(IP_MF | IP_OFFSET)))
			l4 = iph->protocol;
	} else if (eth->h_proto == htons(ETH_P_IPV6)) {
		struct ipv6hdr _ip6h, *ip6h;

		ip6h = skb_header_pointer(skb, off, sizeof(_ip6h), &_ip6h);
		if (!ip6h)
			return;
		f->ipv = 6;
		f->saddr = ip6h->saddr.s6_addr32[3] ^ ip6h->saddr.s6_addr32[2];
		f->daddr = ip6h->daddr.s6_addr32[3] ^ ip6h->daddr.s6_addr32[2];
		off += sizeof(*ip6h);
		l4 = ip6h->nexthdr;	/* no extension headers: like many NICs */
	} else {
		return;
	}

	if (l4 == IPPROTO_TCP) {
		struct tcphdr _th, *th;

		th = skb_header_pointer(skb, off, sizeof(_th), &_th);
		if (!th || th->doff < 5 || off + th->doff * 4 > skb_headlen(skb))
			goto hash;
		f->l4 = l4;
		f->sport = th->source;
		f->dport = th->dest;
		f->hdr_len = off + th->doff * 4;
	} else if (l4 == IPPROTO_UDP) {
		struct udphdr _uh, *uh;

		uh = skb_header_pointer(skb, off, sizeof(_uh), &_uh);
		if (!uh)
			goto hash;
		f->l4 = l4;
		f->sport = uh->source;
		f->dport = uh->dest;
		f->hdr_len = off + sizeof(*uh);
	}
hash:
	f->hash = jhash_3words((__force u32)f->saddr, (__force u32)f->daddr,
			       ((__force u32)f->sport << 16) |
			       (__force u32)f->dport, l4);
}

static netdev_tx_t zcnic_xmit(struct sk_buff *skb, struct net_device *dev)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u16 txq = skb_get_queue_mapping(skb);
	struct zcnic_txq_stats *ts = &priv->txs[txq];
	unsigned int len = skb->len;
	struct zcnic_priv *ppriv;
	struct net_device *peer;
	struct zcnic_rxq *rxq;
	int q;

	rcu_read_lock();
	peer = rcu_dereference(priv->peer);
	if (unlikely(!peer || !netif_running(peer) || skb_has_frag_list(skb) ||
		     len < ETH_HLEN))
		goto drop;
	ppriv = netdev_priv(peer);

	BUILD_BUG_ON(sizeof(struct zcnic_frame) > sizeof(skb->cb));
	zcnic_parse(skb, zcnic_cb(skb));
	q = zcnic_steer(ppriv, zcnic_cb(skb));
	if (q < 0)	/* an ntuple rule's drop action */
		goto drop;
	rxq = &ppriv->rxq[q];
	if (skb_queue_len(&rxq->wire) >= READ_ONCE(ppriv->rx_pending))
		goto drop;

	skb_tx_timestamp(skb);
	/* The frame stays the sender's until the receiving queue has copied
	 * it: its socket's write accounting and, for devmem TX, its net_iovs
	 * and the completion notification are released when it is freed.
	 */
	skb_queue_tail(&rxq->wire, skb);
	napi_schedule(&rxq->napi);
	rcu_read_unlock();

	u64_stats_update_begin(&ts->syncp);
	u64_stats_inc(&ts->packets);
	u64_stats_add(&ts->bytes, len);
	u64_stats_update_end(&ts->syncp);
	return NETDEV_TX_OK;

drop:
	rcu_read_unlock();
	u64_stats_update_begin(&ts->syncp);
	u64_stats_inc(&ts->drops);
	u64_stats_update_end(&ts->syncp);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

/* The sender's buffers as the device sees them: DMA addresses. For a net_iov
 * (devmem TX) that is the binding's address, as __skb_frag_dma_map() gives it
 * (include/linux/skbuff.h); pages are mapped here and unmapped when copied.
 */
struct zcnic_txmap {
	unsigned int nr;
	dma_addr_t addr[MAX_SKB_FRAGS];
};

static int zcnic_tx_map(struct sk_buff *skb, struct zcnic_txmap *m)
{
	struct skb_shared_info *si = skb_shinfo(skb);
	unsigned int i;

	m->nr = 0;
	for (i = 0; i < si->nr_frags; i++) {
		const skb_frag_t *frag = &si->frags[i];

		m->addr[i] = skb_frag_dma_map(zcnic_dma_dev, frag, 0,
					      skb_frag_size(frag),
					      DMA_TO_DEVICE);
		if (dma_mapping_error(zcnic_dma_dev, m->addr[i]))
			return -ENOMEM;
		m->nr = i + 1;
	}
	return 0;
}

static void zcnic_tx_unmap(struct sk_buff *skb, struct zcnic_txmap *m)
{
	struct skb_shared_info *si = skb_shinfo(skb);
	unsigned int i;

	for (i = 0; i < m->nr; i++) {
		const skb_frag_t *frag = &si->frags[i];

		/* net_iovs are mapped by their binding, not per packet
		 * (netmem_dma_unmap_addr_set() in include/net/netmem.h).
		 */
		if (!skb_frag_is_net_iov(frag))
			dma_unmap_page(zcnic_dma_dev, m->addr[i],
				       skb_frag_size(frag), DMA_TO_DEVICE);
	}
}

/* Copy @len bytes at @off of the sender's frame to @dst, as the device would. */
static void zcnic_dma_copy(struct sk_buff *skb, struct zcnic_txmap *m,
			   unsigned int off, void *dst, unsigned int len)
{
	struct skb_shared_info *si = skb_shinfo(skb);
	unsigned int start = skb_headlen(skb), i;

	if (off < start) {
		unsigned int n = min(len, start - off);

		memcpy(dst, skb->data + off, n);
		dst += n;
		off += n;
		len -= n;
	}
	for (i = 0; len && i < si->nr_frags; i++) {
		unsigned int fsz = skb_frag_size(&si->frags[i]), n;

		if (off >= start + fsz) {
			start += fsz;
			continue;
		}
		n = min(len, start + fsz - off);
		memcpy(dst, phys_to_virt(m->addr[i]) + (off - start), n);
		dst += n;
		off += n;
		len -= n;
		start += fsz;
	}
}

/* Write @len bytes of the frame at @off into new buffers of the queue's page
 * pool and attach them as frags: whatever memory the pool hands out (pages,
 * a dma-buf's or a zcrx area's net_iovs), it is written through its DMA
 * address (page_pool_get_dma_addr_netmem()). A buffer holds up to the
 * queue's buffer size (a page, or what a memory provider asked for: 7.2's
 * rx_page_size), physically contiguous. Returns the buffers used.
 */
static int zcnic_rx_frags(struct zcnic_rxq *rxq, struct sk_buff *rx,
			  struct sk_buff *skb, struct zcnic_txmap *m,
			  unsigned int off, unsigned int len)
{
	struct page_pool *pp = rxq->pp;
	unsigned int buf_len = rxq->buf_len;
	int i = 0;

	while (len) {
		unsigned int n = min(len, buf_len);
		netmem_ref netmem;
		dma_addr_t addr;

		if (i >= MAX_SKB_FRAGS)
			return -EMSGSIZE;
		netmem = page_pool_alloc_netmems(pp, GFP_ATOMIC | __GFP_NOWARN);
		if (!netmem)
			return -ENOMEM;
		addr = page_pool_get_dma_addr_netmem(netmem);
		zcnic_dma_copy(skb, m, off, phys_to_virt(addr), n);
		page_pool_dma_sync_netmem_for_cpu(pp, netmem, 0, n);
		/* Sets skb->unreadable for a net_iov (__skb_fill_netmem_desc) */
		skb_add_rx_frag_netmem(rx, i, netmem, 0, n, buf_len);
		off += n;
		len -= n;
		i++;
	}
	return i;
}

static void zcnic_rx_one(struct zcnic_rxq *rxq, struct sk_buff *skb, int budget)
{
	struct zcnic_priv *priv = rxq->priv;
	struct zcnic_frame *f = zcnic_cb(skb);
	unsigned int len = skb->len, hlen, payload;
	bool unreadable = page_pool_is_unreadable(rxq->pp);
	struct zcnic_rxq_stats *st = &rxq->stats;
	struct sk_buff *rx = NULL;
	struct zcnic_txmap m;
	bool split = false;
	int err, bufs = 0;

	if (zcnic_tx_map(skb, &m))
		goto drop_unmap;

	payload = f->hdr_len ? len - f->hdr_len : 0;
	if (f->l4 == IPPROTO_TCP && payload) {
		/* Header split: the headers to the linear part, the payload to
		 * the queue's pool. Without it a frame the stack handed over
		 * as one TSO super-frame still goes to pages, like a NIC's LRO.
		 */
		if ((READ_ONCE(priv->hds) &&
		     payload > READ_ONCE(priv->hds_thresh)) || unreadable ||
		    len > ZCNIC_COPY_MAX)
			split = true;
	}
	hlen = split ? f->hdr_len : len;
	if (!split && (unreadable && len > ZCNIC_COPY_MAX))
		goto drop_unmap;

	rx = napi_alloc_skb(&rxq->napi, hlen);
	if (!rx) {
		u64_stats_update_begin(&st->syncp);
		u64_stats_inc(&st->alloc_fail);
		u64_stats_update_end(&st->syncp);
		goto drop_unmap;
	}
	zcnic_dma_copy(skb, &m, 0, skb_put(rx, hlen), hlen);
	if (split) {
		skb_mark_for_recycle(rx);
		bufs = zcnic_rx_frags(rxq, rx, skb, &m, hlen, len - hlen);
		if (bufs < 0) {
			err = bufs;
			if (err == -ENOMEM) {
				u64_stats_update_begin(&st->syncp);
				u64_stats_inc(&st->alloc_fail);
				u64_stats_update_end(&st->syncp);
			}
			goto drop_unmap;
		}
		/* A TSO super-frame arrives whole, marked as a GRO packet
		 * (what hardware GRO hands the stack).
		 */
		if (skb_is_gso(skb) && payload > skb_shinfo(skb)->gso_size) {
			struct skb_shared_info *si = skb_shinfo(rx);

			si->gso_size = skb_shinfo(skb)->gso_size;
			si->gso_type = skb_shinfo(skb)->gso_type &
				       (SKB_GSO_TCPV4 | SKB_GSO_TCPV6);
			if (!si->gso_type)
				si->gso_type = f->ipv == 6 ? SKB_GSO_TCPV6 :
							     SKB_GSO_TCPV4;
			si->gso_segs = DIV_ROUND_UP(payload, si->gso_size);
		}
	}
	zcnic_tx_unmap(skb, &m);
	/* The "DMA" is done: the sender's buffers are released, and for
	 * devmem TX its completion notification fires (skb_zcopy_clear()).
	 */
	napi_consume_skb(skb, budget);

	rx->protocol = eth_type_trans(rx, priv->dev);
	rx->ip_summed = CHECKSUM_UNNECESSARY;
	skb_record_rx_queue(rx, rxq->idx);
	if (f->ipv)
		skb_set_hash(rx, f->hash, f->l4 ? PKT_HASH_TYPE_L4 :
						  PKT_HASH_TYPE_L3);
	u64_stats_update_begin(&st->syncp);
	u64_stats_inc(&st->packets);
	u64_stats_add(&st->bytes, len);
	if (!split)
		u64_stats_add(&st->payload_linear, payload);
	else if (unreadable) {
		u64_stats_add(&st->payload_netmem, payload);
		u64_stats_add(&st->netmem_bufs, bufs);
	} else
		u64_stats_add(&st->payload_page, payload);
	u64_stats_update_end(&st->syncp);
	napi_gro_receive(&rxq->napi, rx);
	return;

drop_unmap:
	zcnic_tx_unmap(skb, &m);
	if (rx)
		dev_kfree_skb_any(rx);
	dev_kfree_skb_any(skb);
	u64_stats_update_begin(&st->syncp);
	u64_stats_inc(&st->drops);
	u64_stats_update_end(&st->syncp);
}

static int zcnic_poll(struct napi_struct *napi, int budget)
{
	struct zcnic_rxq *rxq = container_of(napi, struct zcnic_rxq, napi);
	struct sk_buff *skb;
	int done = 0;

	while (done < budget && (skb = skb_dequeue(&rxq->wire))) {
		zcnic_rx_one(rxq, skb, budget);
		done++;
	}
	if (done < budget && napi_complete_done(napi, done) &&
	    !skb_queue_empty_lockless(&rxq->wire))
		napi_schedule(napi);
	return done;
}

/* ---- page pools and the queue management ops ---- */

static struct page_pool *zcnic_pp_create(struct zcnic_priv *priv, u32 idx,
					 u32 buf_len)
{
	struct page_pool_params pp = {
		/* ALLOW_UNREADABLE_NETMEM and queue_idx let a memory provider
		 * bound to this queue supply the pool (page_pool_init(),
		 * page_pool_check_memory_provider() in net/core/page_pool.c).
		 */
		.flags = PP_FLAG_DMA_MAP | PP_FLAG_DMA_SYNC_DEV |
			 PP_FLAG_ALLOW_UNREADABLE_NETMEM,
		/* A provider's net_iovs are the pool's buffers: io_uring
		 * checks that the order matches its rx_buf_len
		 * (io_pp_zc_init() in io_uring/zcrx.c).
		 */
		.order = get_order(buf_len),
		.pool_size = priv->rx_pending,
		.nid = NUMA_NO_NODE,
		.dev = zcnic_dma_dev,
		.napi = &priv->rxq[idx].napi,
		.netdev = priv->dev,
		.queue_idx = idx,
		.dma_dir = DMA_FROM_DEVICE,
		.max_len = buf_len,
		.offset = 0,
	};

	return page_pool_create(&pp);
}

#if ZCNIC_QCFG
/* The buffer size 7.2's queue config gives a queue: a memory provider's
 * rx_page_size (io_uring zcrx's rx_buf_len) or the default, a page.
 * See netdev_queue_config() in net/core/netdev_config.c.
 */
static u32 zcnic_qcfg_buf_len(const struct netdev_queue_config *qcfg)
{
	return qcfg->rx_page_size ? qcfg->rx_page_size : PAGE_SIZE;
}

static u32 zcnic_queue_buf_len(struct net_device *dev, u32 idx)
{
	struct netdev_queue_config qcfg;

	if (idx >= dev->real_num_rx_queues)
		return PAGE_SIZE;
	netdev_queue_config(dev, idx, &qcfg);
	return zcnic_qcfg_buf_len(&qcfg);
}
#else
/* 6.18 has no per-queue config: buffers are pages. */
static u32 zcnic_queue_buf_len(struct net_device *dev, u32 idx)
{
	return PAGE_SIZE;
}
#endif

static int zcnic_open(struct net_device *dev)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u32 i;

	netdev_assert_locked(dev);
	for (i = 0; i < priv->max_queues; i++) {
		u32 buf_len = zcnic_queue_buf_len(dev, i);
		struct page_pool *pp = zcnic_pp_create(priv, i, buf_len);

		if (IS_ERR(pp)) {
			while (i--) {
				page_pool_destroy(priv->rxq[i].pp);
				priv->rxq[i].pp = NULL;
			}
			return PTR_ERR(pp);
		}
		priv->rxq[i].pp = pp;
		priv->rxq[i].buf_len = buf_len;
	}
	for (i = 0; i < priv->max_queues; i++) {
		napi_enable_locked(&priv->rxq[i].napi);
		netif_queue_set_napi(dev, i, NETDEV_QUEUE_TYPE_RX,
				     &priv->rxq[i].napi);
	}
	netif_carrier_on(dev);
	netif_tx_start_all_queues(dev);
	return 0;
}

static int zcnic_stop(struct net_device *dev)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u32 i;

	netdev_assert_locked(dev);
	netif_tx_stop_all_queues(dev);
	netif_carrier_off(dev);
	for (i = 0; i < priv->max_queues; i++) {
		struct zcnic_rxq *rxq = &priv->rxq[i];

		netif_queue_set_napi(dev, i, NETDEV_QUEUE_TYPE_RX, NULL);
		napi_disable_locked(&rxq->napi);
		skb_queue_purge(&rxq->wire);
		/* A pool with buffers still held (by a socket, a devmem
		 * token or a zcrx area) is freed when they come back.
		 */
		page_pool_destroy(rxq->pp);
		rxq->pp = NULL;
	}
	return 0;
}

#if ZCNIC_QCFG
/* 7.2's queue config (net/core/netdev_config.c): the default buffer is a
 * page; a memory provider may ask for a larger power of two up to
 * ZCNIC_RX_BUF_MAX (QCFG_RX_PAGE_SIZE in supported_params), which the core
 * validates here before it restarts the queue, and passes to mem_alloc.
 */
static void zcnic_default_qcfg(struct net_device *dev,
			       struct netdev_queue_config *qcfg)
{
	qcfg->rx_page_size = PAGE_SIZE;
}

static int zcnic_validate_qcfg(struct net_device *dev,
			       struct netdev_queue_config *qcfg,
			       struct netlink_ext_ack *extack)
{
	u32 len = zcnic_qcfg_buf_len(qcfg);

	if (!is_power_of_2(len) || len < PAGE_SIZE ||
	    len > ZCNIC_RX_BUF_MAX) {
		NL_SET_ERR_MSG_FMT_MOD(extack,
				       "rx page size %u: zcnic takes a power of two from %lu to %u",
				       len, PAGE_SIZE, ZCNIC_RX_BUF_MAX);
		return -ERANGE;
	}
	return 0;
}
#endif

/* Contract (net/core/netdev_rx_queue.c, netdev_rx_queue_reconfig()):
 * mem_alloc builds the new queue memory beside the running queue; stop hands
 * the running memory over in its @per_queue_mem; start installs the new one;
 * mem_free frees whichever the core gives back. On a closed device only
 * alloc and free are called.
 */
static int zcnic_queue_mem_alloc(struct net_device *dev,
#if ZCNIC_QCFG
				 struct netdev_queue_config *qcfg,
#endif
				 void *per_queue_mem, int idx)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	struct zcnic_qmem *qmem = per_queue_mem;
	u32 buf_len = PAGE_SIZE;
	struct page_pool *pp;

	if (idx < 0 || idx >= priv->max_queues)
		return -EINVAL;
#if ZCNIC_QCFG
	if (zcnic_validate_qcfg(dev, qcfg, NULL))
		return -ERANGE;
	buf_len = zcnic_qcfg_buf_len(qcfg);
#endif
	pp = zcnic_pp_create(priv, idx, buf_len);
	if (IS_ERR(pp))
		return PTR_ERR(pp);
	qmem->pp = pp;
	qmem->buf_len = buf_len;
	return 0;
}

static void zcnic_queue_mem_free(struct net_device *dev, void *per_queue_mem)
{
	struct zcnic_qmem *qmem = per_queue_mem;

	if (qmem->pp)
		page_pool_destroy(qmem->pp);
	qmem->pp = NULL;
}

static int zcnic_queue_start(struct net_device *dev,
#if ZCNIC_QCFG
			     struct netdev_queue_config *qcfg,
#endif
			     void *per_queue_mem, int idx)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	struct zcnic_qmem *qmem = per_queue_mem;
	struct zcnic_rxq *rxq = &priv->rxq[idx];

	netdev_assert_locked(dev);
	rxq->pp = qmem->pp;
	rxq->buf_len = qmem->buf_len;
	napi_enable_locked(&rxq->napi);
	netif_queue_set_napi(dev, idx, NETDEV_QUEUE_TYPE_RX, &rxq->napi);
	/* Frames that arrived while the queue was stopped */
	if (!skb_queue_empty_lockless(&rxq->wire))
		napi_schedule(&rxq->napi);
	return 0;
}

static int zcnic_queue_stop(struct net_device *dev, void *per_queue_mem,
			    int idx)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	struct zcnic_qmem *qmem = per_queue_mem;
	struct zcnic_rxq *rxq = &priv->rxq[idx];

	netdev_assert_locked(dev);
	netif_queue_set_napi(dev, idx, NETDEV_QUEUE_TYPE_RX, NULL);
	napi_disable_locked(&rxq->napi);
	/* The pool outlives the NAPI it recycled into (as in
	 * gve_rx_queue_stop(), bnxt_queue_stop()).
	 */
	page_pool_disable_direct_recycling(rxq->pp);
	qmem->pp = rxq->pp;
	qmem->buf_len = rxq->buf_len;
	rxq->pp = NULL;
	return 0;
}

static struct device *zcnic_queue_get_dma_dev(struct net_device *dev, int idx)
{
	return zcnic_dma_dev;
}

static const struct netdev_queue_mgmt_ops zcnic_queue_mgmt_ops = {
	.ndo_queue_mem_size	= sizeof(struct zcnic_qmem),
	.ndo_queue_mem_alloc	= zcnic_queue_mem_alloc,
	.ndo_queue_mem_free	= zcnic_queue_mem_free,
	.ndo_queue_start	= zcnic_queue_start,
	.ndo_queue_stop		= zcnic_queue_stop,
	.ndo_queue_get_dma_dev	= zcnic_queue_get_dma_dev,
#if ZCNIC_QCFG
	.ndo_default_qcfg	= zcnic_default_qcfg,
	.ndo_validate_qcfg	= zcnic_validate_qcfg,
	.supported_params	= QCFG_RX_PAGE_SIZE,
#endif
};

/* ---- statistics ---- */

static void zcnic_rxq_read(struct zcnic_rxq *rxq, u64 *packets, u64 *bytes,
			   u64 *alloc_fail, u64 *drops)
{
	struct zcnic_rxq_stats *st = &rxq->stats;
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&st->syncp);
		*packets = u64_stats_read(&st->packets);
		*bytes = u64_stats_read(&st->bytes);
		*alloc_fail = u64_stats_read(&st->alloc_fail);
		*drops = u64_stats_read(&st->drops);
	} while (u64_stats_fetch_retry(&st->syncp, start));
}

static void zcnic_txq_read(struct zcnic_txq_stats *st, u64 *packets,
			   u64 *bytes, u64 *drops)
{
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&st->syncp);
		*packets = u64_stats_read(&st->packets);
		*bytes = u64_stats_read(&st->bytes);
		*drops = u64_stats_read(&st->drops);
	} while (u64_stats_fetch_retry(&st->syncp, start));
}

static void zcnic_get_stats64(struct net_device *dev,
			      struct rtnl_link_stats64 *s)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u64 p, b, a, d;
	u32 i;

	for (i = 0; i < priv->max_queues; i++) {
		zcnic_rxq_read(&priv->rxq[i], &p, &b, &a, &d);
		s->rx_packets += p;
		s->rx_bytes += b;
		s->rx_dropped += d;
		zcnic_txq_read(&priv->txs[i], &p, &b, &d);
		s->tx_packets += p;
		s->tx_bytes += b;
		s->tx_dropped += d;
	}
}

static void zcnic_get_queue_stats_rx(struct net_device *dev, int idx,
				     struct netdev_queue_stats_rx *stats)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u64 p, b, a, d;

	zcnic_rxq_read(&priv->rxq[idx], &p, &b, &a, &d);
	stats->packets = p;
	stats->bytes = b;
	stats->alloc_fail = a;
	stats->hw_drops = d;
}

static void zcnic_get_queue_stats_tx(struct net_device *dev, int idx,
				     struct netdev_queue_stats_tx *stats)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u64 p, b, d;

	zcnic_txq_read(&priv->txs[idx], &p, &b, &d);
	stats->packets = p;
	stats->bytes = b;
	stats->hw_drops = d;
}

/* Queues beyond the channel count keep their counters: the base is their sum,
 * so that base + queues is the device's total (netdev_stat_queue_sum()).
 */
static void zcnic_get_base_stats(struct net_device *dev,
				 struct netdev_queue_stats_rx *rx,
				 struct netdev_queue_stats_tx *tx)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u64 p, b, a, d;
	u32 i;

	rx->packets = 0;
	rx->bytes = 0;
	rx->alloc_fail = 0;
	rx->hw_drops = 0;
	tx->packets = 0;
	tx->bytes = 0;
	tx->hw_drops = 0;
	for (i = dev->real_num_rx_queues; i < priv->max_queues; i++) {
		zcnic_rxq_read(&priv->rxq[i], &p, &b, &a, &d);
		rx->packets += p;
		rx->bytes += b;
		rx->alloc_fail += a;
		rx->hw_drops += d;
	}
	for (i = dev->real_num_tx_queues; i < priv->max_queues; i++) {
		zcnic_txq_read(&priv->txs[i], &p, &b, &d);
		tx->packets += p;
		tx->bytes += b;
		tx->hw_drops += d;
	}
}

static const struct netdev_stat_ops zcnic_stat_ops = {
	.get_queue_stats_rx	= zcnic_get_queue_stats_rx,
	.get_queue_stats_tx	= zcnic_get_queue_stats_tx,
	.get_base_stats		= zcnic_get_base_stats,
};

static const struct net_device_ops zcnic_netdev_ops = {
	.ndo_open		= zcnic_open,
	.ndo_stop		= zcnic_stop,
	.ndo_start_xmit		= zcnic_xmit,
	.ndo_get_stats64	= zcnic_get_stats64,
	.ndo_set_mac_address	= eth_mac_addr,
	.ndo_validate_addr	= eth_validate_addr,
};

/* ---- devices ---- */

static void zcnic_setup(struct net_device *dev)
{
	ether_setup(dev);
	dev->netdev_ops = &zcnic_netdev_ops;
	dev->ethtool_ops = &zcnic_ethtool_ops;
	dev->queue_mgmt_ops = &zcnic_queue_mgmt_ops;
	dev->stat_ops = &zcnic_stat_ops;
	dev->needs_free_netdev = false;
	dev->priv_flags |= IFF_LIVE_ADDR_CHANGE;
	dev->hw_features = NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_RXCSUM |
			   NETIF_F_TSO | NETIF_F_TSO6 | NETIF_F_HIGHDMA |
			   NETIF_F_NTUPLE;
	dev->features = dev->hw_features;
	dev->min_mtu = ETH_MIN_MTU;
	dev->max_mtu = 9000;
	/* devmem TX: the device reads net_iovs by DMA address
	 * (validate_xmit_unreadable_skb(), netdev_nl_bind_tx_doit()).
	 */
#if ZCNIC_QCFG
	dev->netmem_tx = NETMEM_TX_DMA;
#else
	dev->netmem_tx = true;
#endif
}

static struct net_device *zcnic_create(void)
{
	struct zcnic_priv *priv;
	struct net_device *dev;
	u32 i;

	dev = alloc_netdev_mqs(sizeof(*priv), "zcnic%d", NET_NAME_ENUM,
			       zcnic_setup, queues, queues);
	if (!dev)
		return NULL;
	SET_NETDEV_DEV(dev, zcnic_dma_dev);
	eth_hw_addr_random(dev);
	priv = netdev_priv(dev);
	priv->dev = dev;
	priv->max_queues = queues;
	priv->rx_pending = ZCNIC_RING_DEF;
	priv->tx_pending = ZCNIC_RING_DEF;
	spin_lock_init(&priv->steer_lock);
	netdev_rss_key_fill(priv->key, sizeof(priv->key));
	zcnic_default_indir(priv);
	for (i = 0; i < queues; i++) {
		struct zcnic_rxq *rxq = &priv->rxq[i];

		rxq->priv = priv;
		rxq->idx = i;
		skb_queue_head_init(&rxq->wire);
		u64_stats_init(&rxq->stats.syncp);
		u64_stats_init(&priv->txs[i].syncp);
		/* The _config variant keeps the NAPI id of a queue across a
		 * restart, which devmem and zcrx use.
		 */
		netif_napi_add_config(dev, &rxq->napi, zcnic_poll, i);
	}
	return dev;
}

static void zcnic_destroy_all(void)
{
	unsigned int i;

	rtnl_lock();
	for (i = 0; i < zcnic_ndevs; i++) {
		struct zcnic_priv *priv = netdev_priv(zcnic_devs[i]);

		RCU_INIT_POINTER(priv->peer, NULL);
	}
	for (i = 0; i < zcnic_ndevs; i++)
		if (zcnic_devs[i]->reg_state == NETREG_REGISTERED)
			unregister_netdevice(zcnic_devs[i]);
	rtnl_unlock();
	/* After unregister: no xmit, no NAPI; the core has closed the devices
	 * and unbound any memory provider (netdev_rx_queue.c, devmem.c).
	 */
	for (i = 0; i < zcnic_ndevs; i++) {
		struct zcnic_priv *priv = netdev_priv(zcnic_devs[i]);
		u32 q;

		for (q = 0; q < priv->max_queues; q++)
			skb_queue_purge(&priv->rxq[q].wire);
		free_netdev(zcnic_devs[i]);
	}
	zcnic_ndevs = 0;
}

/* The copy "DMA" uses phys_to_virt() of DMA addresses: refuse to load where a
 * DMA address is not the physical address (an IOMMU, memory encryption).
 */
static int zcnic_check_dma(void)
{
	struct page *page = alloc_page(GFP_KERNEL);
	dma_addr_t addr;
	int err = 0;

	if (!page)
		return -ENOMEM;
	addr = dma_map_page(zcnic_dma_dev, page, 0, PAGE_SIZE, DMA_TO_DEVICE);
	if (dma_mapping_error(zcnic_dma_dev, addr)) {
		err = -EIO;
	} else {
		if (addr != page_to_phys(page))
			err = -EOPNOTSUPP;
		dma_unmap_page(zcnic_dma_dev, addr, PAGE_SIZE, DMA_TO_DEVICE);
	}
	__free_page(page);
	if (err)
		pr_err("zcnic: DMA addresses are not physical addresses here (an IOMMU?): the software device cannot copy through them\n");
	return err;
}

static int __init zcnic_init(void)
{
	unsigned int i;
	int err;

	if (!queues || queues > ZCNIC_MAX_QUEUES || !pairs || pairs > 8) {
		pr_err("zcnic: queues must be 1-%d and pairs 1-8\n",
		       ZCNIC_MAX_QUEUES);
		return -EINVAL;
	}
	/* A parent device with a DMA mask: dma-buf attachments, zcrx area
	 * mappings and page pools map memory for it.
	 */
	zcnic_faux = faux_device_create(ZCNIC_DRV_NAME, NULL, NULL);
	if (!zcnic_faux)
		return -ENODEV;
	zcnic_dma_dev = &zcnic_faux->dev;
	err = dma_coerce_mask_and_coherent(zcnic_dma_dev, DMA_BIT_MASK(64));
	if (err)
		goto err_faux;
	err = zcnic_check_dma();
	if (err)
		goto err_faux;

	zcnic_devs = kcalloc(2 * pairs, sizeof(*zcnic_devs), GFP_KERNEL);
	if (!zcnic_devs) {
		err = -ENOMEM;
		goto err_faux;
	}
	for (i = 0; i < 2 * pairs; i++) {
		zcnic_devs[i] = zcnic_create();
		if (!zcnic_devs[i]) {
			err = -ENOMEM;
			goto err_devs;
		}
		zcnic_ndevs = i + 1;
	}
	for (i = 0; i < 2 * pairs; i++) {
		struct zcnic_priv *priv = netdev_priv(zcnic_devs[i]);

		rcu_assign_pointer(priv->peer, zcnic_devs[i ^ 1]);
	}
	rtnl_lock();
	for (i = 0; i < 2 * pairs; i++) {
		err = register_netdevice(zcnic_devs[i]);
		if (err)
			break;
	}
	rtnl_unlock();
	if (err)
		goto err_devs;
	pr_info("zcnic: %u device pair(s), %u queues each\n", pairs, queues);
	return 0;

err_devs:
	zcnic_destroy_all();
	kfree(zcnic_devs);
err_faux:
	faux_device_destroy(zcnic_faux);
	return err;
}

static void __exit zcnic_exit(void)
{
	zcnic_destroy_all();
	kfree(zcnic_devs);
	faux_device_destroy(zcnic_faux);
}

module_init(zcnic_init);
module_exit(zcnic_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Software NIC pair with memory-provider queues (devmem TCP, io_uring zcrx)");
/* netdev_rx_queue_restart() and the queue-management helpers live in the
 * NETDEV_INTERNAL namespace, dma_buf_* in DMA_BUF (string form since 6.13).
 */
MODULE_IMPORT_NS("NETDEV_INTERNAL");
MODULE_IMPORT_NS("DMA_BUF");
