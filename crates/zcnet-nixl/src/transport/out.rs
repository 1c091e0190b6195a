//! Where a connection's frames go (`Out`): a zcnet sender owning the sending side, or plain
//! buffered writes where zcnet cannot make one; and the slices over NIXL's registered memory
//! that frames are sent from and read into.

use std::io::{self, BufWriter, Write};
use std::net::TcpStream;
use std::sync::Arc;

use super::wire::{Hdr, HDR_LEN};
use super::{log, IO_BUF};

/// A slice over registered memory the C++ half checked lies inside a live registration.
///
/// # Safety
/// `addr..addr+len` is memory NIXL registered with this engine and keeps mapped while the
/// caller holds the lock that guards it (the request's `released` flag, or the region map).
pub(super) unsafe fn mem<'a>(addr: u64, len: u64) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len as usize) }
}

/// As [`mem`], writable.
///
/// # Safety
/// As [`mem`]; nothing else writes the range meanwhile (NIXL's contract for a transfer's
/// buffers).
pub(super) unsafe fn mem_mut<'a>(addr: u64, len: u64) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, len as usize) }
}

/// Where a connection's frames go: a zcnet sender (`auto`: zero copy from NIXL's memory until
/// the kernel says it copies, then copying sends) owning the connection's sending side, or, if
/// zcnet cannot make one here, plain buffered writes.
pub(super) enum Out {
    Zc(Box<Zc>),
    Plain(BufWriter<TcpStream>),
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Out::Zc(_) => "Out::Zc",
            Out::Plain(_) => "Out::Plain",
        })
    }
}

/// A zcnet sender and the buffer its small frames are gathered in: consecutive frames (a
/// request's WRITEs of small payloads and its END, an acknowledgement) leave in one send.
pub(super) struct Zc {
    pub(super) s: zcnet::Sender,
    /// The buffer being filled and how many bytes of it are used.
    batch: Option<(zcnet::TxBuf, usize)>,
}

impl Zc {
    /// Sends the gathered frames, if any.
    fn push(&mut self) -> io::Result<()> {
        match self.batch.take() {
            Some((b, n)) => self.s.send(b, n).map_err(zc_err),
            None => Ok(()),
        }
    }
}

/// Payloads up to this size travel in the sender's buffer with their header (one send, one
/// copy); larger ones are sent from NIXL's memory as they are (zcnet's `auto` threshold).
pub(super) const INLINE_MAX: u64 = zcnet::tx::AUTO_MIN_ZERO_COPY as u64;

pub(super) fn zc_err(e: zcnet::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl Out {
    /// A zcnet sender in `mode` on (a clone of) `stream`. `auto` falls back to plain writes
    /// where zcnet cannot make a sender; an explicit mode the kernel refuses is an error with
    /// the reason.
    pub(super) fn new(stream: &TcpStream, mode: zcnet::TxMode) -> io::Result<Out> {
        let cfg = zcnet::TxConfig::new(mode);
        let made = stream.try_clone().map_err(|e| e.to_string()).and_then(|s| {
            let region =
                zcnet::Region::new(zcnet::MemoryKind::Anonymous, zcnet::tx::region_len(&cfg))
                    .map_err(|e| e.to_string())?;
            zcnet::Sender::new(zcnet::Socket::from(s), region, &cfg).map_err(|e| e.to_string())
        });
        match made {
            Ok(s) => Ok(Out::Zc(Box::new(Zc { s, batch: None }))),
            Err(e) if mode == zcnet::TxMode::Auto => {
                log(&format!("no zcnet sender here ({e}): plain socket writes"));
                Ok(Out::Plain(BufWriter::with_capacity(
                    IO_BUF,
                    stream.try_clone()?,
                )))
            }
            Err(e) => Err(io::Error::other(format!("tx={mode}: {e}"))),
        }
    }

    /// What the kernel did with the bytes sent so far (`None`: plain writes, not counted).
    pub(super) fn stats(&self) -> Option<zcnet::TxStats> {
        match self {
            Out::Zc(z) => Some(z.s.stats()),
            Out::Plain(_) => None,
        }
    }

    /// A header and a payload small enough to go with it, gathered with the frames before and
    /// after it into one send where they fit a buffer.
    pub(super) fn frame(&mut self, h: &Hdr, payload: &[u8]) -> io::Result<()> {
        match self {
            Out::Plain(w) => {
                h.write_to(w)?;
                w.write_all(payload)
            }
            Out::Zc(z) => {
                let n = HDR_LEN + payload.len();
                let room = |z: &mut Zc| match &mut z.batch {
                    Some((b, used)) => b.capacity() - *used >= n,
                    None => false,
                };
                if !room(z) {
                    z.push()?;
                    z.batch = Some((z.s.buffer().map_err(zc_err)?, 0));
                }
                let Some((b, used)) = &mut z.batch else {
                    return Err(io::Error::other("no sender buffer"));
                };
                let Some(m) = b.bytes_mut().filter(|m| m.len() >= *used + n) else {
                    return Err(io::Error::other("a frame does not fit the sender's buffer"));
                };
                m[*used..*used + HDR_LEN].copy_from_slice(&h.encode());
                m[*used + HDR_LEN..*used + n].copy_from_slice(payload);
                *used += n;
                Ok(())
            }
        }
    }

    /// `len` bytes that `produce(offset, dst)` writes into `dst`, sent through buffers of the
    /// sender's own (each sent while the next is produced), or through a host chunk of at most
    /// `plain_chunk` bytes for plain writes: nothing is lent to the kernel, so whatever the
    /// bytes were made from is free again once this returns.
    pub(super) fn produced(
        &mut self,
        len: u64,
        plain_chunk: u64,
        mut produce: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut done = 0u64;
        match self {
            Out::Plain(w) => {
                let mut host = vec![0u8; len.min(plain_chunk) as usize];
                while done < len {
                    let n = (len - done).min(plain_chunk) as usize;
                    produce(done, &mut host[..n])?;
                    w.write_all(&host[..n])?;
                    done += n as u64;
                }
            }
            Out::Zc(z) => {
                z.push()?;
                while done < len {
                    let mut b = z.s.buffer().map_err(zc_err)?;
                    let Some(m) = b.bytes_mut().filter(|m| !m.is_empty()) else {
                        return Err(io::Error::other("the sender's buffers are not host memory"));
                    };
                    let n = (len - done).min(m.len() as u64) as usize;
                    produce(done, &mut m[..n])?;
                    z.s.send(b, n).map_err(zc_err)?;
                    done += n as u64;
                }
            }
        }
        Ok(())
    }

    /// `n` zero bytes (the rest of a descriptor whose request was released mid-way).
    pub(super) fn zeros(&mut self, n: u64) -> io::Result<()> {
        self.produced(n, 16 << 10, |_, dst| {
            dst.fill(0);
            Ok(())
        })
    }

    /// Bytes sent from where they lie: NIXL's memory or an owned message.
    pub(super) fn lent(&mut self, buf: zcnet::engine::ForeignBuf) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.write_all(buf.slice(0, buf.len()).unwrap_or(&[])),
            Out::Zc(z) => {
                z.push()?;
                let len = buf.len();
                z.s.send_lent(Arc::new(buf), 0, len).map_err(zc_err)
            }
        }
    }

    /// Everything queued is on the wire and, for zcnet, the kernel is done with every byte
    /// (each zero-copy notification arrived): lent memory is NIXL's again.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            Out::Zc(z) => {
                z.push()?;
                z.s.flush().map_err(zc_err)
            }
        }
    }
}
