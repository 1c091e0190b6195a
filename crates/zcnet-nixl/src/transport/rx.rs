//! The initiator's receiving side of a stream (READ data and acknowledgements), shared by the
//! stream's reader thread and any thread that checks a request on it.
//!
//! The reader thread sleeps in `poll()` until the socket is readable, then takes the receive
//! state and handles every frame there is, reading a frame's rest as it arrives. A thread
//! checking a request (NIXL's `checkXfer`, which a user after low latency calls in a loop)
//! first handles, without blocking, the frames that are wholly there: an acknowledgement that
//! arrived is seen at once instead of after the reader thread's wake-up. Either may take the
//! state; what one leaves (a frame not yet whole) the other finishes, and the socket stays
//! readable, so the reader thread's `poll()` returns, until it is.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use super::wire::{recv_marked, recv_some, Hdr, PayloadRead, HDR_LEN, K_READ_DATA, MARK};
use super::IO_BUF;

/// Bytes read from the socket and not yet handled.
#[derive(Debug)]
pub(super) struct Rx {
    fd: RawFd,
    /// Keeps `fd` open.
    _stream: TcpStream,
    buf: Box<[u8]>,
    lo: usize,
    hi: usize,
}

/// How a frame's bytes may be waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// The reader thread: a frame begun is read to its end.
    Block,
    /// A checking thread: only frames wholly received are handled.
    Never,
}

impl Rx {
    pub(super) fn new(stream: TcpStream) -> Rx {
        Rx {
            fd: stream.as_raw_fd(),
            _stream: stream,
            buf: vec![0u8; IO_BUF].into_boxed_slice(),
            lo: 0,
            hi: 0,
        }
    }

    fn avail(&self) -> usize {
        self.hi - self.lo
    }

    /// Reads what the socket has (`dontwait`) or at least one byte into the buffer's free
    /// end; `Ok(false)`: nothing there now. The end of the stream is an error.
    fn fill(&mut self, dontwait: bool) -> io::Result<bool> {
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
        } else if self.hi == self.buf.len() {
            self.buf.copy_within(self.lo..self.hi, 0);
            (self.lo, self.hi) = (0, self.hi - self.lo);
        }
        if self.hi == self.buf.len() {
            return Ok(false); // full (not reached: frames larger than it are read in place)
        }
        let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
        match recv_some(self.fd, &mut self.buf[self.hi..], flags) {
            Ok(n) => {
                self.hi += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The next frame's header, consumed, if `wait` allows handling the frame now: for
    /// [`Wait::Never`] only a frame whose payload is here too (so handling it never blocks).
    pub(super) fn next(&mut self, wait: Wait) -> io::Result<Option<Hdr>> {
        if self.avail() < HDR_LEN && !self.fill(true)? && self.avail() == 0 {
            return Ok(None);
        }
        while self.avail() < HDR_LEN {
            if wait == Wait::Never {
                if !self.fill(true)? {
                    return Ok(None);
                }
            } else {
                self.fill(false)?;
            }
        }
        let h = Hdr::read_from(&mut &self.buf[self.lo..self.lo + HDR_LEN])?;
        let payload = if h.kind == K_READ_DATA { h.b } else { 0 };
        if wait == Wait::Never {
            let whole = HDR_LEN as u64 + payload;
            while (self.avail() as u64) < whole {
                if whole > self.buf.len() as u64 || !self.fill(true)? {
                    return Ok(None);
                }
            }
        }
        self.lo += HDR_LEN;
        Ok(Some(h))
    }
}

/// Waits until `stream` is readable (or closed): the reader thread's wait between rounds.
pub(super) fn wait_readable(stream: &TcpStream) -> io::Result<()> {
    let ev = libc::POLLIN | libc::POLLRDHUP;
    while zcnet::os::sock::poll_one(stream.as_raw_fd(), ev, -1)? == 0 {}
    Ok(())
}

/// A frame's payload: from the buffer, then (the reader thread) straight from the socket.
impl Read for Rx {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.avail() == 0 {
            if out.len() >= self.buf.len() {
                // Large reads go straight into their destination.
                return recv_some(self.fd, out, 0);
            }
            self.fill(false)?;
        }
        let n = out.len().min(self.avail());
        out[..n].copy_from_slice(&self.buf[self.lo..self.lo + n]);
        self.lo += n;
        Ok(n)
    }
}

impl PayloadRead for Rx {
    fn payload(&mut self, dst: &mut [u8]) -> io::Result<()> {
        if dst.len() < 2 * MARK {
            return self.read_exact(dst);
        }
        let n = self.avail().min(dst.len());
        dst[..n].copy_from_slice(&self.buf[self.lo..self.lo + n]);
        self.lo += n;
        recv_marked(self.fd, &mut dst[n..])
    }
}
