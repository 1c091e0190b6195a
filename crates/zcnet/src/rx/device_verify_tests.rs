//! `--verify` on direct receive paths (devmem, zcrx with a dma-buf area): a simulated device
//! writes the stream's bytes at scattered offsets of its memory, as a NIC fills a bound dma-buf,
//! and a few pieces as host (linear) bytes; `receive_stream_reading_device` must read every
//! device piece back while it is held and check it at its stream offset. No NIC here can bind a
//! dma-buf, so this is where the verification logic is tested; on hardware, scripts/hw-suite.sh
//! runs it as `devmem-rx-verify`.

use super::{ConnId, Ctx, DeviceSlice, Location, Receiver, RxBackend, RxMode};
use crate::error::{Error, Result};
use crate::rx::receive_stream_reading_device;
use std::net::{TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zcnet_core::Pattern;

const SEED: u64 = 0x5eed;
/// Pieces of the stream: (length, where it lands). Device offsets are scattered (not stream
/// order) as a NIC's page pool hands them out.
const PIECES: [(usize, Option<u64>); 6] = [
    (4096, Some(8192)),
    (100, None),
    (4000, Some(0)),
    (1500, Some(20_000)),
    (66, None),
    (8192, Some(12_288 + 16_384)),
];

#[derive(Debug)]
struct SimDevice {
    mem: Arc<Mutex<Vec<u8>>>,
    /// Host pieces by key.
    host: Vec<Vec<u8>>,
    conn: Option<ConnId>,
    done: bool,
    held: usize,
}

impl SimDevice {
    fn new(mem: Arc<Mutex<Vec<u8>>>) -> SimDevice {
        SimDevice {
            mem,
            host: Vec::new(),
            conn: None,
            done: false,
            held: 0,
        }
    }
}

impl RxBackend for SimDevice {
    fn mode(&self) -> RxMode {
        RxMode::Devmem
    }
    fn add(&mut self, conn: ConnId, _fd: RawFd) -> Result<()> {
        self.conn = Some(conn);
        Ok(())
    }
    fn remove(&mut self, _conn: ConnId) -> bool {
        true
    }
    fn release(&mut self, _key: u64, _len: usize) {
        self.held -= 1;
    }
    fn poll(&mut self, ctx: &mut Ctx<'_>, _timeout: Duration) -> Result<()> {
        let (Some(conn), false) = (self.conn, self.done) else {
            return Ok(());
        };
        self.done = true;
        let p = Pattern::new(SEED);
        let mut at = 0u64;
        for (len, dev) in PIECES {
            let mut bytes = vec![0u8; len];
            p.fill(at, &mut bytes);
            match dev {
                Some(off) => {
                    let mut mem = self.mem.lock().unwrap();
                    mem[off as usize..off as usize + len].copy_from_slice(&bytes);
                    let slice = DeviceSlice {
                        dmabuf_id: 3,
                        offset: off,
                        len,
                    };
                    ctx.deliver(conn, off, len, Location::Device(slice), false);
                }
                None => {
                    self.host.push(bytes);
                    let key = (self.host.len() - 1) as u64 | 1 << 63;
                    ctx.deliver(conn, key, len, Location::Host, true);
                }
            }
            self.held += 1;
            at += len as u64;
        }
        ctx.eof(conn);
        Ok(())
    }
    fn bytes(&self, key: u64, len: usize) -> Option<&[u8]> {
        let b = self.host.get((key & !(1 << 63)) as usize)?;
        (b.len() == len).then_some(b.as_slice())
    }
    fn held(&self) -> usize {
        self.held
    }
    fn ready_fd(&mut self) -> Result<std::os::fd::BorrowedFd<'_>> {
        Err(Error::invalid_input(
            "a simulated device has no readiness fd",
        ))
    }
}

fn stream() -> TcpStream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    drop(l.accept().unwrap());
    c
}

fn total(device: bool) -> u64 {
    PIECES
        .iter()
        .filter(|(_, d)| d.is_some() == device)
        .map(|(l, _)| *l as u64)
        .sum()
}

/// Runs a receive over the simulated device; `corrupt` flips one device byte after the device
/// wrote it (before it is read back), as a bad DMA would.
fn run(verify: bool, with_reader: bool, corrupt: Option<usize>) -> Result<crate::rx::StreamReport> {
    let mem = Arc::new(Mutex::new(vec![0u8; 64 << 10]));
    let mut rx = Receiver::with_backend(Box::new(SimDevice::new(Arc::clone(&mem))));
    let read = |d: &DeviceSlice, out: &mut [u8]| -> Result<()> {
        let mut m = mem.lock().unwrap();
        if let Some(at) = corrupt {
            m[at] ^= 0x40;
        }
        let off = d.offset as usize;
        out.copy_from_slice(&m[off..off + d.len]);
        if let Some(at) = corrupt {
            m[at] ^= 0x40;
        }
        Ok(())
    };
    let reader: Option<crate::rx::DeviceReader<'_>> = with_reader.then_some(&read);
    let rep = receive_stream_reading_device(
        &mut rx,
        stream(),
        verify.then(|| Pattern::new(SEED)),
        None,
        reader,
    );
    // On failure the pieces not looked at were dropped into the return queue: the next poll
    // (or dropping the receiver) gives them back.
    rx.poll(&mut Vec::new(), Duration::ZERO).unwrap();
    assert_eq!(
        rx.held(),
        0,
        "every piece went back, on success and on failure"
    );
    rep
}

#[zcnet_testkit::test]
fn device_pieces_are_read_back_and_verified_at_their_stream_offsets() {
    let rep = run(true, true, None).expect("verified");
    assert_eq!(rep.recv.bytes, total(true) + total(false));
    assert_eq!(rep.device_bytes, total(true));
    assert_eq!(rep.stats.zerocopy_bytes, total(true));
    assert_eq!(rep.stats.copied_bytes, total(false));
}

#[zcnet_testkit::test]
fn a_wrong_device_byte_is_found_with_its_stream_offset() {
    // Device offset 20,000 + 7 holds stream byte 4096 + 100 + 4000 + 7 (the 4th piece).
    let e = run(true, true, Some(20_007)).expect_err("corruption found");
    let m = e.to_string();
    assert!(m.contains(&(4096 + 100 + 4000 + 7).to_string()), "{m}");
}

#[zcnet_testkit::test]
fn verify_without_a_reader_is_an_error_not_a_silent_pass() {
    let e = run(true, false, None).expect_err("device bytes cannot be checked");
    assert!(
        matches!(e, Error::Io { .. }) && !e.is_bad_argument(),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot verify"), "{e}");
    // Without --verify, device bytes are counted and not read.
    let rep = run(false, false, None).expect("counted");
    assert_eq!(rep.device_bytes, total(true));
}
