/* SPDX-License-Identifier: GPL-2.0 */
/*
 * zcnic: a software NIC that memory providers (devmem TCP, io_uring zcrx)
 * can bind to. See docs/design.md, "Software NIC (kmod/zcnic)".
 */
#ifndef _ZCNIC_H
#define _ZCNIC_H

#include <linux/ethtool.h>
#include <linux/netdevice.h>
#include <linux/sizes.h>
#include <linux/skbuff.h>
#include <linux/spinlock.h>
#include <linux/u64_stats_sync.h>
#include <linux/version.h>

#define ZCNIC_DRV_NAME		"zcnic"
#define ZCNIC_MAX_QUEUES	16
#define ZCNIC_INDIR_SIZE	128
#define ZCNIC_KEY_SIZE		40
#define ZCNIC_MAX_RULES		64
#define ZCNIC_RING_DEF		1024
#define ZCNIC_RING_MAX		4096
#define ZCNIC_HDS_THRESH_MAX	1024
/* Frames up to this size that are not split are copied into the linear part. */
#define ZCNIC_COPY_MAX		2048
/* The largest receive buffer a memory provider may ask for (7.2's
 * rx_page_size, io_uring zcrx's rx_buf_len): 2 MiB, page pool order 9.
 */
#define ZCNIC_RX_BUF_MAX	SZ_2M

/* 7.2 passes a queue config to the queue management ops and made netmem_tx
 * an enum (include/net/netdev_queues.h, include/linux/netdevice.h).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
#define ZCNIC_QCFG 1
#else
#define ZCNIC_QCFG 0
#endif

struct zcnic_priv;

struct zcnic_rxq_stats {
	struct u64_stats_sync syncp;
	u64_stats_t packets;
	u64_stats_t bytes;
	u64_stats_t alloc_fail;
	u64_stats_t drops;
	/* Where received L4 payload went (ethtool -S): into a memory
	 * provider's net_iovs, into page pool pages, or into the linear part.
	 */
	u64_stats_t payload_netmem;
	u64_stats_t payload_page;
	u64_stats_t payload_linear;
	u64_stats_t netmem_bufs;	/* net_iovs written: the provider's buffers */
};

struct zcnic_txq_stats {
	struct u64_stats_sync syncp;
	u64_stats_t packets;
	u64_stats_t bytes;
	u64_stats_t drops;
};

/* One RX queue: the wire delivers the peer's frames into @wire; NAPI copies
 * them into buffers from @pp ("the device's DMA") and hands them to the stack.
 */
struct zcnic_rxq {
	struct zcnic_priv *priv;
	struct napi_struct napi;
	struct sk_buff_head wire;
	struct page_pool *pp;
	u32 buf_len;	/* bytes per pool buffer: PAGE_SIZE << pp order */
	u32 idx;
	struct zcnic_rxq_stats stats;
};

/* The memory a queue restart swaps: a page pool (netdev_rx_queue.c) and the
 * size of its buffers.
 */
struct zcnic_qmem {
	struct page_pool *pp;
	u32 buf_len;
};

struct zcnic_rule {
	bool used;
	struct ethtool_rx_flow_spec fs;
};

struct zcnic_priv {
	struct net_device *dev;
	struct net_device __rcu *peer;
	u32 max_queues;
	struct zcnic_rxq rxq[ZCNIC_MAX_QUEUES];
	struct zcnic_txq_stats txs[ZCNIC_MAX_QUEUES];

	/* ring parameters and header split (ethtool -g/-G) */
	u32 rx_pending;
	u32 tx_pending;
	bool hds;
	u32 hds_thresh;

	/* steering: read by the peer's xmit, written by ethtool */
	spinlock_t steer_lock;
	u32 indir[ZCNIC_INDIR_SIZE];
	u8 key[ZCNIC_KEY_SIZE];
	struct zcnic_rule rules[ZCNIC_MAX_RULES];
};

/* What xmit learnt of a frame, kept in skb->cb while it crosses the wire. */
struct zcnic_frame {
	u32 hash;
	u16 hdr_len;	/* eth + IP + TCP/UDP header bytes, 0 if not parsed */
	u8 ipv;		/* 4, 6 or 0 */
	u8 l4;		/* IPPROTO_TCP, IPPROTO_UDP or 0 */
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
};

static inline struct zcnic_frame *zcnic_cb(struct sk_buff *skb)
{
	return (struct zcnic_frame *)skb->cb;
}

extern struct device *zcnic_dma_dev;
extern const struct ethtool_ops zcnic_ethtool_ops;

int zcnic_steer(struct zcnic_priv *priv, struct zcnic_frame *f);
void zcnic_default_indir(struct zcnic_priv *priv);

#endif /* _ZCNIC_H */
