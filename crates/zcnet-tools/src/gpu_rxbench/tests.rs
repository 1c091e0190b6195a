//! The GPU receive bench's harness over loopback, without a GPU: the staged case runs the real
//! staging driver with the host copy engine (the "device" is host memory), and checks every byte
//! it delivered where the ring says it is.

use super::*;
use std::io::Read;
use std::sync::{Arc, Mutex};
use zcnet::gpu::host_staged_receiver;
use zcnet::gpu::receive::drain_staged;

fn cfg(verify: bool) -> GpuRxBenchConfig {
    GpuRxBenchConfig {
        paths: vec![PathKind::Loopback],
        memory: MemoryKind::Cuda(0),
        ring: 1 << 20,
        size: 48 << 10,
        duration: Duration::from_millis(300),
        verify,
    }
}

/// The staged receive of [`zcnet::gpu::receive::receive`], with the host engine.
fn staged_host(s: TcpStream, ring: usize, verify: Option<Pattern>) -> Result<GpuRecvReport> {
    let opts = StagingOptions {
        host_bufs: 8,
        host_buf_size: 32 << 10,
        max_copies: None,
        ..StagingOptions::default()
    };
    let dev = Arc::new(Mutex::new(vec![0u8; ring]));
    let mut rx = host_staged_receiver(s, Arc::clone(&dev), &opts)?;
    let bytes = drain_staged(&mut rx, |at, off, len| match &verify {
        Some(p) => {
            let d = dev.lock().map_err(|_| Error::invalid_input("poisoned"))?;
            Ok(p.verify(at, &d[off as usize..(off + len) as usize])?)
        }
        None => Ok(()),
    })?;
    Ok(GpuRecvReport {
        path: "staging",
        bytes,
        copies: rx.stats().pipeline.copies_completed,
        verified: verify.is_some(),
        ..GpuRecvReport::default()
    })
}

#[zcnet_testkit::test]
fn every_case_receives_the_whole_stream_and_ratios_compare_cases_on_one_path() {
    let c = cfg(true);
    let verify = Some(Pattern::new(7));
    let cases = [
        Case {
            name: "host".into(),
            recv: Box::new(move |s| receive_host(s, verify)),
        },
        Case {
            name: "cuda:0".into(),
            recv: Box::new(move |s| staged_host(s, 1 << 20, verify)),
        },
    ];
    let mut seen = Vec::new();
    let rep = run_cases(&c, &cases, &mut |p| {
        if let GpuRxProgress::Start { index, case, .. } = p {
            seen.push((index, case.to_string()));
        }
    })
    .expect("run");
    assert_eq!(seen, vec![(1, "host".into()), (2, "cuda:0".into())]);
    assert_eq!(rep.rows.len(), 2);
    for r in &rep.rows {
        assert!(r.error.is_none(), "{}: {:?}", r.case, r.error);
        assert!(
            r.sent > 0 && r.report.bytes == r.sent,
            "{}: {} of {}",
            r.case,
            r.report.bytes,
            r.sent
        );
        assert!(r.report.verified);
        assert!(r.cpu_seconds_per_gb().is_some());
    }
    assert_eq!(rep.rows[0].via, "uring");
    assert_eq!(rep.rows[1].via, "staging");
    // 1 MiB ring, far more streamed: the staged case wrapped and copied many times.
    assert!(
        rep.rows[1].report.copies > 32,
        "{}",
        rep.rows[1].report.copies
    );
    let x = rep.ratio(&rep.rows[1], "host").expect("ratio");
    let want = rep.rows[1].mb_per_s() / rep.rows[0].mb_per_s();
    assert!((x - want).abs() < 1e-12);
    assert_eq!(rep.ratio(&rep.rows[1], "naive"), None, "no such case");
}

#[zcnet_testkit::test]
fn a_failing_case_is_a_row_with_its_error_and_the_next_case_still_runs() {
    let c = cfg(false);
    let cases = [
        Case {
            name: "broken".into(),
            recv: Box::new(|mut s: TcpStream| {
                let mut b = [0u8; 1000];
                let _ = s.read(&mut b);
                Err(Error::invalid_input("copy engine failed (test)"))
            }),
        },
        Case {
            name: "host".into(),
            recv: Box::new(|s| receive_host(s, None)),
        },
    ];
    let rep = run_cases(&c, &cases, &mut |_| {}).expect("run");
    assert_eq!(rep.rows.len(), 2);
    let e = rep.rows[0].error.as_ref().expect("error").to_string();
    assert!(e.contains("copy engine failed (test)"), "{e}");
    assert!(rep.rows[1].error.is_none(), "{:?}", rep.rows[1].error);
    assert!(rep.rows[1].report.bytes > 0);
    assert_eq!(
        rep.ratio(&rep.rows[1], "broken"),
        None,
        "a failed base has no ratio"
    );
}

#[zcnet_testkit::test]
fn a_receiver_that_stops_early_is_reported_as_short() {
    let c = cfg(false);
    let cases = [Case {
        name: "short".into(),
        recv: Box::new(|mut s: TcpStream| {
            let mut b = vec![0u8; 4096];
            let n = s.read(&mut b).map_err(|e| Error::io("read", e))?;
            Ok(GpuRecvReport {
                path: "short",
                bytes: n as u64,
                ..GpuRecvReport::default()
            })
        }),
    }];
    let rep = run_cases(&c, &cases, &mut |_| {}).expect("run");
    let e = rep.rows[0]
        .error
        .as_ref()
        .expect("short receive is an error")
        .to_string();
    assert!(
        e.starts_with("received ") || e.contains("send after"),
        "{e}"
    );
}

#[zcnet_testkit::test]
fn bad_configurations_are_refused_before_anything_runs() {
    let host = GpuRxBenchConfig {
        memory: MemoryKind::Anonymous,
        ..cfg(false)
    };
    let e = run(&host, &mut |_| {})
        .expect_err("host memory")
        .to_string();
    assert!(e.contains("--mem cuda"), "{e}");
    let sink = GpuRxBenchConfig {
        paths: vec![PathKind::Sink],
        ..cfg(false)
    };
    let e = run_cases(&sink, &[], &mut |_| {})
        .expect_err("sink")
        .to_string();
    assert!(e.contains("sink"), "{e}");
    let zero = GpuRxBenchConfig {
        size: 0,
        ..cfg(false)
    };
    assert!(run_cases(&zero, &[], &mut |_| {}).is_err());
}
