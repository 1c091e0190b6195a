//! Every `zcnet::Error` variant gets its code and its Display as the one-line message; the C
//! structs have the layout the header promises (fixed sizes, no hidden padding).

use crate::error::{call, status_of, zcnet_status, zcnet_status::*, Failure};
use crate::rx::{zcnet_rx_config, zcnet_rx_event, zcnet_rx_stats, zcnet_stream_report};
use crate::tx::{zcnet_tx_config, zcnet_tx_stats, zcnet_txbuf};
use std::io;
use std::mem::{offset_of, size_of};
use zcnet::Error as E;

fn errno(n: i32) -> io::Error {
    io::Error::from_raw_os_error(n)
}

fn every_variant() -> Vec<(E, zcnet_status)> {
    let addr = "127.0.0.1:9".parse().unwrap();
    let s = |x: &str| x.to_string();
    let gpu = |bad_argument| E::Gpu {
        what: s("allocating 1 MiB on cuda:7").into(),
        cause: s("no such device").into(),
        remedy: zcnet::Remedy::Other("use cuda:0"),
        bad_argument,
    };
    vec![
        (E::UnknownMode { given: s("x") }, ZCNET_E_INVALID),
        (E::UnknownRxMode { given: s("x") }, ZCNET_E_INVALID),
        (E::BadAddress { given: s("x") }, ZCNET_E_INVALID),
        (
            E::Unresolved {
                host: s("x"),
                given: s("x:1"),
            },
            ZCNET_E_INVALID,
        ),
        (E::NotLocalAddress { addr }, ZCNET_E_INVALID),
        (E::ConnectionRefused { addr }, ZCNET_E_CONNECTION),
        (E::NotRoot { what: "nic setup" }, ZCNET_E_PERMISSION),
        (
            E::MemlockTooSmall {
                what: s("the io_uring ring (8 KiB) and the 1 MiB region registered with it").into(),
                need: (1 << 20) + (8 << 10),
                limit: 8 << 10,
                hard: 8 << 10,
                shared: false,
            },
            ZCNET_E_RESOURCE,
        ),
        (E::NoHugePages { pages: 2 }, ZCNET_E_RESOURCE),
        (
            E::OptmemExhausted {
                optmem_max: Some(20480),
            },
            ZCNET_E_RESOURCE,
        ),
        (
            E::PeerReset {
                accepted: 10,
                confirmed: 5,
            },
            ZCNET_E_CONNECTION,
        ),
        (E::NotCpuAccessible, ZCNET_E_INVALID),
        (E::RegionTooSmall { need: 2, have: 1 }, ZCNET_E_INVALID),
        (
            E::Unsupported {
                what: s("zcrx").into(),
                source: errno(libc::EOPNOTSUPP),
                remedy: zcnet::Remedy::Any(&[
                    zcnet::Remedy::Other("use a NIC with header split"),
                    zcnet::Remedy::UseRxMode(zcnet::rx::RxMode::Uring),
                ]),
            },
            ZCNET_E_UNSUPPORTED,
        ),
        (
            E::Stalled {
                seconds: 10,
                outstanding: 3,
            },
            ZCNET_E_STALLED,
        ),
        (
            E::Verify(zcnet_core::Mismatch {
                offset: 5,
                expected: 1,
                got: 2,
            }),
            ZCNET_E_DATA,
        ),
        (
            E::Protocol(zcnet_core::TrackerError::Busy(1)),
            ZCNET_E_INTERNAL,
        ),
        (E::Interrupted, ZCNET_E_INTERRUPTED),
        (E::UnknownInterface { given: s("eth9") }, ZCNET_E_INVALID),
        (
            E::Kernel {
                what: s("rings-set on lo").into(),
                message: s("not supported").into(),
                errno: Some(95),
            },
            ZCNET_E_UNSUPPORTED,
        ),
        (
            E::NicSetup {
                iface: s("eth0"),
                step: s("enabling header split").into(),
                cause: Box::new(E::Kernel {
                    what: "rings-set".into(),
                    message: s("Operation not supported").into(),
                    errno: Some(95),
                }),
                undo: s("nothing to undo").into(),
            },
            ZCNET_E_UNSUPPORTED,
        ),
        (
            E::NicState {
                path: "/run/x".into(),
                problem: s("torn").into(),
            },
            ZCNET_E_IO,
        ),
        (gpu(false), ZCNET_E_GPU),
        (gpu(true), ZCNET_E_INVALID),
        (E::io("mmap 1 B", errno(libc::ENOMEM)), ZCNET_E_IO),
        (E::invalid_input("buffer size 0"), ZCNET_E_INVALID),
        (E::io("send", errno(libc::EINVAL)), ZCNET_E_INVALID),
        (E::io("bind", errno(libc::EACCES)), ZCNET_E_PERMISSION),
        (E::io("recv", errno(libc::ECONNRESET)), ZCNET_E_CONNECTION),
        (E::io("send", errno(libc::EPIPE)), ZCNET_E_CONNECTION),
        (E::io("accept", errno(libc::EINTR)), ZCNET_E_INTERRUPTED),
    ]
}

/// A library error met on the way to something else keeps its code, with the words in front.
#[zcnet_testkit::test]
fn an_error_within_another_step_keeps_its_code() {
    for (e, want) in every_variant() {
        let shown = e.render(&crate::words::C).replace('\n', " ");
        let st = call("zcnet_test", || {
            Err(Failure::Within("an earlier copy failed".into(), e))
        });
        assert_eq!(st, want);
        assert_eq!(
            super::last_error(),
            format!("zcnet_test: an earlier copy failed: {shown}")
        );
    }
}

#[zcnet_testkit::test]
fn every_error_has_its_code_and_message() {
    for (e, want) in every_variant() {
        assert_eq!(status_of(&e), want, "{e:?}");
        let shown = e.render(&crate::words::C).replace('\n', " ");
        let st = call("zcnet_test", || Err(Failure::Lib(e)));
        assert_eq!(st, want);
        assert_eq!(
            super::last_error(),
            shown,
            "the message is the error in the ABI's words"
        );
        // The ABI's words (struct fields, ZCNET_* constants), never the command line's flags.
        assert!(!shown.contains("--"), "{shown}");
        assert!(!shown.contains("Config::"), "{shown}");
        if let Some(r) = shown.strip_prefix("zcrx is not supported here") {
            assert!(r.ends_with("or use ZCNET_RX_URING"), "{shown}");
        }
    }
}

#[zcnet_testkit::test]
fn every_code_but_ok_other_and_panic_is_reachable_from_an_error() {
    let reached: Vec<zcnet_status> = every_variant().into_iter().map(|(_, s)| s).collect();
    for s in zcnet_status::ALL {
        if ![ZCNET_OK, ZCNET_E_OTHER, ZCNET_E_PANIC].contains(&s) {
            assert!(reached.contains(&s), "{s:?} is never produced");
        }
    }
}

#[zcnet_testkit::test]
fn senders_and_regions_may_move_between_threads() {
    fn send<T: Send>() {}
    send::<crate::tx::zcnet_sender>();
    send::<crate::region::zcnet_region>();
}

#[zcnet_testkit::test]
#[cfg(target_pointer_width = "64")]
fn structs_have_the_promised_layout() {
    assert_eq!(size_of::<zcnet_status>(), 4);
    assert_eq!(size_of::<zcnet_tx_config>(), 24);
    assert_eq!(offset_of!(zcnet_tx_config, buf_size), 8);
    assert_eq!(offset_of!(zcnet_tx_config, stall_timeout_ms), 16);
    assert_eq!(size_of::<zcnet_txbuf>(), 24);
    assert_eq!(offset_of!(zcnet_txbuf, capacity), 8);
    assert_eq!(offset_of!(zcnet_txbuf, id), 16);
    assert_eq!(size_of::<zcnet_tx_stats>(), 12 * 8);
    assert_eq!(offset_of!(zcnet_tx_stats, seconds), 80);
    assert_eq!(size_of::<zcnet_rx_config>(), 48);
    assert_eq!(offset_of!(zcnet_rx_config, buf_size), 8);
    assert_eq!(offset_of!(zcnet_rx_config, area_len), 16);
    assert_eq!(offset_of!(zcnet_rx_config, queue), 24);
    assert_eq!(offset_of!(zcnet_rx_config, flags), 28);
    assert_eq!(offset_of!(zcnet_rx_config, iface), 32);
    assert_eq!(size_of::<zcnet_rx_event>(), 64);
    assert_eq!(offset_of!(zcnet_rx_event, status), 4);
    assert_eq!(offset_of!(zcnet_rx_event, conn), 8);
    assert_eq!(offset_of!(zcnet_rx_event, buf), 16);
    assert_eq!(offset_of!(zcnet_rx_event, data), 24);
    assert_eq!(offset_of!(zcnet_rx_event, len), 32);
    assert_eq!(offset_of!(zcnet_rx_event, dmabuf_offset), 40);
    assert_eq!(offset_of!(zcnet_rx_event, dmabuf_id), 48);
    assert_eq!(offset_of!(zcnet_rx_event, copied), 52);
    assert_eq!(offset_of!(zcnet_rx_event, error), 56);
    assert_eq!(size_of::<zcnet_rx_stats>(), 13 * 8);
    assert_eq!(size_of::<zcnet_stream_report>(), 4 * 8 + 13 * 8);
    assert_eq!(offset_of!(zcnet_stream_report, stats), 32);
}

/// The C counters carry the library's, the copy split included: bytes the kernel did not say
/// it copied are neither copied nor zero-copy in C either.
#[zcnet_testkit::test]
fn rx_stats_carry_the_copy_split_and_what_is_held() {
    let s = zcnet::RxStats {
        bytes: 10,
        copied_bytes: 3,
        zerocopy_bytes: 2,
        unknown_copy_bytes: 5,
        ..Default::default()
    };
    let c = crate::rx::stats(&s, 4);
    assert_eq!(
        (
            c.bytes,
            c.copied_bytes,
            c.zerocopy_bytes,
            c.unknown_copy_bytes,
            c.held
        ),
        (10, 3, 2, 5, 4)
    );
}
