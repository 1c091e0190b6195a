//! One request/reply exchange with a generic netlink family.
//!
//! [`ReplyCollector`] is the pure part: fed the datagrams the kernel sends back, it checks
//! sequence numbers, gathers the data messages of a `do` or a multipart dump, and turns
//! `NLMSG_ERROR`/`NLMSG_DONE` into the end of the exchange or a [`KernelError`] (with the
//! offending attribute named from the request). `GenlConn` adds the socket.

use zcnet_sys::netlink::{NlSocket, NETLINK_GENERIC};

use crate::error::{Error, KernelError, Result};
use crate::wire::{
    attr_path_at, messages, parse_done, parse_error, split_genl, Extack, MsgBuilder, GENL_HDRLEN,
    NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};

/// Receive buffer size: dump datagrams are at most ~32 KiB (net/netlink/af_netlink.c).
const RECV_BUF: usize = 64 * 1024;
/// Dumps the kernel marks inconsistent (`NLM_F_DUMP_INTR`) are retried this often.
const DUMP_RETRIES: usize = 3;
/// No exchange lasts longer than this, however the datagrams trickle in (each receive also
/// times out after 5 s on its own).
pub const EXCHANGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// A generic netlink operation, for building requests and naming errors.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    /// The name used in the family's spec, e.g. `"dev-get"`.
    pub name: &'static str,
    /// The command number.
    pub cmd: u8,
    /// The first kernel that has it, e.g. `"Linux 6.5 or newer"`.
    pub needs: &'static str,
    /// Names an attribute from its path of types (`[1]` → `"ifindex"`); used to say which
    /// attribute the kernel's extended ACK points at.
    pub attr_name: fn(&[u16]) -> Option<&'static str>,
}

/// One data message of a reply: the generic netlink command and the attribute bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// `genlmsghdr.cmd`.
    pub cmd: u8,
    /// The attributes after the generic netlink header.
    pub attrs: Vec<u8>,
}

/// Collects the kernel's answer to one request (pure: no I/O).
#[derive(Debug)]
pub struct ReplyCollector<'r> {
    op: Op,
    target: &'r str,
    request: &'r [u8],
    seq: u32,
    family: u16,
    dump: bool,
    replies: Vec<Reply>,
    interrupted: bool,
}

impl<'r> ReplyCollector<'r> {
    /// Starts collecting replies to `request` (a message built with sequence number `seq` for
    /// family id `family`); `dump` selects the end marker (`NLMSG_DONE` rather than an ACK).
    pub fn new(
        op: Op,
        target: &'r str,
        request: &'r [u8],
        seq: u32,
        family: u16,
        dump: bool,
    ) -> Self {
        ReplyCollector {
            op,
            target,
            request,
            seq,
            family,
            dump,
            replies: Vec::new(),
            interrupted: false,
        }
    }

    /// Feeds one received datagram. Returns `Ok(true)` when the exchange is complete, `Ok(false)`
    /// when more datagrams are expected. Messages with another sequence number (late answers
    /// to an earlier, timed-out request) are skipped.
    pub fn feed(&mut self, datagram: &[u8]) -> Result<bool> {
        for m in messages(datagram) {
            let m = m.map_err(|e| e.in_context(self.op.name))?;
            if m.header.seq != self.seq {
                continue;
            }
            if m.header.flags & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match m.header.kind {
                NLMSG_NOOP => {}
                NLMSG_ERROR => {
                    let e = parse_error(m.header.flags, m.payload)
                        .map_err(|e| e.in_context(self.op.name))?;
                    if e.errno != 0 {
                        return Err(self.kernel_error(e.errno, e.extack));
                    }
                    return Ok(true);
                }
                NLMSG_DONE => {
                    let (errno, extack) = parse_done(m.header.flags, m.payload)
                        .map_err(|e| e.in_context(self.op.name))?;
                    if errno != 0 {
                        return Err(self.kernel_error(errno, extack));
                    }
                    return Ok(true);
                }
                NLMSG_OVERRUN => {
                    return Err(Error::Malformed {
                        context: self.op.name.into(),
                        what: "NLMSG_OVERRUN: the kernel lost data".into(),
                    })
                }
                k if k == self.family => {
                    let (hdr, attrs) =
                        split_genl(m.payload).map_err(|e| e.in_context(self.op.name))?;
                    self.replies.push(Reply {
                        cmd: hdr.cmd,
                        attrs: attrs.to_vec(),
                    });
                }
                k => {
                    return Err(Error::Malformed {
                        context: self.op.name.into(),
                        what: format!("message type {k}, expected family {}", self.family),
                    })
                }
            }
        }
        Ok(false)
    }

    /// Whether a message carried `NLM_F_DUMP_INTR` (the dump should be repeated).
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// Whether this collects a dump.
    pub fn is_dump(&self) -> bool {
        self.dump
    }

    /// The data messages gathered so far.
    pub fn into_replies(self) -> Vec<Reply> {
        self.replies
    }

    fn name_path(&self, path: &[u16]) -> String {
        match (self.op.attr_name)(path) {
            Some(n) => n.to_string(),
            None => {
                let p: Vec<String> = path.iter().map(u16::to_string).collect();
                format!("type {}", p.join("."))
            }
        }
    }

    fn path_at(&self, offset: u32) -> Option<Vec<u16>> {
        let start = NLMSG_HDRLEN + GENL_HDRLEN;
        attr_path_at(self.request.get(start..)?, start, offset as usize)
    }

    /// Builds the error, naming the attributes the extended ACK points at.
    pub fn kernel_error(&self, errno: i32, extack: Extack) -> Error {
        let bad_attr = extack
            .bad_attr_offset
            .and_then(|o| self.path_at(o))
            .map(|p| self.name_path(&p));
        let missing_attr = extack.missing_type.map(|t| {
            let mut path = extack
                .missing_nest_offset
                .and_then(|o| self.path_at(o))
                .unwrap_or_default();
            path.push(u16::try_from(t).unwrap_or(u16::MAX));
            self.name_path(&path)
        });
        Error::from_kernel(KernelError {
            op: self.op.name,
            target: self.target.to_string(),
            errno,
            extack,
            bad_attr,
            missing_attr,
        })
    }
}

/// A generic netlink socket with its own sequence numbers and receive buffer.
#[derive(Debug)]
pub(crate) struct GenlConn {
    sock: NlSocket,
    seq: u32,
    buf: Vec<u8>,
}

/// Sends `req` on `sock` and feeds each datagram that comes back to `feed` until it says the
/// answer is complete (the collectors of generic netlink and rtnetlink). No exchange lasts
/// longer than [`EXCHANGE_DEADLINE`], however the datagrams trickle in; `ctx` names the
/// request in errors.
pub(crate) fn send_and_collect(
    sock: &NlSocket,
    buf: &mut [u8],
    req: &[u8],
    ctx: &dyn Fn() -> String,
    feed: impl FnMut(&[u8]) -> Result<bool>,
) -> Result<()> {
    sock.send(req).map_err(|e| Error::io(ctx(), e))?;
    let until = std::time::Instant::now() + EXCHANGE_DEADLINE;
    collect_until(until, |b| sock.recv(b), buf, ctx, feed)
}

/// The receiving half of this module's request-and-answer exchanges, for one whose request
/// was sent otherwise (a dump of rtnetlink made outside this crate): feeds each datagram `recv` gets
/// to `feed` until it says the answer is complete, and fails with `TimedOut` once `until`
/// has passed, however the datagrams trickle in (`recv` is a socket's, with its own receive
/// timeout, [`NlSocket::recv`]).
pub fn collect_until(
    until: std::time::Instant,
    mut recv: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    buf: &mut [u8],
    ctx: &dyn Fn() -> String,
    mut feed: impl FnMut(&[u8]) -> Result<bool>,
) -> Result<()> {
    loop {
        if std::time::Instant::now() > until {
            let e = std::io::Error::from(std::io::ErrorKind::TimedOut);
            return Err(Error::io(ctx(), e));
        }
        let n = match recv(buf) {
            Ok(n) => n,
            // The socket's receive timeout (5 s) passed with no answer: the kernel may still
            // be working on it (a ring change waits for the rtnl lock), and a request given up
            // on may be applied anyway. Wait on until the exchange's own deadline.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(Error::io(ctx(), e)),
        };
        if feed(&buf[..n])? {
            return Ok(());
        }
    }
}

impl GenlConn {
    pub(crate) fn open() -> Result<GenlConn> {
        let sock = NlSocket::open(NETLINK_GENERIC)
            .map_err(|e| Error::io("opening a generic netlink socket", e))?;
        Ok(GenlConn {
            sock,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    /// Sends one request to `family` and collects the answer. `build` adds the attributes.
    pub(crate) fn exchange(
        &mut self,
        family: u16,
        version: u8,
        op: Op,
        target: &str,
        dump: bool,
        build: &dyn Fn(&mut MsgBuilder),
    ) -> Result<Vec<Reply>> {
        for _ in 0..DUMP_RETRIES {
            self.seq = self.seq.wrapping_add(1);
            let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
            let mut b = MsgBuilder::genl(family, flags, self.seq, op.cmd, version);
            build(&mut b);
            let req = b.finish()?;
            let ctx = || {
                if target.is_empty() {
                    op.name.to_string()
                } else {
                    format!("{} {target}", op.name)
                }
            };
            let mut col = ReplyCollector::new(op, target, &req, self.seq, family, dump);
            if let Err(e) = send_and_collect(&self.sock, &mut self.buf, &req, &ctx, |d| col.feed(d))
            {
                if dump {
                    // A dump left part-way still runs in the kernel on this socket, and the
                    // next dump on it would be refused (EBUSY from netlink_dump_start): the
                    // next request gets a fresh socket.
                    if let Ok(sock) = NlSocket::open(NETLINK_GENERIC) {
                        self.sock = sock;
                    }
                }
                return Err(e);
            }
            if !col.interrupted() {
                return Ok(col.into_replies());
            }
        }
        Err(Error::Malformed {
            context: op.name.into(),
            what: format!("the dump was interrupted {DUMP_RETRIES} times (NLM_F_DUMP_INTR)"),
        })
    }

    /// The underlying socket (for bindings that live as long as it).
    pub(crate) fn into_socket(self) -> NlSocket {
        self.sock
    }
}
