//! Parsers against replies captured from Linux 6.18 (veth pair `va`/`vb` in a namespace;
//! `va` has ifindex 3 there), and builders against the requests the kernel accepted.

use super::*;
use crate::genl::{Family, GETFAMILY};
use crate::testutil::Capture;
use crate::wire::MsgBuilder;

fn family() -> Family {
    let r = Capture::load("ctrl_getfamily_netdev")
        .replay(GETFAMILY, "netdev")
        .unwrap();
    Family::parse(&r[0].attrs).unwrap()
}

#[zcnet_testkit::test]
fn family_lists_the_ops_of_6_18() {
    let f = family();
    assert_eq!(f.name, "netdev");
    assert_eq!(f.version, 1);
    let ids: Vec<u32> = f.ops.iter().map(|o| o.id).collect();
    assert_eq!(ids, [1, 5, 10, 11, 12, 13, 14, 15]);
    // qstats-get is dump-only; bind-rx and napi-set need CAP_NET_ADMIN, bind-tx does not.
    let qs = f.op(CMD_QSTATS_GET).unwrap();
    assert!(qs.can_dump() && !qs.can_do());
    assert!(f.op(CMD_BIND_RX).unwrap().admin());
    assert!(f.op(CMD_NAPI_SET).unwrap().admin());
    assert!(!f.op(CMD_BIND_TX).unwrap().admin());
    assert!(!f.has_op(CMD_PAGE_POOL_STATS_GET));
    let names: Vec<String> = f.ops.iter().map(|o| cmd_name(o.id)).collect();
    assert_eq!(
        names,
        [
            "dev-get",
            "page-pool-get",
            "queue-get",
            "napi-get",
            "qstats-get",
            "bind-rx",
            "napi-set",
            "bind-tx"
        ]
    );
    assert_eq!(cmd_name(99), "op-99");
    let groups: Vec<&str> = f.mcast_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(groups, ["mgmt", "page-pool"]);
}

#[zcnet_testkit::test]
fn cmd_names_follow_the_uapi_enum_up_to_7_2() {
    // enum netdev_cmd (include/uapi/linux/netdev.h): numbered from 1 with no gaps, so the table
    // is exactly 1..=16, and the constants name the same numbers as the table.
    let nums: Vec<u8> = CMD_NAMES.iter().map(|&(c, _)| c).collect();
    assert_eq!(nums, (1..=16).collect::<Vec<u8>>());
    for (cmd, name) in [
        (CMD_DEV_GET, "dev-get"),
        (CMD_PAGE_POOL_GET, "page-pool-get"),
        (CMD_PAGE_POOL_STATS_GET, "page-pool-stats-get"),
        (CMD_QUEUE_GET, "queue-get"),
        (CMD_NAPI_GET, "napi-get"),
        (CMD_QSTATS_GET, "qstats-get"),
        (CMD_BIND_RX, "bind-rx"),
        (CMD_NAPI_SET, "napi-set"),
        (CMD_BIND_TX, "bind-tx"),
        (CMD_QUEUE_CREATE, "queue-create"),
    ] {
        assert_eq!(cmd_name(u32::from(cmd)), name);
    }
    // Linux 7.2's op after bind-tx has its name; anything newer stays op-N.
    assert_eq!(cmd_name(16), "queue-create");
    assert_eq!(cmd_name(17), "op-17");
    assert_eq!(cmd_name(0), "op-0");
}

#[zcnet_testkit::test]
fn dev_get_on_veth() {
    let r = Capture::load("netdev_dev_get_veth")
        .replay(OP_DEV_GET, "ifindex 3")
        .unwrap();
    assert_eq!(r.len(), 1);
    let d = DevInfo::parse(&r[0].attrs).unwrap();
    assert_eq!(d.ifindex, 3);
    assert_eq!(d.xdp_features, 0x23);
    assert_eq!(d.names(), ["basic", "redirect", "rx-sg"]);
    assert!(!d.xsk_zerocopy());
    assert_eq!(d.xdp_zc_max_segs, None);
    assert_eq!(d.rx_metadata_names(), ["timestamp", "hash", "vlan-tag"]);
    assert_eq!(d.xsk_features, 0);
}

#[zcnet_testkit::test]
fn dev_dump_lists_lo_and_the_pair() {
    let r = Capture::load("netdev_dev_dump")
        .replay(OP_DEV_GET, "")
        .unwrap();
    let devs: Vec<DevInfo> = r
        .iter()
        .map(|m| DevInfo::parse(&m.attrs).unwrap())
        .collect();
    let idx: Vec<u32> = devs.iter().map(|d| d.ifindex).collect();
    assert_eq!(idx, [1, 2, 3]);
    assert_eq!(devs[0].xdp_features, 0, "lo has no XDP features");
    assert_eq!(devs[1].xdp_features, 0x23);
}

#[zcnet_testkit::test]
fn dev_get_unknown_ifindex_is_enodev() {
    let e = Capture::load("netdev_dev_get_enodev")
        .replay(OP_DEV_GET, "ifindex 99999")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENODEV));
    assert_eq!(
        e.to_string(),
        "dev-get ifindex 99999: No such device (ENODEV): no such device in this network namespace"
    );
}

#[zcnet_testkit::test]
fn queues_of_veth() {
    let r = Capture::load("netdev_queue_dump_veth")
        .replay(OP_QUEUE_GET, "ifindex 3")
        .unwrap();
    let q: Vec<QueueInfo> = r
        .iter()
        .map(|m| QueueInfo::parse(&m.attrs).unwrap())
        .collect();
    assert_eq!(q.len(), 2);
    assert_eq!((q[0].kind, q[0].id, q[0].ifindex), (QueueKind::Rx, 0, 3));
    assert_eq!((q[1].kind, q[1].id), (QueueKind::Tx, 0));
    assert!(q.iter().all(|q| q.napi_id.is_none() && q.dmabuf.is_none()));
    assert!(q.iter().all(|q| !q.io_uring && !q.xsk));
    let one = Capture::load("netdev_queue_get_rx0")
        .replay(OP_QUEUE_GET, "")
        .unwrap();
    assert_eq!(QueueInfo::parse(&one[0].attrs).unwrap(), q[0]);
}

#[zcnet_testkit::test]
fn napi_of_veth_appears_with_gro() {
    let off = Capture::load("netdev_napi_dump_veth_gro_off")
        .replay(OP_NAPI_GET, "")
        .unwrap();
    assert!(off.is_empty());
    let on = Capture::load("netdev_napi_dump_veth_gro_on")
        .replay(OP_NAPI_GET, "")
        .unwrap();
    assert_eq!(on.len(), 1);
    let n = NapiInfo::parse(&on[0].attrs).unwrap();
    assert_eq!(n.ifindex, 3);
    assert!(n.id >= 1, "NAPI ids start above 0: {}", n.id);
    assert_eq!(n.irq, None);
    assert_eq!(n.pid, None);
    assert_eq!(n.threaded, Some(NapiThreaded::Disabled));
    assert_eq!(n.defer_hard_irqs, Some(0));
    assert_eq!(n.gro_flush_timeout, Some(0));
}

#[zcnet_testkit::test]
fn napi_get_by_id_matches_the_dump() {
    let dump = Capture::load("netdev_napi_dump_veth_gro_on")
        .replay(OP_NAPI_GET, "")
        .unwrap();
    let one = Capture::load("netdev_napi_get_veth")
        .replay(OP_NAPI_GET, "")
        .unwrap();
    let (a, b) = (
        NapiInfo::parse(&dump[0].attrs).unwrap(),
        NapiInfo::parse(&one[0].attrs).unwrap(),
    );
    assert_eq!(a, b);
}

#[zcnet_testkit::test]
fn missing_required_attribute_is_named() {
    let e = Capture::load("netdev_dev_get_no_ifindex")
        .replay(OP_DEV_GET, "")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL));
    assert_eq!(e.kernel().unwrap().extack.missing_type, Some(1));
    assert_eq!(
        e.to_string(),
        "dev-get: Invalid argument (EINVAL) (missing attribute: ifindex)"
    );
}

#[zcnet_testkit::test]
fn qstats_on_veth_is_eopnotsupp_pointing_at_ifindex() {
    let e = Capture::load("netdev_qstats_dump_veth")
        .replay(OP_QSTATS_GET, "ifindex 3")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    let k = e.kernel().unwrap();
    assert_eq!(k.extack.bad_attr_offset, Some(20));
    assert_eq!(k.bad_attr.as_deref(), Some("ifindex"));
    let all = Capture::load("netdev_qstats_dump_all")
        .replay(OP_QSTATS_GET, "")
        .unwrap();
    assert!(all.is_empty(), "no device here reports queue stats");
}

#[zcnet_testkit::test]
fn bind_rx_errors_name_the_attribute() {
    let e = Capture::load("netdev_bind_rx_veth")
        .replay(OP_BIND_RX, "ifindex 3")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.extack(), None);
    assert_eq!(
        e.to_string(),
        "bind-rx ifindex 3: Operation not supported (EOPNOTSUPP) (bad attribute: ifindex): \
         the driver or kernel does not support this"
    );
    let e = Capture::load("netdev_bind_rx_no_fd")
        .replay(OP_BIND_RX, "ifindex 3")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL));
    assert_eq!(e.kernel().unwrap().missing_attr.as_deref(), Some("fd"));
    assert!(e.to_string().contains("missing attribute: fd"), "{e}");
}

#[zcnet_testkit::test]
fn bind_tx_error_carries_the_kernel_text() {
    let e = Capture::load("netdev_bind_tx_veth")
        .replay(OP_BIND_TX, "ifindex 3")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.extack(), Some("Driver does not support netmem TX"));
}

#[zcnet_testkit::test]
fn page_pool_stats_are_absent() {
    let e = Capture::load("netdev_page_pool_stats_dump")
        .replay(OP_PAGE_POOL_GET, "")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    let pools = Capture::load("netdev_page_pool_dump")
        .replay(OP_PAGE_POOL_GET, "")
        .unwrap();
    assert!(pools.is_empty(), "veth's pools are not tied to the netdev");
}

#[zcnet_testkit::test]
fn page_pool_parses_both_uint_widths() {
    let mut b = MsgBuilder::new(0, 0, 0);
    b.put_u32(1, 7)
        .put_u32(2, 3)
        .put_u64(3, 258)
        .put_u64(4, 12)
        .put_u32(5, 49152)
        .put_u32(7, 2)
        .nest_begin(8)
        .nest_end()
        .put_u32(99, 1);
    let m = b.finish().unwrap();
    let p = PagePoolInfo::parse(&m[16..]).unwrap();
    assert_eq!(p.id, 7);
    assert_eq!(p.ifindex, Some(3));
    assert_eq!(p.napi_id, Some(258));
    assert_eq!(p.inflight, Some(12));
    assert_eq!(p.inflight_mem, Some(49152));
    assert_eq!(p.detach_time, None);
    assert_eq!(p.dmabuf, Some(2));
    assert!(p.io_uring);
}

#[zcnet_testkit::test]
fn qstats_names_counters() {
    let mut b = MsgBuilder::new(0, 0, 0);
    b.put_u32(1, 3)
        .put_u32(2, 0)
        .put_u32(3, 1)
        .put_u64(8, 10)
        .put_u32(9, 1500)
        .put_u64(34, 2)
        .put_u64(60, 5);
    let m = b.finish().unwrap();
    let q = QStats::parse(&m[16..]).unwrap();
    assert_eq!(q.ifindex, 3);
    assert_eq!(q.queue, Some((QueueKind::Rx, 1)));
    assert_eq!(q.get("rx-packets"), Some(10));
    assert_eq!(q.get("rx-bytes"), Some(1500));
    assert_eq!(q.get("tx-wake"), Some(2));
    assert_eq!(q.get("attr-60"), Some(5));
    assert_eq!(q.get("tx-packets"), None);
}

/// A capture name, the command, and the library's attribute writer for it.
type Case<'a> = (&'a str, u8, &'a dyn Fn(&mut MsgBuilder));

/// The library's requests are byte-for-byte the ones the kernel answered in the captures
/// (sequence number aside).
#[zcnet_testkit::test]
fn builders_match_captured_requests() {
    let cases: [Case<'_>; 6] = [
        ("netdev_dev_get_veth", CMD_DEV_GET, &|b| {
            fill_u32(b, dev_attr::IFINDEX, 3)
        }),
        ("netdev_queue_get_rx0", CMD_QUEUE_GET, &|b| {
            fill_queue_get(b, 3, QueueKind::Rx, 0)
        }),
        ("netdev_napi_dump_veth_gro_on", CMD_NAPI_GET, &|b| {
            fill_u32(b, napi_attr::IFINDEX, 3)
        }),
        ("netdev_qstats_dump_veth_queue", CMD_QSTATS_GET, &|b| {
            fill_qstats(b, Some(3), QStatsScope::Queue)
        }),
        ("netdev_bind_rx_veth", CMD_BIND_RX, &|b| {
            bind::fill_bind_rx(b, 3, 4, &[0])
        }),
        ("netdev_bind_tx_veth", CMD_BIND_TX, &|b| {
            bind::fill_bind_tx(b, 3, 4)
        }),
    ];
    for (name, cmd, f) in cases {
        let c = Capture::load(name);
        let h = c.header();
        let mut b = MsgBuilder::genl(h.kind, h.flags, h.seq, cmd, 1);
        f(&mut b);
        assert_eq!(b.finish().unwrap(), c.request, "{name}");
    }
}
