//! Live tests against the running kernel, each inside a network namespace of its own with a
//! veth pair `va`/`vb` (no addresses, no traffic). They need root and skip with a message
//! otherwise. The namespace is deleted by a guard on every exit path, panics included.
// A failed unwrap is a failed test (clippy's allow-unwrap-in-tests sees only libtest's #[test]).
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use zcnet_netlink::ethtool::{ChannelsSet, Dev, Ethtool, RingsSet, TcpDataSplit};
use zcnet_netlink::netdev::{Netdev, QStatsScope, QueueKind};
use zcnet_netlink::ntuple::{self, FlowRule, FlowType};
use zcnet_netlink::Error;

static NEXT: AtomicU32 = AtomicU32::new(0);

use zcnet_testkit::ip;

/// A namespace `zcnet-nl-<pid>-<n>` with a veth pair, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn with_veth() -> Netns {
        let name = format!(
            "zcnet-nl-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        let n = ns.name.as_str();
        ip(&[
            "-n", n, "link", "add", "va", "type", "veth", "peer", "name", "vb",
        ]);
        ip(&["-n", n, "link", "set", "va", "up"]);
        ip(&["-n", n, "link", "set", "vb", "up"]);
        ns
    }

    /// The ifindex of `dev` inside the namespace (from `ip -o link`: "3: va@vb: ...").
    fn ifindex(&self, dev: &str) -> u32 {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-o", "link", "show", "dev", dev])
            .output()
            .expect("ip link show");
        let s = String::from_utf8_lossy(&out.stdout);
        s.split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no ifindex for {dev} in {s:?}"))
    }

    /// Runs `f` on a thread that has entered the namespace; re-raises its panic.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        let h = std::thread::spawn(move || {
            let ns = File::open(&path).expect("open netns");
            zcnet_sys::os::enter_netns(&ns).expect("setns");
            f()
        });
        match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn need_root() {
    zcnet_testkit::require_root("live netlink tests create network namespaces");
}

#[zcnet_testkit::test]
fn netdev_describes_veth() {
    need_root();
    let ns = Netns::with_veth();
    let va = ns.ifindex("va");
    ns.run(move || {
        let mut nd = Netdev::open().expect("netdev family");
        assert!(nd.family().has_op(1));
        let d = nd.dev_get(va).expect("dev-get");
        assert_eq!(d.ifindex, va);
        // The netdev family (6.3) came with veth's XDP features: basic, redirect and rx-sg
        // always; ndo-xmit only while the peer runs XDP or GRO (veth.c veth_set_xdp_features).
        assert_eq!(d.xdp_features & 0x23, 0x23, "{:?}", d.names());
        for f in ["basic", "redirect", "rx-sg"] {
            assert!(d.names().iter().any(|n| n == f), "{f} in {:?}", d.names());
        }
        assert_eq!(d.xsk_features, 0);
        let all = nd.dev_dump().expect("dev dump");
        assert!(all.iter().any(|x| x.ifindex == va));
        assert!(
            all.iter().any(|x| x.ifindex == 1 && x.xdp_features == 0),
            "lo"
        );

        let q = nd.queue_dump(va).expect("queue dump");
        let kinds: Vec<(QueueKind, u32)> = q.iter().map(|q| (q.kind, q.id)).collect();
        assert_eq!(kinds, [(QueueKind::Rx, 0), (QueueKind::Tx, 0)]);
        assert!(q
            .iter()
            .all(|q| q.ifindex == va && q.dmabuf.is_none() && !q.io_uring));
        assert_eq!(nd.queue_get(va, QueueKind::Rx, 0).expect("queue-get"), q[0]);
        let e = nd.queue_get(va, QueueKind::Rx, 5).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");

        // qstats: veth has no queue statistics; the dump of all devices works.
        let e = nd.qstats_dump(Some(va), QStatsScope::Device).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        assert!(e.to_string().contains("bad attribute: ifindex"), "{e}");
        let all = nd
            .qstats_dump(None, QStatsScope::Queue)
            .expect("qstats dump");
        assert!(all.iter().all(|s| s.ifindex != va));
        nd.page_pool_dump().expect("page-pool dump");

        let e = nd.dev_get(99_999).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENODEV));
        assert!(
            e.to_string()
                .starts_with("dev-get ifindex 99999: No such device"),
            "{e}"
        );
    });
}

#[zcnet_testkit::test]
fn napi_follows_gro_on_veth() {
    need_root();
    let ns = Netns::with_veth();
    let va = ns.ifindex("va");
    ns.run(move || {
        let mut nd = Netdev::open().expect("netdev");
        let mut et = Ethtool::open().expect("ethtool");
        assert!(
            nd.napi_dump(va).expect("napi dump").is_empty(),
            "GRO is off"
        );
        et.feature_set(Dev::Index(va), "rx-gro", true)
            .expect("gro on");
        assert_eq!(
            et.features_get(Dev::Index(va)).unwrap().is_active("gro"),
            Some(true)
        );
        let napi = nd.napi_dump(va).expect("napi dump");
        assert_eq!(napi.len(), 1, "{napi:?}");
        assert_eq!(napi[0].ifindex, va);
        assert_eq!(nd.napi_get(napi[0].id).expect("napi-get"), napi[0]);
        et.feature_set(Dev::Name("va"), "rx-gro", false)
            .expect("gro off");
        assert!(nd.napi_dump(va).expect("napi dump").is_empty());
        let e = nd.napi_get(napi[0].id).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    });
}

#[zcnet_testkit::test]
fn dmabuf_bindings_fail_cleanly_on_veth() {
    need_root();
    // bind-rx came with devmem TCP in 6.12, bind-tx with devmem TX in 6.16.
    zcnet_testkit::require_kernel(6, 16, "netdev bind-tx");
    let ns = Netns::with_veth();
    let va = ns.ifindex("va");
    ns.run(move || {
        let nd = Netdev::open().expect("netdev");
        // No dma-buf exporter exists here; the device check comes before the fd is used.
        let stand_in = File::open("/dev/null").expect("/dev/null");
        let e = nd.bind_tx(va, stand_in.as_fd()).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        assert_eq!(e.extack(), Some("Driver does not support netmem TX"));
        assert!(e.to_string().starts_with("bind-tx ifindex"), "{e}");
        let e = nd.bind_rx(va, stand_in.as_fd(), &[0]).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        assert_eq!(e.kernel().unwrap().bad_attr.as_deref(), Some("ifindex"));
        assert!(matches!(
            nd.bind_rx(va, stand_in.as_fd(), &[]),
            Err(Error::InvalidInput { .. })
        ));
        // The one-call constructors take a raw fd number.
        let e = zcnet_netlink::netdev::TxBinding::bind(va, stand_in.as_raw_fd()).unwrap_err();
        assert_eq!(e.extack(), Some("Driver does not support netmem TX"));
        let e = zcnet_netlink::netdev::RxBinding::bind(va, -1, &[0]).unwrap_err();
        assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
        assert!(nd.op_names().iter().any(|o| o == "bind-tx"));
    });
}

#[zcnet_testkit::test]
fn ethtool_on_veth() {
    need_root();
    let ns = Netns::with_veth();
    let va = ns.ifindex("va");
    ns.run(move || {
        let mut et = Ethtool::open().expect("ethtool family");
        let e = et.rings_get(Dev::Name("va")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        let tds = RingsSet {
            tcp_data_split: Some(TcpDataSplit::Enabled),
            ..RingsSet::default()
        };
        let e = et.rings_set(Dev::Name("va"), &tds).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        assert_eq!(e.extack(), Some("setting TCP data split is not supported"));
        assert_eq!(
            e.to_string(),
            "rings-set dev va: Operation not supported (EOPNOTSUPP) (kernel: setting TCP data \
             split is not supported; bad attribute: tcp-data-split)"
        );
        let hds = RingsSet {
            hds_thresh: Some(0),
            ..RingsSet::default()
        };
        let e = et.rings_set(Dev::Index(va), &hds).unwrap_err();
        assert_eq!(e.extack(), Some("setting hds-thresh is not supported"));
        assert!(matches!(
            et.rings_set(Dev::Index(va), &RingsSet::default()),
            Err(Error::InvalidInput { .. })
        ));

        let c = et.channels_get(Dev::Name("va")).expect("channels");
        assert_eq!(c.header.ifindex, Some(va));
        assert_eq!((c.rx_count, c.tx_count), (Some(1), Some(1)));
        let max = c.rx_max.expect("rx max");
        assert!(max >= 1);
        // veth can change its channel counts; set the current value back (a no-op).
        et.channels_set(
            Dev::Name("va"),
            &ChannelsSet {
                rx: Some(1),
                ..ChannelsSet::default()
            },
        )
        .expect("channels-set");
        let e = et
            .channels_set(
                Dev::Name("va"),
                &ChannelsSet {
                    rx: Some(max + 1),
                    ..ChannelsSet::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
        assert!(e.extack().is_some(), "{e}");

        let f = et.features_get(Dev::Name("va")).expect("features");
        for name in [
            "rx-gro",
            "rx-gro-hw",
            "rx-ntuple-filter",
            "tx-scatter-gather",
        ] {
            assert!(f.feature(name).is_some(), "{name}");
        }
        assert_eq!(f.is_active("rx-gro"), Some(false));
        assert!(!f.feature("ntuple-filters").unwrap().changeable);
        let e = et
            .feature_set(Dev::Name("va"), "ntuple-filters", true)
            .unwrap_err();
        assert!(matches!(e, Error::NotApplied { .. }), "{e}");
        assert!(e.to_string().contains("rx-ntuple-filter stays off"), "{e}");
        let e = et
            .feature_set(Dev::Name("va"), "zcnet-no-such", true)
            .unwrap_err();
        assert_eq!(e.extack(), Some("bit name not found"));

        let e = et.rss_get(Dev::Name("va"), 0).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        assert!(et.rss_dump(None).expect("rss dump").is_empty());

        let e = et.channels_get(Dev::Name("nope0")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
        assert!(e.to_string().contains("dev nope0"), "{e}");
        assert!(matches!(
            et.channels_get(Dev::Name("sixteen-bytes-xx")),
            Err(Error::InvalidInput { .. })
        ));
    });
}

#[zcnet_testkit::test]
fn ntuple_ioctls_on_veth() {
    need_root();
    let ns = Netns::with_veth();
    ns.run(|| {
        let d = ntuple::driver_info("va").expect("drvinfo");
        assert_eq!(d.driver, "veth");
        assert_eq!(d.version, "1.0");
        let e = ntuple::rx_rings("va").unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        let rule = FlowRule {
            flow: FlowType::TcpV4,
            dst_ip: Some(std::net::Ipv4Addr::new(10, 0, 0, 2).into()),
            dst_port: Some(5201),
            src_ip: None,
            src_port: None,
            queue: 0,
            location: None,
        };
        let e = ntuple::rule_insert("va", &rule).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
        assert!(
            e.to_string().starts_with("ETHTOOL_SRXCLSRLINS dev va:"),
            "{e}"
        );
        assert_eq!(
            ntuple::rule_list("va").unwrap_err().errno(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(
            ntuple::rule_delete("va", 0).unwrap_err().errno(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(
            ntuple::indir_get("va").unwrap_err().errno(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(
            ntuple::indir_reset("va").unwrap_err().errno(),
            Some(libc::EOPNOTSUPP)
        );
        let e = ntuple::driver_info("nope0").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
        assert!(matches!(
            ntuple::driver_info("sixteen-bytes-xx"),
            Err(Error::InvalidInput { .. })
        ));
    });
}

#[zcnet_testkit::test]
fn namespace_is_gone_after_a_panic() {
    need_root();
    let name = {
        let ns = Netns::with_veth();
        let name = ns.name.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.run(|| panic!("deliberate"));
        }));
        assert!(r.is_err());
        name
    };
    assert!(
        !std::path::Path::new(&format!("/run/netns/{name}")).exists(),
        "{name} survived"
    );
}

zcnet_testkit::main!();
