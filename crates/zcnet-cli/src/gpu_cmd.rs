//! `zcnet send` and `zcnet recv` with `--mem cuda[:N]`: the stream comes from or goes to GPU
//! memory, by the best path (devmem TCP, zcrx with a dma-buf area, staging), and the output
//! says which one ran and why the better ones were refused.

use crate::args::{RecvArgs, SendArgs};
use crate::endpoints::listen_announced;
use crate::output::print_json;
use crate::plan::{RecvPlan, SendPlan};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Instant;
use zcnet::gpu::{self, GpuSender, Refusal, StagingOptions};
use zcnet::{net, Error, MemoryKind, Pattern, Region};
use zcnet_tools::sendloop::next_chunk;

#[derive(Serialize)]
struct RefusalJson {
    path: &'static str,
    reason: String,
}

fn refusals_json(r: &[Refusal]) -> Vec<RefusalJson> {
    r.iter()
        .map(|r| RefusalJson {
            path: r.tried.name(),
            reason: r.reason.render(&zcnet_cli::cli_text::Cli),
        })
        .collect()
}

#[derive(Serialize)]
struct GpuSendJson {
    mem: String,
    path: &'static str,
    refused: Vec<RefusalJson>,
    tx: &'static str,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    zerocopy_bytes: u64,
    copied_bytes: u64,
    notifications: u64,
    copies: u64,
    cpu_seconds: f64,
    /// `"(stand-in driver: not GPU figures)"` on zcnet's CUDA driver stand-in; absent on a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

/// The stand-in's label for `region`'s device, appended to every line about the run (so no
/// stand-in figure passes for a GPU one); empty on a GPU.
fn label_of(region: &Region) -> (Option<&'static str>, String) {
    let l = region.device_ordinal().and_then(gpu::standin_label);
    (l, l.map_or(String::new(), |l| format!("  {l}")))
}
/// `zcnet send --mem cuda[:N]`.
pub fn send(a: &SendArgs, plan: &SendPlan) -> Result<(), Error> {
    let SendPlan {
        addr,
        memory,
        ref cfg,
        limit,
        deadline,
        ..
    } = *plan;
    if a.naive {
        return naive_send(a, addr, memory, cfg.buf_size, limit, deadline);
    }
    // The GPU memory first: a missing driver or device fails before any connection.
    let region = Region::new(memory, zcnet::tx::region_len(cfg))?;
    let (standin_note, label) = label_of(&region);
    // UDP: each buffer of --size bytes is one datagram (the staging pipeline copies and sends
    // it whole), checked by `zcnet recv --udp --verify` at its stream offset.
    let sock: zcnet::Socket = if a.udp {
        net::connect_udp_for(addr, cfg.buf_size)?.into()
    } else {
        net::connect_tcp(addr, &zcnet_tools::interrupt::token())?.into()
    };
    let (mut tx, refused) = GpuSender::open(sock, region, cfg)?;
    if !a.json {
        for r in &refused {
            zcnet_tools::eoutln!("zcnet send: {r}{label}");
        }
        zcnet_tools::eoutln!("zcnet send: from {} by {}{label}", memory.name(), tx.path());
    }
    let pattern = Pattern::new(a.seed);
    let fill = a.verify.then_some(&pattern);
    let mut scratch = Vec::new();
    let mut offset = 0u64;
    while let Some(n) = next_chunk(offset, cfg.buf_size, limit, deadline)? {
        tx.send_chunk(offset, n, fill, &mut scratch)?;
        offset += n as u64;
    }
    let st = tx.finish()?;
    if a.json {
        let doc = GpuSendJson {
            mem: memory.name(),
            path: st.path.name(),
            refused: refusals_json(&refused),
            tx: cfg.mode.name(),
            bytes: st.tx.bytes,
            seconds: st.tx.seconds,
            mb_per_s: st.tx.mb_per_s(),
            zerocopy_bytes: st.tx.zerocopy_bytes,
            copied_bytes: st.tx.copied_bytes,
            notifications: st.tx.notifications,
            copies: st.staged.pipeline.copies_completed,
            cpu_seconds: st.tx.cpu_seconds,
            standin_note,
        };
        print_json(&doc)?;
    } else {
        zcnet_tools::eoutln!(
            "zcnet send: {} B in {:.2} s ({:.0} MB/s) from {} by {}: {} B zero-copy, {} B copied, {} device-to-host copies, CPU {:.3} s{label}",
            st.tx.bytes,
            st.tx.seconds,
            st.tx.mb_per_s(),
            memory.name(),
            st.path,
            st.tx.zerocopy_bytes,
            st.tx.copied_bytes,
            st.staged.pipeline.copies_completed,
            st.tx.cpu_seconds
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct GpuRecvJson {
    mem: String,
    path: &'static str,
    refused: Vec<RefusalJson>,
    bytes: u64,
    seconds: f64,
    verified: bool,
    copies: u64,
    ring_full: u64,
    /// `"(stand-in driver: not GPU figures)"` on zcnet's CUDA driver stand-in; absent on a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

/// `zcnet recv --mem cuda[:N]`: the GPU memory is a ring of `--area` bytes.
pub fn recv(a: &RecvArgs, plan: &RecvPlan) -> Result<(), Error> {
    let RecvPlan {
        memory,
        ref cfg,
        want_bytes,
        ..
    } = *plan;
    let addr = net::parse_addr(&a.listen)?;
    let mut region = Region::new(memory, cfg.area_len)?;
    if a.naive {
        return naive_recv(a, addr, memory, region, want_bytes);
    }
    let (standin_note, label) = label_of(&region);
    let prepared = gpu::PreparedReceive::new(&mut region, cfg)?;
    if !a.json {
        for r in prepared.refused() {
            zcnet_tools::eoutln!("zcnet recv: {r}{label}");
        }
    }
    let listener = listen_announced(addr)?;
    let (s, peer) = net::accept(&listener, &zcnet_tools::interrupt::token())?;
    let peer = net::AddrText(peer);
    let pattern = a.verify.then(|| Pattern::new(a.seed));
    let rep = prepared.run(
        s,
        &region,
        &StagingOptions {
            cancel: zcnet_tools::interrupt::token(),
            ..StagingOptions::default()
        },
        pattern,
    )?;
    if a.json {
        let doc = GpuRecvJson {
            mem: memory.name(),
            path: rep.path,
            refused: refusals_json(&rep.refused),
            bytes: rep.bytes,
            seconds: rep.seconds,
            verified: rep.verified,
            copies: rep.copies,
            ring_full: rep.ring_full,
            standin_note,
        };
        print_json(&doc)?;
    } else {
        zcnet_tools::eoutln!(
            "zcnet recv: {} B from {peer} in {:.2} s ({:.0} MB/s) into {} by {}: {} host-to-device copies, ring full {}x{}{label}",
            rep.bytes,
            rep.seconds,
            rep.mb_per_s(),
            memory.name(),
            rep.path,
            rep.copies,
            rep.ring_full,
            if rep.verified { ", pattern verified" } else { "" }
        );
    }
    crate::endpoints::stream_length(rep.bytes, want_bytes)
}

#[derive(Serialize)]
struct NaiveJson {
    mem: String,
    path: &'static str,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    cpu_seconds: f64,
    verified: bool,
    /// `"(stand-in driver: not GPU figures)"` on zcnet's CUDA driver stand-in; absent on a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

#[allow(clippy::too_many_arguments)]
fn report_naive(
    a_json: bool,
    what: &str,
    memory: MemoryKind,
    region: &Region,
    bytes: u64,
    secs: f64,
    cpu: f64,
    verified: bool,
) -> Result<(), Error> {
    let (standin_note, label) = label_of(region);
    let mbps = if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    };
    if a_json {
        let doc = NaiveJson {
            mem: memory.name(),
            path: "naive",
            bytes,
            seconds: secs,
            mb_per_s: mbps,
            cpu_seconds: cpu,
            verified,
            standin_note,
        };
        print_json(&doc)?;
    } else {
        zcnet_tools::eoutln!(
            "zcnet {what}: {bytes} B in {secs:.2} s ({mbps:.0} MB/s) with {} by the naive loop (synchronous copies through pageable memory), CPU {cpu:.3} s{label}",
            memory.name()
        );
    }
    Ok(())
}

/// The loop people write first: a synchronous copy out of the GPU into pageable memory, then
/// `send()`. For comparison with the staged path.
fn naive_send(
    a: &SendArgs,
    addr: SocketAddr,
    memory: MemoryKind,
    size: usize,
    limit: Option<u64>,
    deadline: Option<Instant>,
) -> Result<(), Error> {
    let mut region = Region::new(memory, size)?;
    let stream = net::connect_tcp(addr, &zcnet_tools::interrupt::token())?;
    let pattern = Pattern::new(a.seed);
    let mut host = vec![0u8; size];
    let (t0, cpu0) = (Instant::now(), zcnet::os::thread_cpu_seconds());
    let mut offset = 0u64;
    while let Some(n) = next_chunk(offset, size, limit, deadline)? {
        if a.verify {
            pattern.fill(offset, &mut host[..n]);
            region.write_at(0, &host[..n])?;
        }
        region.read_at(0, &mut host[..n])?;
        // Interruptible: the CUDA driver's threads may be the ones a signal lands on.
        net::send_all_interruptible(&stream, &host[..n], &zcnet_tools::interrupt::token())
            .map_err(|e| Error::io("send", e))?;
        offset += n as u64;
    }
    drop(stream);
    let (secs, cpu) = (
        t0.elapsed().as_secs_f64(),
        zcnet::os::thread_cpu_seconds() - cpu0,
    );
    report_naive(a.json, "send", memory, &region, offset, secs, cpu, a.verify)
}

/// The loop people write first: `recv()` into pageable memory, then a synchronous copy into
/// the GPU ring. For comparison with the staged path.
fn naive_recv(
    a: &RecvArgs,
    addr: SocketAddr,
    memory: MemoryKind,
    mut region: Region,
    want_bytes: Option<u64>,
) -> Result<(), Error> {
    let listener = listen_announced(addr)?;
    let (s, _) = net::accept(&listener, &zcnet_tools::interrupt::token())?;
    let pattern = a.verify.then(|| Pattern::new(a.seed));
    let rep = zcnet_tools::gpu_rxbench::receive_naive(
        s,
        &mut region,
        pattern,
        &zcnet_tools::interrupt::token(),
    )?;
    report_naive(
        a.json,
        "recv",
        memory,
        &region,
        rep.bytes,
        rep.seconds,
        rep.cpu_seconds,
        a.verify,
    )?;
    crate::endpoints::stream_length(rep.bytes, want_bytes)
}
