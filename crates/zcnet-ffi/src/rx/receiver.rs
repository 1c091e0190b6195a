//! The receiver behind the handle: the library's [`Receiver`], its listening socket, the
//! buffers lent to the caller and the events its array had no room for.

use super::{
    rx_config, stats, zcnet_rx_config, zcnet_rx_event, zcnet_rx_stats, zcnet_stream_report,
    ZCNET_RX_DATA, ZCNET_RX_EOF, ZCNET_RX_FAILED,
};
use crate::error::{invalid, status_of, Failure, Result};
use crate::region::zcnet_region;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::thread::ThreadId;
use std::time::Duration;
use zcnet::rx::DeviceSlice;
use zcnet::{ConnId, MemoryKind, Receiver, Region, RxBuf, RxEvent, RxMode};

/// Copies the bytes of device range `d` out of `area`, the memory the receiver bound (whose
/// dma-buf offset 0 is its start): a udmabuf's host pages, or CUDA memory.
fn read_area(area: Option<&mut Region>, d: &DeviceSlice, out: &mut [u8]) -> zcnet::Result<()> {
    match area {
        Some(r) => r.read_back(d.offset as usize, out),
        None => Err(zcnet::Error::invalid_input(
            "the bytes are in device memory the caller did not give: make the receiver with zcnet_receiver_new_in and a \"udmabuf\" or \"cuda:N\" region to read them back",
        )),
    }
}

/// The refusal of a buffer id the caller does not hold.
fn not_lent(buf: u64) -> crate::error::Failure {
    invalid(format!("buffer {buf} is not lent to the caller"))
}

fn one_line(s: String) -> CString {
    CString::new(s.replace(['\0', '\n'], " ")).unwrap_or_default()
}

/// A receiver with its listening socket and the buffers lent to the caller. It belongs to the
/// thread that made it: calls from another thread fail with `ZCNET_E_INVALID`.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct zcnet_receiver {
    /// `zcnet_receiver_copy_to_device`: the copier of this receiver's buffers (made at the first
    /// call). First: dropping it waits for its copies before the receiver goes.
    fill: Option<zcnet::gpu::DeviceFill>,
    rx: Receiver,
    /// `zcnet_receiver_new_in`: the memory whose dma-buf the receiver bound (a udmabuf, CUDA
    /// memory). After `rx`: the binding goes before the memory.
    area: Option<Region>,
    thread: ThreadId,
    listener: Option<TcpListener>,
    /// Events polled and not yet handed to the caller (whose array was full).
    pending: VecDeque<RxEvent>,
    scratch: Vec<RxEvent>,
    /// Buffers lent to the caller, by the id in their event.
    held: HashMap<u64, RxBuf>,
    next_buf: u64,
    /// Messages of failed connections, until closed.
    failures: HashMap<u64, CString>,
    fallbacks: CString,
}

impl zcnet_receiver {
    pub(crate) fn new(cfg: Option<&zcnet_rx_config>) -> Result<zcnet_receiver> {
        Self::with(Receiver::new(&rx_config(cfg)?)?, None)
    }

    /// A receiver whose NIC queue writes into `region`'s memory: its dma-buf bound by devmem
    /// or registered as the zcrx area. The region is taken only when the receiver was made.
    pub(crate) fn new_in(
        cfg: Option<&zcnet_rx_config>,
        region: &mut zcnet_region,
    ) -> Result<zcnet_receiver> {
        let mut c = rx_config(cfg)?;
        if !matches!(c.mode, RxMode::Zcrx | RxMode::Devmem) {
            return Err(invalid(format!(
                "cfg->mode is {}: a receiver into a region binds its dma-buf to a NIC queue, which ZCNET_RX_ZCRX and ZCNET_RX_DEVMEM do; use zcnet_receiver_new for the others",
                c.mode
            )));
        }
        if c.iface.is_none() {
            return Err(invalid(
                "cfg->iface is empty: name the NIC whose queue the flows are steered to (zcnet nic setup)",
            ));
        }
        if !matches!(region.kind(), MemoryKind::Udmabuf | MemoryKind::Cuda(_)) {
            return Err(invalid(format!(
                "region is {} memory, which has no dma-buf to bind: make it with zcnet_region_new(\"udmabuf\", ...) (host memory through /dev/udmabuf) or \"cuda:N\"",
                region.kind().name()
            )));
        }
        let mem = region.memory_mut()?;
        c.dmabuf = Some(mem.dmabuf()?);
        c.area_len = mem.len();
        let rx = Receiver::new(&c)?;
        Self::with(rx, Some(region.take()?))
    }

    fn with(rx: Receiver, area: Option<Region>) -> Result<zcnet_receiver> {
        let fallbacks = rx
            .fallbacks()
            .iter()
            .map(|f| f.render(&crate::words::C))
            .collect::<Vec<_>>();
        Ok(zcnet_receiver {
            fallbacks: one_line(fallbacks.join("; ")),
            rx,
            area,
            thread: std::thread::current().id(),
            listener: None,
            pending: VecDeque::new(),
            scratch: Vec::new(),
            held: HashMap::new(),
            next_buf: 1,
            failures: HashMap::new(),
            fill: None,
        })
    }

    /// The receiver, if this is the thread that made it.
    pub(super) fn on_thread(&mut self) -> Result<&mut Self> {
        if std::thread::current().id() != self.thread {
            return Err(invalid(
                "the receiver is used on another thread than the one that made it (a receiver stays on its thread)",
            ));
        }
        Ok(self)
    }

    /// The mode in use (for auto, the one it chose).
    pub(super) fn mode(&self) -> zcnet::RxMode {
        self.rx.mode()
    }

    /// The modes auto tried and the kernel refused, in one line.
    pub(super) fn fallbacks(&self) -> &std::ffi::CStr {
        &self.fallbacks
    }

    pub(super) fn listen(&mut self, addr: &str) -> Result<()> {
        if self.listener.is_some() {
            return Err(invalid("the receiver is already listening"));
        }
        let addr = crate::tx::parse_addr(addr)?;
        self.listener = Some(zcnet::net::listen_tcp(addr)?);
        Ok(())
    }

    fn listener(&self) -> Result<&TcpListener> {
        self.listener
            .as_ref()
            .ok_or_else(|| invalid("the receiver is not listening: call zcnet_receiver_listen"))
    }

    pub(super) fn local_port(&self) -> Result<u16> {
        let at = self.listener()?.local_addr();
        Ok(at.map_err(|e| zcnet::Error::io("local_addr", e))?.port())
    }

    fn accept_stream(&self) -> Result<std::net::TcpStream> {
        let (s, _) = self
            .listener()?
            .accept()
            .map_err(|e| zcnet::Error::io("accept", e))?;
        Ok(s)
    }

    pub(super) fn accept(&mut self) -> Result<u64> {
        let s = self.accept_stream()?;
        Ok(self.rx.add(s)?.0)
    }

    /// The C event for `ev`; a data buffer is kept as lent, a failure's message until close.
    pub(crate) fn event(&mut self, ev: RxEvent) -> zcnet_rx_event {
        let mut out = zcnet_rx_event {
            kind: ZCNET_RX_EOF,
            ..Default::default()
        };
        match ev {
            RxEvent::Data(b) => {
                let id = self.next_buf;
                self.next_buf += 1;
                let dev = b.device();
                out.kind = ZCNET_RX_DATA;
                out.conn = b.conn().0;
                out.buf = id;
                out.data = self.rx.bytes(&b).map_or(std::ptr::null(), <[u8]>::as_ptr);
                out.len = b.len() as u64;
                out.dmabuf_offset = dev.map_or(0, |d| d.offset);
                out.dmabuf_id = dev.map_or(0, |d| d.dmabuf_id);
                out.copied = u32::from(b.copied());
                self.held.insert(id, b);
            }
            RxEvent::Eof(c) => out.conn = c.0,
            RxEvent::Failed(c, e) => {
                let msg = one_line(e.to_string());
                out.kind = ZCNET_RX_FAILED;
                out.conn = c.0;
                out.status = status_of(&e);
                out.error = msg.as_ptr();
                self.failures.insert(c.0, msg);
            }
        }
        out
    }

    pub(crate) fn poll(
        &mut self,
        events: &mut [MaybeUninit<zcnet_rx_event>],
        timeout_ms: u32,
    ) -> Result<usize> {
        if events.is_empty() {
            return Err(invalid("cap is 0"));
        }
        if self.pending.is_empty() {
            let r = self
                .rx
                .poll(&mut self.scratch, Duration::from_millis(timeout_ms.into()));
            self.pending.extend(self.scratch.drain(..));
            r?;
        }
        let mut n = 0;
        while n < events.len() {
            let Some(ev) = self.pending.pop_front() else {
                break;
            };
            events[n].write(self.event(ev));
            n += 1;
        }
        Ok(n)
    }

    pub(super) fn release(&mut self, buf: u64) -> Result<()> {
        self.held
            .remove(&buf)
            .map(drop)
            .ok_or_else(|| not_lent(buf))
    }

    /// Starts copying lent buffer `buf` into `region` at `offset`. Every check and wait comes
    /// before the buffer is taken: on those errors it stays lent; once taken, it goes back to
    /// the kernel whatever happens to its copy.
    pub(super) fn copy_to_device(
        &mut self,
        buf: u64,
        region: &zcnet::Region,
        offset: u64,
    ) -> Result<()> {
        let (Some(ordinal), Some(addr)) = (region.device_ordinal(), region.device_addr()) else {
            return Err(invalid(
                "region is host memory: copies to the device need a \"cuda\" or \"cuda:N\" region",
            ));
        };
        if !self.held.contains_key(&buf) {
            return Err(not_lent(buf));
        }
        if self.fill.as_ref().is_some_and(|f| f.ordinal() != ordinal) {
            // Another device: the old copier finishes its copies first.
            self.device_wait()?;
            self.fill = None;
        }
        let fill = match &mut self.fill {
            Some(f) => f,
            empty => empty.insert(zcnet::gpu::DeviceFill::new(
                &self.rx,
                ordinal,
                zcnet::gpu::fill::DEFAULT_MAX_IN_FLIGHT,
            )?),
        };
        if fill.target() != Some(addr) {
            // Another region: the copies into the one before finish first. Their failure is
            // theirs, said as such (this buffer stays lent).
            fill.wait().map_err(|e| {
                Failure::Within(
                    "a copy started before (into another region) failed, so this one was not started".into(),
                    e,
                )
            })?;
            fill.set_target(Some(region))?;
        }
        let b = self.held.remove(&buf).ok_or_else(|| not_lent(buf))?;
        Ok(fill.copy(&mut self.rx, b, offset)?)
    }

    /// Waits for every copy started, then lets go of the target (its memory may be freed).
    pub(super) fn device_wait(&mut self) -> Result<()> {
        let Some(f) = self.fill.as_mut() else {
            return Ok(());
        };
        let r = f.wait();
        if r.is_ok() {
            f.set_target(None)?;
        }
        Ok(r?)
    }

    /// Queues `ev` as if a poll had received it (for the tests).
    #[cfg(test)]
    pub(crate) fn queue(&mut self, ev: RxEvent) {
        self.pending.push_back(ev);
    }

    /// How many connections' failure messages are kept (for the tests).
    #[cfg(test)]
    pub(crate) fn failures_kept(&self) -> usize {
        self.failures.len()
    }

    pub(crate) fn close(&mut self, conn: u64) {
        self.rx.close(ConnId(conn));
        // Its events not polled yet go too (their buffers back to the receiver): a failure
        // polled after the close would keep its message until the receiver is freed.
        self.pending.retain(|ev| match ev {
            RxEvent::Data(b) => b.conn().0 != conn,
            RxEvent::Eof(c) | RxEvent::Failed(c, _) => c.0 != conn,
        });
        self.failures.remove(&conn);
    }

    /// Copies the first `out.len()` bytes of lent buffer `buf` into `out`: host bytes as they
    /// are, device bytes read back from the memory the receiver bound.
    pub(super) fn read(&mut self, buf: u64, out: &mut [u8]) -> Result<()> {
        let b = self.held.get(&buf).ok_or_else(|| not_lent(buf))?;
        if out.len() > b.len() {
            return Err(invalid(format!(
                "len {} is more than buffer {buf}'s {} B",
                out.len(),
                b.len()
            )));
        }
        if let Some(bytes) = self.rx.bytes(b) {
            out.copy_from_slice(&bytes[..out.len()]);
            return Ok(());
        }
        let d = b
            .device()
            .ok_or_else(|| invalid(format!("buffer {buf} has no bytes to read")))?;
        Ok(read_area(self.area.as_mut(), &d, out)?)
    }

    pub(super) fn stats(&self) -> zcnet_rx_stats {
        stats(&self.rx.stats(), self.held.len())
    }

    pub(super) fn recv_stream(&mut self, verify: bool, seed: u64) -> Result<zcnet_stream_report> {
        if self.rx.connections() != 0 || !self.pending.is_empty() {
            return Err(invalid(
                "the receiver has other connections: zcnet_receiver_recv_stream needs it to itself",
            ));
        }
        let s = self.accept_stream()?;
        let pattern = verify.then(|| zcnet::Pattern::new(seed));
        // Device buffers are checked by reading them back from the memory the receiver bound.
        let bound = self.area.is_some();
        let area = RefCell::new(self.area.as_mut());
        let read =
            |d: &DeviceSlice, out: &mut [u8]| read_area(area.borrow_mut().as_deref_mut(), d, out);
        let reader: Option<zcnet::rx::DeviceReader<'_>> = bound.then_some(&read as _);
        let rep = zcnet::rx::receive_stream_reading_device(&mut self.rx, s, pattern, None, reader)?;
        Ok(zcnet_stream_report {
            bytes: rep.recv.bytes,
            reads: rep.recv.reads,
            device_bytes: rep.device_bytes,
            seconds: rep.recv.seconds,
            stats: stats(&rep.stats, self.held.len()),
        })
    }
}
