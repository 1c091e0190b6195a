//! Helpers shared by the library's lab tests (each test file is its own crate and uses a part
//! of them), and the simulated NIC of the NIC setup tests ([`fake_nic`]).
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

pub mod fake_nic;

use std::io::Read;
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};
use zcnet::net::RecvReport;
use zcnet::Pattern;
use zcnet_lab::{self as lab, Lab, VethPath};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests of one binary, so that fd counts are taken while no other test of it
/// opens or closes anything.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A lab with a veth pair; skips the calling test (reported as ignored) when not root.
pub fn veth_lab() -> (Lab, VethPath) {
    match Lab::new() {
        Ok(mut lab) => {
            let p = lab.veth().unwrap();
            (lab, p)
        }
        Err(lab::Error::NotRoot { .. }) => {
            zcnet_testkit::skip(zcnet_testkit::Need::Root, "network namespaces for the lab")
        }
        Err(e) => panic!("lab: {e}"),
    }
}

/// Runs `f` on a thread inside namespace `ns` (the test thread's namespace stays as it is).
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    lab::in_ns(ns, f).unwrap()
}

/// Reads a TCP stream to its end (the peer of the send tests, no receive backend); with
/// `verify`, checks every byte against the pattern from offset 0, failing at the first
/// mismatch. The bytes and reads it took (its `seconds` stay 0).
pub fn drain_stream(stream: &mut TcpStream, verify: Option<Pattern>) -> zcnet::Result<RecvReport> {
    let mut buf = vec![0u8; 1 << 20];
    let mut rep = RecvReport::default();
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(rep),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(zcnet::Error::io(format!("recv after {} B", rep.bytes), e)),
        };
        if let Some(p) = verify {
            p.verify(rep.bytes, &buf[..n])?;
        }
        rep.bytes += n as u64;
        rep.reads += 1;
    }
}

/// Payload of test frame `seq`: the sequence number, then `seq * step % max` bytes of the
/// pattern `seed` at offset `seq * 1000` (frames of many lengths, each checkable alone).
pub fn frame_payload(seed: u64, step: u64, max: u64, seq: u64) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    let mut rest = vec![0u8; (seq * step % max) as usize];
    zcnet::Pattern::new(seed).fill(seq * 1000, &mut rest);
    p.extend(rest);
    p
}

/// Checks a payload made by [`frame_payload`] with the same `seed`, `step` and `max`;
/// returns its sequence number.
pub fn check_frame_payload(seed: u64, step: u64, max: u64, p: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(p[..8].try_into().unwrap());
    assert_eq!(
        p.len(),
        frame_payload(seed, step, max, seq).len(),
        "frame {seq}: length"
    );
    zcnet::Pattern::new(seed)
        .verify(seq * 1000, &p[8..])
        .unwrap_or_else(|m| panic!("frame {seq}: {m}"));
    seq
}

#[allow(unused_imports)] // not every test file that includes this module runs ip
pub use zcnet_testkit::ip;

/// Whether `ip link show` lists an XDP program on `dev` in namespace `ns`.
pub fn ip_link_has_xdp(ns: &str, dev: &str) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "link", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip link show {dev} in {ns}");
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}
