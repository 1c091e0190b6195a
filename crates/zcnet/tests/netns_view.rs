//! Code that runs in-process in a lab namespace (a thread that entered it with `setns`) must see
//! that namespace's interfaces. `/sys/class/net` does not follow a thread's namespace (it shows
//! the namespace of whoever mounted sysfs), so the probe and the NIC code must not use it.
//! Needs root for the lab; skips with a printed reason otherwise. Only reads: nothing is set
//! on any interface, and the root namespace's eth0/ifb0/ifb1 are never touched.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use zcnet::nic::{LiveNic, NicControl};
use zcnet::probe::{probe, IfaceKind, ProbeOptions};
use zcnet::Error;
use zcnet_lab::{self as lab, Lab};

/// Devices of the root namespace that a lab namespace does not have.
const ROOT_ONLY: [&str; 3] = ["eth0", "ifb0", "ifb1"];

#[zcnet_testkit::test]
fn a_thread_in_a_lab_namespace_sees_that_namespaces_interfaces() {
    let mut lab = match Lab::new() {
        Ok(l) => l,
        Err(lab::Error::NotRoot { .. }) => {
            zcnet_testkit::skip(zcnet_testkit::Need::Root, "network namespaces for the lab")
        }
        Err(e) => panic!("lab: {e}"),
    };
    let path = lab.veth().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            lab::enter(&path.b).unwrap();

            // The probe lists exactly lo and vB, with their facts.
            let report = probe(&ProbeOptions::default()).unwrap();
            let names: Vec<&str> = report.interfaces.iter().map(|i| i.name.as_str()).collect();
            assert_eq!(names, ["lo", "vB"], "the probe listed {names:?}");
            let lo = &report.interfaces[0];
            assert_eq!(
                (lo.facts.kind, lo.up, lo.ifindex),
                (IfaceKind::Loopback, true, 1)
            );
            let vb = &report.interfaces[1];
            assert_eq!(vb.facts.kind, IfaceKind::Veth);
            assert_eq!(vb.facts.driver.as_deref(), Some("veth"));
            assert!(vb.up, "the lab set vB up");
            assert_eq!(Some(vb.ifindex), zcnet_sys::zcrx::if_index("vB"));
            assert_eq!(vb.facts.rx_queues, 1, "{vb:?}");
            assert!(
                vb.queues.iter().any(|q| q.0 == "rx" && q.1 == 0),
                "{:?}",
                vb.queues
            );
            assert!(
                !vb.notes.iter().any(|n| n.starts_with("down")),
                "{:?}",
                vb.notes
            );

            // One interface by name: this namespace's, and the root's are unknown here.
            let one = ProbeOptions {
                iface: Some("vB".into()),
                active: false,
                all_ifaces: false,
            };
            let r = probe(&one).unwrap();
            assert_eq!(r.interfaces.len(), 1);
            assert_eq!(r.interfaces[0].name, "vB");
            for name in ROOT_ONLY {
                let opts = ProbeOptions {
                    iface: Some(name.into()),
                    active: false,
                    all_ifaces: false,
                };
                match probe(&opts) {
                    Err(Error::UnknownInterface { given }) => assert_eq!(given, name),
                    other => panic!("probe --iface {name} in the lab: {other:?}"),
                }
            }

            // The NIC control plane resolves names in this namespace too (read only).
            let mut nic = LiveNic::open("vB").unwrap();
            assert_eq!(nic.ifindex(), vb.ifindex);
            // veth has no RSS control (ETHTOOL_GRXRINGS: EOPNOTSUPP): the queues in use.
            assert_eq!(nic.rx_rings().unwrap(), 1);
            for name in ROOT_ONLY {
                match LiveNic::open(name) {
                    Err(Error::UnknownInterface { given }) => assert_eq!(given, name),
                    other => panic!("LiveNic::open({name}) in the lab: {other:?}"),
                }
            }
        })
        .join()
        .unwrap()
    });

    // The test thread never left its namespace: vB is not here.
    match LiveNic::open("vB") {
        Err(Error::UnknownInterface { .. }) => {}
        other => panic!("LiveNic::open(vB) outside the lab: {other:?}"),
    }
}

zcnet_testkit::main!();
