//! The wire format: a frame is a 48-byte header (`Hdr`: magic, kind, the request's post id on
//! its stream and four operands whose meaning depends on the kind), then, for some kinds, a
//! payload or a message of the length the header gives.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

pub(super) const MAGIC: u32 = 0x5a43_4e58; // "ZCNX"

pub(super) const VERSION: u64 = 1;
pub(super) const HDR_LEN: usize = 48;
pub(super) const K_HELLO: u32 = 1;
pub(super) const K_HELLO_OK: u32 = 2;
pub(super) const K_WRITE: u32 = 3;
pub(super) const K_READ_REQ: u32 = 4;
pub(super) const K_READ_DATA: u32 = 5;
pub(super) const K_END: u32 = 6;
pub(super) const K_ACK: u32 = 7;
pub(super) const K_NOTIF: u32 = 8;
pub(super) const END_NOTIF: u64 = 1;
pub(super) const END_ABORTED: u64 = 2;

/// Longest agent name or notification accepted from a peer.
pub(super) const MAX_MSG: u64 = 16 << 20;

/// One frame header: kind, request id and four operands whose meaning depends on the kind.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hdr {
    pub(super) kind: u32,
    pub(super) post: u64,
    pub(super) a: u64,
    pub(super) b: u64,
    pub(super) c: u64,
    pub(super) d: u64,
}

impl Hdr {
    pub(super) fn new(kind: u32, post: u64) -> Hdr {
        Hdr {
            kind,
            post,
            ..Hdr::default()
        }
    }

    pub(super) fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.kind.to_le_bytes());
        for (i, v) in [self.post, self.a, self.b, self.c, self.d]
            .iter()
            .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub(super) fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())
    }

    pub(super) fn read_from(r: &mut impl Read) -> io::Result<Hdr> {
        let mut b = [0u8; HDR_LEN];
        r.read_exact(&mut b)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        if u32_at(0) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad frame magic",
            ));
        }
        Ok(Hdr {
            kind: u32_at(4),
            post: u64_at(8),
            a: u64_at(16),
            b: u64_at(24),
            c: u64_at(32),
            d: u64_at(40),
        })
    }
}

pub(super) fn status_to_wire(s: i32) -> u64 {
    s as i64 as u64
}

pub(super) fn status_from_wire(v: u64) -> i32 {
    v as i64 as i32
}

pub(super) fn read_msg(r: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    if len > MAX_MSG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message too long",
        ));
    }
    let mut v = vec![0u8; len as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

pub(super) fn discard(r: &mut impl Read, mut len: u64) -> io::Result<()> {
    let mut scratch = [0u8; 16 << 10];
    while len > 0 {
        let n = len.min(scratch.len() as u64) as usize;
        r.read_exact(&mut scratch[..n])?;
        len -= n as u64;
    }
    Ok(())
}

/// A thread reading a long payload sets its socket's receive mark (`SO_RCVLOWAT`) to this, or
/// to what is left when less, so that it is woken once this much arrived instead of for each
/// segment train (zcnet's receiver does the same: docs/perf.md, R1).
pub(super) const MARK: usize = 256 << 10;

/// A frame reader that fills a long payload straight from its socket.
pub(super) trait PayloadRead: Read {
    /// Fills `dst` with the next bytes of the stream.
    fn payload(&mut self, dst: &mut [u8]) -> io::Result<()>;
}

impl PayloadRead for BufReader<&TcpStream> {
    fn payload(&mut self, dst: &mut [u8]) -> io::Result<()> {
        if dst.len() < 2 * MARK {
            return self.read_exact(dst);
        }
        let n = self.buffer().len().min(dst.len());
        dst[..n].copy_from_slice(&self.buffer()[..n]);
        self.consume(n);
        recv_marked(self.get_ref().as_raw_fd(), &mut dst[n..])
    }
}

/// Fills `dst` straight from socket `fd`, the receive mark at [`MARK`] while at least twice
/// that is left, then 1 byte again. (The kernel wakes a reader once the bytes queued and not
/// yet copied reach the mark; a call that already copied some waits for the mark on top of
/// them. With twice the mark left, at least the mark is still to come whatever one call
/// copied, so the last bytes of a payload can never leave a reader asleep.)
pub(super) fn recv_marked(fd: RawFd, dst: &mut [u8]) -> io::Result<()> {
    let mut off = 0;
    let mut marked = false;
    let r = (|| {
        while off < dst.len() {
            let mark = dst.len() - off >= 2 * MARK;
            if mark != marked {
                zcnet::os::sock::set_recv_lowat(fd, if mark { MARK as u32 } else { 1 })?;
                marked = mark;
            }
            off += recv_some(fd, &mut dst[off..], 0)?;
        }
        Ok(())
    })();
    if marked {
        let _ = zcnet::os::sock::set_recv_lowat(fd, 1);
    }
    r
}

/// `recv(fd, buf, flags)`, again when a signal cut it short; at least one byte, the end of the
/// stream being `UnexpectedEof`.
pub(super) fn recv_some(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        match zcnet::os::sock::recv(fd, buf, flags) {
            Ok(0) if !buf.is_empty() => return Err(io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}
