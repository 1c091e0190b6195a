//! Where `send`'s bytes come from and `recv`'s go: standard input (or the seeded pattern, or
//! nothing), standard output, and the listener `recv` announces; every wait on them ends at
//! SIGINT/SIGTERM. A leaf: it imports no command module.

use crate::args::SendArgs;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use zcnet::{net, Error, Pattern, TxBuf};
use zcnet_tools::sendloop::Fill;

/// Where `zcnet send` takes each send's bytes from.
pub(crate) enum Source {
    /// Standard input, netcat-style, on a stream: each send carries what one read brought
    /// (a line typed is sent at once, not held until a buffer fills).
    Stdin(File),
    /// Standard input as datagrams (`--udp`): each fills a whole buffer, the last one short.
    StdinDatagrams(File),
    /// The seeded pattern, written at each send's stream offset (`--verify`).
    Pattern(Pattern),
    /// Nothing: the buffers go as they are (zero-filled; `--bytes`/`--duration` alone).
    Zeros,
}

impl Source {
    /// What `send`'s flags ask for: the pattern with `--verify`, stdin without `--bytes` or
    /// `--duration`, else nothing written.
    pub(crate) fn for_args(a: &SendArgs) -> Result<Source, Error> {
        Ok(if a.verify {
            Source::Pattern(Pattern::new(a.seed))
        } else if a.duration.is_none() && a.bytes.is_none() {
            if a.udp {
                Source::StdinDatagrams(stdin_file()?)
            } else {
                Source::Stdin(stdin_file()?)
            }
        } else {
            Source::Zeros
        })
    }

    /// Writes the payload at stream `offset` into `payload`; returns its bytes (fewer at the
    /// end of stdin, 0 there).
    pub(crate) fn fill_slice(&mut self, offset: u64, payload: &mut [u8]) -> Result<usize, Error> {
        match self {
            Source::Zeros => Ok(payload.len()),
            Source::Pattern(p) => {
                p.fill(offset, payload);
                Ok(payload.len())
            }
            Source::Stdin(f) => read_some(f, payload),
            Source::StdinDatagrams(f) => read_full(f, payload),
        }
    }
}

/// `send`'s buffers: see [`Source`]; with nothing to write, a buffer goes as it is.
impl Fill for Source {
    #[inline]
    fn fill(&mut self, buf: &mut TxBuf, offset: u64, want: usize) -> Result<usize, Error> {
        if let Source::Zeros = self {
            return Ok(want);
        }
        let bytes = buf.bytes_mut().ok_or(Error::NotCpuAccessible)?;
        self.fill_slice(offset, &mut bytes[..want])
    }
}

/// Listens on `addr` and says where on stderr (the port, when 0 was asked for).
pub fn listen_announced(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, Error> {
    let listener = net::listen_tcp(addr)?;
    let at = listener
        .local_addr()
        .map_err(|e| Error::io("local_addr", e))?;
    zcnet_tools::eoutln!("zcnet recv: listening on {}", net::AddrText(at));
    Ok(listener)
}

/// Standard input as a file of its own (a duplicate of fd 0): unbuffered, so that a wait for it
/// in `poll` (which sees the descriptor, not a buffer) is never a wait for data already read.
pub(crate) fn stdin_file() -> Result<File, Error> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("duplicating stdin", e))?;
    Ok(File::from(fd))
}

/// Fills `buf` from `f` (stdin) up to its end: [`read_some`] until it is full or the input
/// ends.
pub(crate) fn read_full(f: &mut File, buf: &mut [u8]) -> Result<usize, Error> {
    let mut n = 0;
    while n < buf.len() {
        match read_some(f, &mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// One read of `f` (stdin) into `buf`: what is there once there is something (0 at its end).
/// The read first waits in `poll` with the interrupt pipe, so SIGINT/SIGTERM ends a wait for
/// input that may never come ([`Error::Interrupted`], exit 130) — a blocking read is restarted
/// by the standard library or, when the signal lands on this thread, fails with a bare
/// `EINTR`.
pub(crate) fn read_some(f: &mut File, buf: &mut [u8]) -> Result<usize, Error> {
    if buf.is_empty() {
        return Ok(0);
    }
    loop {
        zcnet_tools::interrupt::wait_readable(&*f)?;
        match f.read(buf) {
            Ok(k) => return Ok(k),
            // A signal that is not SIGINT/SIGTERM: wait again.
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    && !zcnet_tools::interrupt::interrupted() => {}
            Err(e) => return Err(Error::io("reading stdin", e)),
        }
    }
}

/// Standard output for the received stream: a duplicate of fd 1 written without buffering,
/// each write first waiting in `poll` with the interrupt pipe. A reader that stops reading
/// (`zcnet recv | sleep 1000`) would otherwise hold the command in a `write` that the standard
/// library restarts after every signal.
pub(crate) struct Stdout(File);

impl Stdout {
    pub(crate) fn open() -> Result<Stdout, Error> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("duplicating stdout", e))?;
        Ok(Stdout(File::from(fd)))
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match zcnet_tools::interrupt::wait_writable(&self.0) {
            Ok(()) => self.0.write(buf),
            Err(Error::Io { source, .. }) => Err(source),
            Err(e) => Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                e.to_string(),
            )),
        }
    }

    /// As the default, but an interrupt ends it (the default restarts after `Interrupted`).
    fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e)
                    if e.kind() == std::io::ErrorKind::Interrupted
                        && !zcnet_tools::interrupt::interrupted() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `recv --verify` where no payload arrived: nothing was checked, which is not a pass.
pub(crate) fn nothing_to_verify() -> Error {
    Error::io(
        "recv --verify",
        std::io::Error::other(
            "nothing to verify: 0 B of payload arrived, so the pattern was not checked",
        ),
    )
}

/// `recv --bytes N` on a stream: `received` must be exactly N.
pub(crate) fn stream_length(received: u64, want: Option<u64>) -> Result<(), Error> {
    match want {
        Some(n) if received != n => Err(Error::io(
            format!("recv --bytes {n}"),
            std::io::Error::other(format!(
                "the stream carried {received} B, not {n} B: {}",
                if received < n {
                    "cut short"
                } else {
                    "longer than asked"
                }
            )),
        )),
        _ => Ok(()),
    }
}
