// SPDX-License-Identifier: GPL-2.0
/*
 * zcnic's ethtool: channels, rings with header split, the RSS indirection
 * table and ntuple rules that steer a flow to a queue.
 */

#include <linux/ethtool.h>
#include <linux/netdevice.h>
#include <net/netdev_queues.h>

#include "zcnic.h"

void zcnic_default_indir(struct zcnic_priv *priv)
{
	u32 n = priv->dev->real_num_rx_queues ?: priv->max_queues, i;

	for (i = 0; i < ZCNIC_INDIR_SIZE; i++)
		priv->indir[i] = ethtool_rxfh_indir_default(i, n);
}

static bool zcnic_rule_match(const struct ethtool_rx_flow_spec *fs,
			     const struct zcnic_frame *f)
{
	const struct ethtool_tcpip4_spec *v = &fs->h_u.tcp_ip4_spec;
	const struct ethtool_tcpip4_spec *m = &fs->m_u.tcp_ip4_spec;
	u8 l4 = fs->flow_type == TCP_V4_FLOW ? IPPROTO_TCP : IPPROTO_UDP;

	/* Mask bits set are the bits compared (include/uapi/linux/ethtool.h) */
	return f->ipv == 4 && f->l4 == l4 &&
	       !((f->saddr ^ v->ip4src) & m->ip4src) &&
	       !((f->daddr ^ v->ip4dst) & m->ip4dst) &&
	       !((f->sport ^ v->psrc) & m->psrc) &&
	       !((f->dport ^ v->pdst) & m->pdst);
}

/* The queue a frame arriving at @priv's device lands in: the first matching
 * ntuple rule (lowest location), else the indirection table over the flow
 * hash. -1: a rule drops it. Called from the peer's xmit (BH disabled).
 */
int zcnic_steer(struct zcnic_priv *priv, struct zcnic_frame *f)
{
	u32 n = READ_ONCE(priv->dev->real_num_rx_queues);
	int q = -2, i;

	spin_lock(&priv->steer_lock);
	for (i = 0; i < ZCNIC_MAX_RULES; i++) {
		struct zcnic_rule *r = &priv->rules[i];

		if (!r->used || !zcnic_rule_match(&r->fs, f))
			continue;
		if (r->fs.ring_cookie == RX_CLS_FLOW_DISC)
			q = -1;
		else
			q = ethtool_get_flow_spec_ring(r->fs.ring_cookie);
		break;
	}
	if (q == -2)
		q = priv->indir[f->hash % ZCNIC_INDIR_SIZE];
	spin_unlock(&priv->steer_lock);
	if (q >= 0 && q >= n)
		q %= n;
	return q;
}

static void zcnic_get_drvinfo(struct net_device *dev,
			      struct ethtool_drvinfo *info)
{
	strscpy(info->driver, ZCNIC_DRV_NAME, sizeof(info->driver));
	strscpy(info->bus_info, "faux", sizeof(info->bus_info));
}

/* ethtool -S: per RX queue, where received L4 payload went, in bytes, and
 * the buffer allocations that failed. A memory provider's queue shows its
 * payload under netmem, and in netmem_bufs how many of its buffers (net_iovs)
 * that took; payload in pages or in the linear part of an skb is
 * what io_uring zcrx must copy into its area (io_zcrx_copy_chunk()).
 */
static const char * const zcnic_rxq_stat_names[] = {
	"payload_netmem", "payload_page", "payload_linear", "netmem_bufs",
	"alloc_fail",
};

#define ZCNIC_RXQ_NSTATS ARRAY_SIZE(zcnic_rxq_stat_names)

static int zcnic_get_sset_count(struct net_device *dev, int sset)
{
	struct zcnic_priv *priv = netdev_priv(dev);

	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return priv->max_queues * ZCNIC_RXQ_NSTATS;
}

static void zcnic_get_strings(struct net_device *dev, u32 sset, u8 *data)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u32 q, i;

	if (sset != ETH_SS_STATS)
		return;
	for (q = 0; q < priv->max_queues; q++)
		for (i = 0; i < ZCNIC_RXQ_NSTATS; i++)
			ethtool_sprintf(&data, "rx%u_%s", q,
					zcnic_rxq_stat_names[i]);
}

static void zcnic_get_ethtool_stats(struct net_device *dev,
				    struct ethtool_stats *stats, u64 *data)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u32 q;

	for (q = 0; q < priv->max_queues; q++) {
		struct zcnic_rxq_stats *st = &priv->rxq[q].stats;
		unsigned int start;

		do {
			start = u64_stats_fetch_begin(&st->syncp);
			data[0] = u64_stats_read(&st->payload_netmem);
			data[1] = u64_stats_read(&st->payload_page);
			data[2] = u64_stats_read(&st->payload_linear);
			data[3] = u64_stats_read(&st->netmem_bufs);
			data[4] = u64_stats_read(&st->alloc_fail);
		} while (u64_stats_fetch_retry(&st->syncp, start));
		data += ZCNIC_RXQ_NSTATS;
	}
}

static void zcnic_get_channels(struct net_device *dev,
			       struct ethtool_channels *ch)
{
	struct zcnic_priv *priv = netdev_priv(dev);

	ch->max_combined = priv->max_queues;
	ch->combined_count = dev->real_num_rx_queues;
}

static int zcnic_set_channels(struct net_device *dev,
			      struct ethtool_channels *ch)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	u32 n = ch->combined_count;
	int err, i;

	if (ch->rx_count || ch->tx_count || ch->other_count || !n ||
	    n > priv->max_queues)
		return -EINVAL;
	/* The core refuses counts below a queue with a memory provider, a
	 * configured indirection table's or a rule's queue (net/ethtool/
	 * channels.c); check the table and rules here too.
	 */
	spin_lock_bh(&priv->steer_lock);
	for (i = 0; i < ZCNIC_MAX_RULES; i++)
		if (priv->rules[i].used &&
		    priv->rules[i].fs.ring_cookie != RX_CLS_FLOW_DISC &&
		    ethtool_get_flow_spec_ring(priv->rules[i].fs.ring_cookie) >= n) {
			spin_unlock_bh(&priv->steer_lock);
			return -EINVAL;
		}
	if (netif_is_rxfh_configured(dev))
		for (i = 0; i < ZCNIC_INDIR_SIZE; i++)
			if (priv->indir[i] >= n) {
				spin_unlock_bh(&priv->steer_lock);
				return -EINVAL;
			}
	spin_unlock_bh(&priv->steer_lock);

	err = netif_set_real_num_queues(dev, n, n);
	if (err)
		return err;
	if (!netif_is_rxfh_configured(dev)) {
		spin_lock_bh(&priv->steer_lock);
		zcnic_default_indir(priv);
		spin_unlock_bh(&priv->steer_lock);
	}
	return 0;
}

static void zcnic_get_ringparam(struct net_device *dev,
				struct ethtool_ringparam *ring,
				struct kernel_ethtool_ringparam *kring,
				struct netlink_ext_ack *extack)
{
	struct zcnic_priv *priv = netdev_priv(dev);

	ring->rx_max_pending = ZCNIC_RING_MAX;
	ring->tx_max_pending = ZCNIC_RING_MAX;
	ring->rx_pending = priv->rx_pending;
	ring->tx_pending = priv->tx_pending;
	kring->tcp_data_split = priv->hds ? ETHTOOL_TCP_DATA_SPLIT_ENABLED :
					    ETHTOOL_TCP_DATA_SPLIT_DISABLED;
	kring->hds_thresh = priv->hds_thresh;
	kring->hds_thresh_max = ZCNIC_HDS_THRESH_MAX;
}

static int zcnic_set_ringparam(struct net_device *dev,
			       struct ethtool_ringparam *ring,
			       struct kernel_ethtool_ringparam *kring,
			       struct netlink_ext_ack *extack)
{
	struct zcnic_priv *priv = netdev_priv(dev);

	if (!ring->rx_pending || !ring->tx_pending ||
	    ring->rx_mini_pending || ring->rx_jumbo_pending) {
		NL_SET_ERR_MSG(extack, "zcnic: rx and tx rings only, non-zero");
		return -EINVAL;
	}
	/* The pool size follows rx_pending at the next open or restart */
	WRITE_ONCE(priv->rx_pending, ring->rx_pending);
	WRITE_ONCE(priv->tx_pending, ring->tx_pending);
	/* UNKNOWN ("auto") keeps the current setting. */
	if (kring->tcp_data_split == ETHTOOL_TCP_DATA_SPLIT_ENABLED)
		WRITE_ONCE(priv->hds, true);
	else if (kring->tcp_data_split == ETHTOOL_TCP_DATA_SPLIT_DISABLED)
		WRITE_ONCE(priv->hds, false);
	WRITE_ONCE(priv->hds_thresh, kring->hds_thresh);
	return 0;
}

static u32 zcnic_get_rx_ring_count(struct net_device *dev)
{
	return dev->real_num_rx_queues;
}

static u32 zcnic_get_rxfh_indir_size(struct net_device *dev)
{
	return ZCNIC_INDIR_SIZE;
}

static u32 zcnic_get_rxfh_key_size(struct net_device *dev)
{
	return ZCNIC_KEY_SIZE;
}

static int zcnic_get_rxfh(struct net_device *dev, struct ethtool_rxfh_param *p)
{
	struct zcnic_priv *priv = netdev_priv(dev);

	p->hfunc = ETH_RSS_HASH_TOP;
	spin_lock_bh(&priv->steer_lock);
	if (p->indir)
		memcpy(p->indir, priv->indir, sizeof(priv->indir));
	if (p->key)
		memcpy(p->key, priv->key, sizeof(priv->key));
	spin_unlock_bh(&priv->steer_lock);
	return 0;
}

static int zcnic_set_rxfh(struct net_device *dev, struct ethtool_rxfh_param *p,
			  struct netlink_ext_ack *extack)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	int i;

	if (p->hfunc != ETH_RSS_HASH_NO_CHANGE && p->hfunc != ETH_RSS_HASH_TOP)
		return -EOPNOTSUPP;
	if (p->rss_context)
		return -EOPNOTSUPP;
	if (p->indir)
		for (i = 0; i < ZCNIC_INDIR_SIZE; i++)
			if (p->indir[i] >= dev->real_num_rx_queues)
				return -EINVAL;
	spin_lock_bh(&priv->steer_lock);
	if (p->indir)
		memcpy(priv->indir, p->indir, sizeof(priv->indir));
	if (p->key)
		memcpy(priv->key, p->key, sizeof(priv->key));
	spin_unlock_bh(&priv->steer_lock);
	return 0;
}

static int zcnic_get_rxnfc(struct net_device *dev, struct ethtool_rxnfc *nfc,
			   u32 *rule_locs)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	int i, n = 0, err = 0;

	spin_lock_bh(&priv->steer_lock);
	switch (nfc->cmd) {
	case ETHTOOL_GRXRINGS:	/* 6.18 and older ask here too */
		nfc->data = dev->real_num_rx_queues;
		break;
	case ETHTOOL_GRXCLSRLCNT:
		for (i = 0; i < ZCNIC_MAX_RULES; i++)
			n += priv->rules[i].used;
		nfc->rule_cnt = n;
		/* the driver picks a location for RX_CLS_LOC_ANY */
		nfc->data = ZCNIC_MAX_RULES | RX_CLS_LOC_SPECIAL;
		break;
	case ETHTOOL_GRXCLSRULE:
		if (nfc->fs.location >= ZCNIC_MAX_RULES ||
		    !priv->rules[nfc->fs.location].used) {
			err = -ENOENT;
			break;
		}
		nfc->fs = priv->rules[nfc->fs.location].fs;
		break;
	case ETHTOOL_GRXCLSRLALL:
		for (i = 0; i < ZCNIC_MAX_RULES; i++) {
			if (!priv->rules[i].used)
				continue;
			if (n >= nfc->rule_cnt) {
				err = -EMSGSIZE;
				break;
			}
			rule_locs[n++] = i;
		}
		nfc->rule_cnt = n;
		nfc->data = ZCNIC_MAX_RULES;
		break;
	default:
		err = -EOPNOTSUPP;
	}
	spin_unlock_bh(&priv->steer_lock);
	return err;
}

static int zcnic_add_rule(struct net_device *dev, struct ethtool_rx_flow_spec *fs)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	const struct ethtool_tcpip4_spec *m = &fs->m_u.tcp_ip4_spec;
	u32 loc = fs->location;
	int i;

	if (fs->flow_type != TCP_V4_FLOW && fs->flow_type != UDP_V4_FLOW)
		return -EOPNOTSUPP;	/* no FLOW_EXT, FLOW_RSS, IPv6 */
	if (m->tos)
		return -EOPNOTSUPP;
	if (fs->ring_cookie != RX_CLS_FLOW_DISC &&
	    (ethtool_get_flow_spec_ring_vf(fs->ring_cookie) ||
	     ethtool_get_flow_spec_ring(fs->ring_cookie) >=
	     dev->real_num_rx_queues))
		return -EINVAL;

	spin_lock_bh(&priv->steer_lock);
	if (loc == RX_CLS_LOC_ANY || loc == RX_CLS_LOC_FIRST) {
		for (i = 0; i < ZCNIC_MAX_RULES && priv->rules[i].used; i++)
			;
		loc = i;
	} else if (loc == RX_CLS_LOC_LAST) {
		for (i = ZCNIC_MAX_RULES - 1; i >= 0 && priv->rules[i].used; i--)
			;
		loc = i < 0 ? ZCNIC_MAX_RULES : i;
	}
	if (loc >= ZCNIC_MAX_RULES) {
		spin_unlock_bh(&priv->steer_lock);
		return -ENOSPC;
	}
	fs->location = loc;	/* copied back to user space (ethtool_set_rxnfc) */
	priv->rules[loc].fs = *fs;
	priv->rules[loc].used = true;
	spin_unlock_bh(&priv->steer_lock);
	return 0;
}

static int zcnic_set_rxnfc(struct net_device *dev, struct ethtool_rxnfc *nfc)
{
	struct zcnic_priv *priv = netdev_priv(dev);
	int err = 0;

	switch (nfc->cmd) {
	case ETHTOOL_SRXCLSRLINS:
		return zcnic_add_rule(dev, &nfc->fs);
	case ETHTOOL_SRXCLSRLDEL:
		spin_lock_bh(&priv->steer_lock);
		if (nfc->fs.location >= ZCNIC_MAX_RULES ||
		    !priv->rules[nfc->fs.location].used)
			err = -ENOENT;
		else
			priv->rules[nfc->fs.location].used = false;
		spin_unlock_bh(&priv->steer_lock);
		return err;
	default:
		return -EOPNOTSUPP;
	}
}

const struct ethtool_ops zcnic_ethtool_ops = {
	.supported_ring_params	= ETHTOOL_RING_USE_TCP_DATA_SPLIT |
				  ETHTOOL_RING_USE_HDS_THRS,
	.get_drvinfo		= zcnic_get_drvinfo,
	.get_sset_count		= zcnic_get_sset_count,
	.get_strings		= zcnic_get_strings,
	.get_ethtool_stats	= zcnic_get_ethtool_stats,
	.get_link		= ethtool_op_get_link,
	.get_channels		= zcnic_get_channels,
	.set_channels		= zcnic_set_channels,
	.get_ringparam		= zcnic_get_ringparam,
	.set_ringparam		= zcnic_set_ringparam,
	.get_rx_ring_count	= zcnic_get_rx_ring_count,
	.get_rxfh_indir_size	= zcnic_get_rxfh_indir_size,
	.get_rxfh_key_size	= zcnic_get_rxfh_key_size,
	.get_rxfh		= zcnic_get_rxfh,
	.set_rxfh		= zcnic_set_rxfh,
	.get_rxnfc		= zcnic_get_rxnfc,
	.set_rxnfc		= zcnic_set_rxnfc,
};
