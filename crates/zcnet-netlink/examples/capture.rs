//! Captures the kernel's raw replies for the test fixtures in `tests/captured/`.
//!
//! Run it as root *inside a network namespace you created* (it changes features of the
//! device it is given and expects a veth pair); `examples/capture.sh` does exactly that and
//! deletes the namespace on every exit path:
//!
//! ```text
//! crates/zcnet-netlink/examples/capture.sh [OUT_DIR]
//! ```
//!
//! Each fixture is a text file: `#` comments, one `>` line with the request, then one `<` line
//! per datagram received until the exchange ended (ACK, error or `NLMSG_DONE`). Requests are
//! built here with plain attribute numbers (from the uapi headers, named in comments) so the
//! captures do not depend on the library's own request builders, which the tests then compare
//! against these requests.

use std::error::Error;
use std::fmt::Write as _;
use std::os::fd::AsRawFd;

use zcnet_netlink::genl;
use zcnet_netlink::wire::{
    messages, MsgBuilder, NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use zcnet_sys::netlink::{NlSocket, NETLINK_GENERIC};

type Res<T> = Result<T, Box<dyn Error>>;

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

struct Cap {
    sock: NlSocket,
    out: std::path::PathBuf,
    seq: u32,
}

impl Cap {
    fn start(&mut self, family: u16, cmd: u8, dump: bool) -> MsgBuilder {
        self.seq += 1;
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        MsgBuilder::genl(family, flags, self.seq, cmd, 1)
    }

    /// Sends `b`, records request and replies into `name.hex`.
    fn run(&mut self, name: &str, what: &str, b: MsgBuilder) -> Res<()> {
        let req = b.finish()?;
        self.sock.send(&req)?;
        let mut text = format!("# {what}\n# captured on {}\n> {}\n", kernel(), hex(&req));
        let mut buf = vec![0u8; 65536];
        'outer: loop {
            let n = self.sock.recv(&mut buf)?;
            let dgram = &buf[..n];
            text.push_str(&format!("< {}\n", hex(dgram)));
            for m in messages(dgram) {
                let m = m?;
                if m.header.kind == NLMSG_ERROR || m.header.kind == NLMSG_DONE {
                    break 'outer;
                }
            }
        }
        std::fs::write(self.out.join(format!("{name}.hex")), text)?;
        println!("captured {name}");
        Ok(())
    }
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| "Linux (unknown)".into())
}

fn ifindex(name: &str) -> Res<u32> {
    Ok(
        std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))?
            .trim()
            .parse()?,
    )
}

// ethtool header nest (ETHTOOL_A_*_HEADER = 1 in every message; ETHTOOL_A_HEADER_DEV_INDEX 1,
// ETHTOOL_A_HEADER_DEV_NAME 2, ETHTOOL_A_HEADER_FLAGS 3: include/uapi/linux/ethtool_netlink_generated.h)
fn eth_header(b: &mut MsgBuilder, dev: &str, flags: u32) {
    b.nest_begin(1).put_str(2, dev);
    if flags != 0 {
        b.put_u32(3, flags);
    }
    b.nest_end();
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().ok_or("usage: capture OUT_DIR VETH")?);
    let dev = args.next().ok_or("usage: capture OUT_DIR VETH")?;
    std::fs::create_dir_all(&out)?;
    let idx = ifindex(&dev)?;
    let nd = genl::resolve("netdev")?;
    let et = genl::resolve("ethtool")?;
    let mut c = Cap {
        sock: NlSocket::open(NETLINK_GENERIC)?,
        out,
        seq: 1000,
    };

    // Controller: CTRL_CMD_GETFAMILY (3), CTRL_ATTR_FAMILY_NAME (2).
    for (file, name) in [
        ("ctrl_getfamily_netdev", "netdev"),
        ("ctrl_getfamily_ethtool", "ethtool"),
        ("ctrl_getfamily_missing", "zcnet-nope"),
    ] {
        let mut b = c.start(genl::GENL_ID_CTRL, 3, false);
        b.put_str(2, name);
        c.run(file, &format!("nlctrl getfamily {name}"), b)?;
    }

    // netdev: NETDEV_CMD_DEV_GET 1, NETDEV_A_DEV_IFINDEX 1 (include/uapi/linux/netdev.h).
    let mut b = c.start(nd.id, 1, false);
    b.put_u32(1, idx);
    c.run(
        "netdev_dev_get_veth",
        &format!("netdev dev-get ifindex {idx} ({dev}, veth)"),
        b,
    )?;
    let mut b = c.start(nd.id, 1, false);
    b.put_u32(1, 1);
    c.run("netdev_dev_get_lo", "netdev dev-get ifindex 1 (lo)", b)?;
    let mut b = c.start(nd.id, 1, false);
    b.put_u32(1, 99999);
    c.run(
        "netdev_dev_get_enodev",
        "netdev dev-get ifindex 99999 (no such device)",
        b,
    )?;
    let b = c.start(nd.id, 1, true);
    c.run(
        "netdev_dev_dump",
        "netdev dev-get dump (lo and the veth pair)",
        b,
    )?;

    // NETDEV_CMD_QUEUE_GET 10: dump filtered by NETDEV_A_QUEUE_IFINDEX 2; do with
    // NETDEV_A_QUEUE_IFINDEX 2, NETDEV_A_QUEUE_TYPE 3 (rx 0), NETDEV_A_QUEUE_ID 1.
    let mut b = c.start(nd.id, 10, true);
    b.put_u32(2, idx);
    c.run(
        "netdev_queue_dump_veth",
        &format!("netdev queue-get dump ifindex {idx}"),
        b,
    )?;
    let mut b = c.start(nd.id, 10, false);
    b.put_u32(2, idx).put_u32(3, 0).put_u32(1, 0);
    c.run(
        "netdev_queue_get_rx0",
        &format!("netdev queue-get ifindex {idx} rx 0"),
        b,
    )?;

    // NETDEV_CMD_NAPI_GET 11 dump by NETDEV_A_NAPI_IFINDEX 1, before GRO is on.
    let mut b = c.start(nd.id, 11, true);
    b.put_u32(1, idx);
    c.run(
        "netdev_napi_dump_veth_gro_off",
        "netdev napi-get dump, veth GRO off",
        b,
    )?;

    // NETDEV_CMD_QSTATS_GET 12 dump: NETDEV_A_QSTATS_IFINDEX 1, NETDEV_A_QSTATS_SCOPE 4.
    let mut b = c.start(nd.id, 12, true);
    b.put_u32(1, idx);
    c.run(
        "netdev_qstats_dump_veth",
        "netdev qstats-get dump, device scope",
        b,
    )?;
    let b = c.start(nd.id, 12, true);
    c.run(
        "netdev_qstats_dump_all",
        "netdev qstats-get dump, all devices",
        b,
    )?;
    let mut b = c.start(nd.id, 12, true);
    b.put_u32(1, idx).put_u32(4, 1);
    c.run(
        "netdev_qstats_dump_veth_queue",
        "netdev qstats-get dump, queue scope",
        b,
    )?;

    // NETDEV_CMD_BIND_RX 13: NETDEV_A_DMABUF_IFINDEX 1, _QUEUES 2 (nest: id 1, type 3),
    // _FD 3. No dma-buf exporter here: /dev/null's fd stands in (the device check comes first).
    let devnull = std::fs::File::open("/dev/null")?;
    let fd = devnull.as_raw_fd() as u32;
    let mut b = c.start(nd.id, 13, false);
    b.put_u32(1, idx).put_u32(3, fd);
    b.nest_begin(2).put_u32(1, 0).put_u32(3, 0).nest_end();
    c.run(
        "netdev_bind_rx_veth",
        "netdev bind-rx on veth (fd of /dev/null)",
        b,
    )?;
    let mut b = c.start(nd.id, 13, false);
    b.put_u32(1, idx);
    b.nest_begin(2).put_u32(1, 0).put_u32(3, 0).nest_end();
    c.run(
        "netdev_bind_rx_no_fd",
        "netdev bind-rx without the fd attribute",
        b,
    )?;
    // NETDEV_CMD_BIND_TX 15: ifindex 1, fd 3.
    let mut b = c.start(nd.id, 15, false);
    b.put_u32(1, idx).put_u32(3, fd);
    c.run(
        "netdev_bind_tx_veth",
        "netdev bind-tx on veth (fd of /dev/null)",
        b,
    )?;
    // NETDEV_CMD_PAGE_POOL_STATS_GET 9: absent without CONFIG_PAGE_POOL_STATS.
    let b = c.start(nd.id, 9, true);
    c.run(
        "netdev_page_pool_stats_dump",
        "netdev page-pool-stats-get dump",
        b,
    )?;

    // ethtool: ETHTOOL_MSG_STRSET_GET 1: header, ETHTOOL_A_STRSET_STRINGSETS 2 { STRINGSET 1
    // { ID 1 = ETH_SS_FEATURES (4) } }.
    let mut b = c.start(et.id, 1, false);
    eth_header(&mut b, &dev, 0);
    b.nest_begin(2)
        .nest_begin(1)
        .put_u32(1, 4)
        .nest_end()
        .nest_end();
    c.run(
        "ethtool_strset_features",
        "ethtool strset-get ETH_SS_FEATURES",
        b,
    )?;
    // ETHTOOL_MSG_FEATURES_GET 11, compact (ETHTOOL_FLAG_COMPACT_BITSETS 1) and verbose.
    let mut b = c.start(et.id, 11, false);
    eth_header(&mut b, &dev, 1);
    c.run(
        "ethtool_features_get_compact",
        "ethtool features-get, compact bitsets",
        b,
    )?;
    let mut b = c.start(et.id, 11, false);
    eth_header(&mut b, &dev, 0);
    c.run(
        "ethtool_features_get_verbose",
        "ethtool features-get, verbose bitsets",
        b,
    )?;
    // ETHTOOL_MSG_RINGS_GET 15 / RINGS_SET 16: ETHTOOL_A_RINGS_TCP_DATA_SPLIT 11 (u8),
    // ETHTOOL_A_RINGS_HDS_THRESH 17 (u32).
    let mut b = c.start(et.id, 15, false);
    eth_header(&mut b, &dev, 0);
    c.run("ethtool_rings_get_veth", "ethtool rings-get on veth", b)?;
    let mut b = c.start(et.id, 16, false);
    eth_header(&mut b, &dev, 0);
    b.put_u8(11, 2);
    c.run(
        "ethtool_rings_set_tds_veth",
        "ethtool rings-set tcp-data-split enabled",
        b,
    )?;
    let mut b = c.start(et.id, 16, false);
    eth_header(&mut b, &dev, 0);
    b.put_u32(17, 256);
    c.run(
        "ethtool_rings_set_hds_veth",
        "ethtool rings-set hds-thresh 256",
        b,
    )?;
    // ETHTOOL_MSG_CHANNELS_GET 17.
    let mut b = c.start(et.id, 17, false);
    eth_header(&mut b, &dev, 0);
    c.run(
        "ethtool_channels_get_veth",
        "ethtool channels-get on veth",
        b,
    )?;
    // ETHTOOL_MSG_RSS_GET 38 (do, context 0) and dump.
    let mut b = c.start(et.id, 38, false);
    eth_header(&mut b, &dev, 0);
    c.run("ethtool_rss_get_veth", "ethtool rss-get on veth", b)?;
    let b = c.start(et.id, 38, true);
    c.run("ethtool_rss_dump", "ethtool rss-get dump (all devices)", b)?;
    // ETHTOOL_MSG_FEATURES_SET 12: ETHTOOL_A_FEATURES_WANTED 3 { BITS 3 { BIT 1 { NAME 2,
    // VALUE 3 (flag) } } }.
    for (file, feat, on) in [
        ("ethtool_features_set_ntuple_veth", "ntuple-filters", true),
        ("ethtool_features_set_gro_on_veth", "rx-gro", true),
        (
            "ethtool_features_set_unknown_veth",
            "zcnet-no-such-feature",
            true,
        ),
    ] {
        let mut b = c.start(et.id, 12, false);
        eth_header(&mut b, &dev, 0);
        b.nest_begin(3).nest_begin(3).nest_begin(1).put_str(2, feat);
        if on {
            b.put_flag(3);
        }
        b.nest_end().nest_end().nest_end();
        c.run(file, &format!("ethtool features-set {feat} on"), b)?;
    }

    // With GRO on, veth has NAPI instances and page pools.
    let mut b = c.start(nd.id, 11, true);
    b.put_u32(1, idx);
    c.run(
        "netdev_napi_dump_veth_gro_on",
        "netdev napi-get dump, veth GRO on",
        b,
    )?;
    let b = c.start(nd.id, 5, true);
    c.run(
        "netdev_page_pool_dump",
        "netdev page-pool-get dump, veth GRO on",
        b,
    )?;
    let mut b = c.start(nd.id, 10, true);
    b.put_u32(2, idx);
    c.run(
        "netdev_queue_dump_veth_gro_on",
        "netdev queue-get dump, veth GRO on",
        b,
    )?;
    let mut b = c.start(nd.id, 1, false);
    b.put_u32(1, idx);
    c.run(
        "netdev_dev_get_veth_gro_on",
        "netdev dev-get, veth GRO on",
        b,
    )?;

    // napi-get do (NETDEV_A_NAPI_ID 2) for the NAPI instance GRO created.
    let napi = zcnet_netlink::netdev::Netdev::open()?.napi_dump(idx)?;
    if let Some(n) = napi.first() {
        let mut b = c.start(nd.id, 11, false);
        b.put_u32(2, n.id);
        c.run(
            "netdev_napi_get_veth",
            &format!("netdev napi-get id {}", n.id),
            b,
        )?;
    }
    // dev-get without its required ifindex.
    let b = c.start(nd.id, 1, false);
    c.run(
        "netdev_dev_get_no_ifindex",
        "netdev dev-get without ifindex",
        b,
    )?;
    // A feature veth cannot change (not in hw_features).
    let mut b = c.start(et.id, 12, false);
    eth_header(&mut b, &dev, 0);
    b.nest_begin(3)
        .nest_begin(3)
        .nest_begin(1)
        .put_str(2, "rx-ntuple-filter");
    b.put_flag(3).nest_end().nest_end().nest_end();
    c.run(
        "ethtool_features_set_fixed_veth",
        "ethtool features-set rx-ntuple-filter on",
        b,
    )?;
    // Turn GRO off again (bit named, no value flag).
    let mut b = c.start(et.id, 12, false);
    eth_header(&mut b, &dev, 0);
    b.nest_begin(3)
        .nest_begin(3)
        .nest_begin(1)
        .put_str(2, "rx-gro");
    b.nest_end().nest_end().nest_end();
    c.run(
        "ethtool_features_set_gro_off_veth",
        "ethtool features-set rx-gro off",
        b,
    )?;

    ioctls(&c.out, &dev)?;
    Ok(())
}

/// SIOCETHTOOL captures: `>` the command struct sent, `<` the struct the kernel wrote back,
/// or `! errno N`.
fn ioctls(out: &std::path::Path, dev: &str) -> Res<()> {
    use zcnet_netlink::ntuple::{encode_rule, rxnfc_buf, to_bytes, to_words, FlowRule, FlowType};
    use zcnet_sys::ethtool::*;
    let mut drv = vec![0u8; DRVINFO_LEN];
    drv[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    let rule = FlowRule {
        flow: FlowType::TcpV4,
        dst_ip: Some(std::net::Ipv4Addr::new(10, 0, 0, 2).into()),
        dst_port: Some(5201),
        src_ip: None,
        src_port: None,
        queue: 0,
        location: None,
    };
    let mut indir = vec![0u8; 8];
    indir[..4].copy_from_slice(&ETHTOOL_GRXFHINDIR.to_ne_bytes());
    let cases = [
        ("ioctl_drvinfo_veth", "ETHTOOL_GDRVINFO", drv),
        (
            "ioctl_grxrings_veth",
            "ETHTOOL_GRXRINGS",
            rxnfc_buf(ETHTOOL_GRXRINGS, 0),
        ),
        (
            "ioctl_srxclsrlins_veth",
            "ETHTOOL_SRXCLSRLINS tcp4 dst 10.0.0.2:5201 -> 0",
            encode_rule(ETHTOOL_SRXCLSRLINS, &rule)?,
        ),
        ("ioctl_grxfhindir_veth", "ETHTOOL_GRXFHINDIR size 0", indir),
    ];
    for (file, what, req) in cases {
        let mut words = to_words(&req);
        let mut text = format!(
            "# {what} on {dev}\n# captured on {}\n> {}\n",
            kernel(),
            hex(&req)
        );
        match ethtool_ioctl(dev, &mut words) {
            Ok(()) => text.push_str(&format!("< {}\n", hex(&to_bytes(&words)[..req.len()]))),
            Err(e) => text.push_str(&format!("! errno {}\n", e.raw_os_error().unwrap_or(0))),
        }
        std::fs::write(out.join(format!("{file}.hex")), text)?;
        println!("captured {file}");
    }
    Ok(())
}
