//! One error type for the whole library. Every message is one line that names the cause and,
//! where there is one, the fix.

use crate::remedy::{Remedy, Voice};
use crate::text::{Field, Library, Text};
use std::fmt::{self, Write as _};
use std::io;
use std::net::SocketAddr;

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A name that is not a send mode ([`TxMode::parse`](crate::tx::TxMode::parse)).
    UnknownMode {
        /// What was given.
        given: String,
    },
    /// A name that is not a receive mode ([`RxMode::parse`](crate::rx::RxMode::parse)).
    UnknownRxMode {
        /// What was given.
        given: String,
    },
    /// An address that does not parse or resolve.
    BadAddress {
        /// What was given.
        given: String,
    },
    /// A host name that does not resolve (no address for it here).
    Unresolved {
        /// The name.
        host: String,
        /// The whole address given.
        given: String,
    },
    /// An address to listen on that belongs to no interface of this host (EADDRNOTAVAIL).
    NotLocalAddress {
        /// The address.
        addr: SocketAddr,
    },
    /// Nobody listens at the address.
    ConnectionRefused {
        /// Where.
        addr: SocketAddr,
    },
    /// The operation needs root (CAP_NET_ADMIN / CAP_SYS_ADMIN).
    NotRoot {
        /// What needed it.
        what: &'static str,
    },
    /// Locking the memory a mechanism needs (an io_uring ring, a registered region, the pages
    /// of `MSG_ZEROCOPY` sends, an AF_XDP UMEM) would take the user over RLIMIT_MEMLOCK.
    MemlockTooSmall {
        /// What needs the locked memory, e.g. "the io_uring ring (8 KiB) and the 512 KiB
        /// region registered with it".
        what: Text,
        /// Bytes the kernel charges for it (the remedy covers them).
        need: u64,
        /// The soft limit.
        limit: u64,
        /// The hard limit (`u64::MAX`: unlimited); `ulimit -l` cannot go above it unprivileged.
        hard: u64,
        /// What was being charged when the kernel refused fitted under the limit: other locked
        /// memory of the same user (another process or sender, a ring still being torn down)
        /// counted too, and the remedy leaves room for up to `limit` bytes of it.
        shared: bool,
    },
    /// No 2 MiB huge pages are reserved (strict huge-page regions only).
    NoHugePages {
        /// Pages needed.
        pages: usize,
    },
    /// `MSG_ZEROCOPY` sends failed with ENOBUFS that RLIMIT_MEMLOCK does not explain:
    /// `net.core.optmem_max` is too small to hold the notifications (the message suggests a
    /// larger value, never the current one).
    OptmemExhausted {
        /// The current value, if it could be read.
        optmem_max: Option<u64>,
    },
    /// The peer reset the connection (or closed it) mid-stream.
    PeerReset {
        /// Bytes the kernel had accepted.
        accepted: u64,
        /// Of those, bytes the kernel had confirmed sent (zero-copy or copied).
        confirmed: u64,
    },
    /// The buffer is device memory the CPU cannot read or write.
    NotCpuAccessible,
    /// The region cannot hold the buffers asked for.
    RegionTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes the region has.
        have: usize,
    },
    /// The kernel refused a mechanism.
    Unsupported {
        /// What was refused.
        what: Text,
        /// The errno.
        source: io::Error,
        /// How to get it, if there is a way ([`Remedy::None`] if not).
        remedy: Remedy,
    },
    /// What was asked for is held by someone else: a NIC queue that already has a memory
    /// provider. Not a missing feature: the same call works elsewhere (another queue) or once
    /// the holder let go.
    Busy {
        /// What was refused, e.g. "io_uring zero-copy receive (zcrx) on eth0 queue 3".
        what: Text,
        /// What holds it, in words.
        holder: Text,
        /// The errno (`EEXIST` or `EBUSY`).
        source: io::Error,
        /// The way out.
        remedy: Remedy,
    },
    /// No completion arrived for too long (peer stopped reading?).
    Stalled {
        /// Seconds waited.
        seconds: u64,
        /// Buffers still held by the kernel.
        outstanding: usize,
    },
    /// Received data does not match the seeded pattern.
    Verify(zcnet_core::Mismatch),
    /// The kernel's completions contradict the protocol (a bug here or in the kernel).
    Protocol(zcnet_core::TrackerError),
    /// The call was cancelled by its [`Cancel`](crate::Cancel) token.
    Interrupted,
    /// No interface by that name in this network namespace.
    UnknownInterface {
        /// What was given.
        given: String,
    },
    /// The kernel refused a control-plane request (netlink or ethtool ioctl).
    Kernel {
        /// What was asked, e.g. "rings-set on eth0" (empty when the message already says it).
        what: Text,
        /// The kernel's answer, with its extack message where it sent one.
        message: Text,
        /// The errno, if the kernel sent one.
        errno: Option<i32>,
    },
    /// A NIC change for zero copy was refused; what had been applied was undone.
    NicSetup {
        /// The interface.
        iface: String,
        /// The step that failed, e.g. "enabling header split".
        step: Text,
        /// Why: the error the step met.
        cause: Box<Error>,
        /// What happened to the changes before it.
        undo: Text,
    },
    /// A NIC state file is unreadable or from another version.
    NicState {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: Text,
    },
    /// CUDA memory could not be had or used: no driver, no such device, out of GPU memory, an
    /// export or copy the driver refused.
    Gpu {
        /// What was being done, e.g. "allocating 64 MiB on cuda:0".
        what: Text,
        /// The driver's answer (or what is missing).
        cause: Text,
        /// How to get it working, or the alternative.
        remedy: Remedy,
        /// The request itself was wrong (e.g. `cuda:7` with two GPUs): exit code 2.
        bad_argument: bool,
    },
    /// Another system call failed.
    Io {
        /// What was being done.
        context: Text,
        /// The error.
        source: io::Error,
    },
}

impl Error {
    /// Wraps an `io::Error` with what was being done. An [`io::ErrorKind::Interrupted`] is
    /// [`Error::Interrupted`], whatever it was doing: the library retries a system call cut
    /// short by a signal (`EINTR`) unless the caller's [`Cancel`](crate::Cancel) is set (or
    /// ends at signals: [`Cancel::ending_at_signals`](crate::Cancel::ending_at_signals)), and
    /// a wait the token ended says `Interrupted`; either way the run was asked to stop, it did
    /// not fail.
    pub fn io(context: impl Into<Text>, source: io::Error) -> Error {
        if source.kind() == io::ErrorKind::Interrupted {
            return Error::Interrupted;
        }
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A bad argument or option: `what` names it and the fix, and is the whole message (no
    /// errno text follows it). Its source has [`io::ErrorKind::InvalidInput`];
    /// [`Error::is_bad_argument`] tells it from an `EINVAL` of the kernel, and it is one of
    /// [`Error::is_caller_mistake`].
    pub fn invalid_input(what: impl Into<Text>) -> Error {
        Error::io(
            what,
            io::Error::new(io::ErrorKind::InvalidInput, BadArgument),
        )
    }

    /// Whether this is a bad argument made by [`Error::invalid_input`] (not a refusal by the
    /// kernel, which may also be `EINVAL`).
    pub fn is_bad_argument(&self) -> bool {
        matches!(self, Error::Io { source, .. }
            if source.get_ref().is_some_and(|r| r.is::<BadArgument>()))
    }

    /// Whether the peer reset the connection (`ECONNRESET`, or a send's [`Error::PeerReset`]).
    pub fn is_connection_reset(&self) -> bool {
        match self {
            Error::PeerReset { .. } => true,
            Error::Io { source, .. } => source.raw_os_error() == Some(libc::ECONNRESET),
            _ => false,
        }
    }

    /// Whether the call was wrong, rather than refused by the kernel or failed on the way: a
    /// bad argument ([`Error::invalid_input`]), a mode name or address that does not parse, an
    /// interface this namespace does not have, a GPU request that cannot be met as asked. A
    /// front end reports these as its usage errors (the `zcnet` command exits 2).
    pub fn is_caller_mistake(&self) -> bool {
        self.is_bad_argument()
            || matches!(
                self,
                Error::UnknownMode { .. }
                    | Error::UnknownRxMode { .. }
                    | Error::BadAddress { .. }
                    | Error::Unresolved { .. }
                    | Error::NotLocalAddress { .. }
                    | Error::UnknownInterface { .. }
                    | Error::Gpu {
                        bad_argument: true,
                        ..
                    }
            )
    }
}

impl Error {
    /// The errno behind the error, where the kernel gave one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Busy { source, .. } => source.raw_os_error(),
            Error::Kernel { errno, .. } => *errno,
            _ => None,
        }
    }

    /// The remedy the error carries, if it has a typed one.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::Unsupported { remedy, .. }
            | Error::Busy { remedy, .. }
            | Error::Gpu { remedy, .. } => Some(*remedy),
            _ => None,
        }
    }

    /// The message in `voice`: every setting, mode, memory kind and call it names, and every
    /// [`Remedy`], in the front end's words (the `zcnet` command's flags, Python's keyword
    /// arguments). `Display` is this in the library's own words ([`Library`]).
    pub fn render(&self, voice: &dyn Voice) -> String {
        let mut t = Text::new();
        // Writing into a Text cannot fail.
        let _ = self.write_in(&mut t, &|r| r.voiced(voice));
        t.render(voice)
    }

    /// The message as data: its settings, modes, memory kinds and calls typed, its remedies in
    /// the library's wording ([`Remedy::text`]), for a front end to render later or for a
    /// message that carries this one.
    pub fn text(&self) -> Text {
        let mut t = Text::new();
        let _ = self.write_in(&mut t, &|r| r.text());
        t
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Library))
    }
}

impl Error {
    fn write_in(&self, f: &mut Text, fix: &dyn Fn(&Remedy) -> Text) -> fmt::Result {
        match self {
            Error::UnknownMode { given } => write!(
                f,
                "unknown send mode '{given}': use one of {}",
                crate::kinds::TxMode::NAMED.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
            ),
            Error::UnknownRxMode { given } => write!(
                f,
                "unknown receive mode '{given}': use one of {}",
                crate::kinds::RxMode::ALL.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
            ),
            Error::BadAddress { given } => {
                write!(f, "bad address '{given}': give HOST:PORT, e.g. 127.0.0.1:5201 or [::1]:5201")
            }
            Error::Unresolved { host, given } => write!(
                f,
                "'{given}': {host} does not resolve (no address for that name here): check the name, or give an IP address"
            ),
            Error::NotLocalAddress { addr } => write!(
                f,
                "{} is not an address of this host: listen on one of its addresses ('ip -brief address' lists them), or on 0.0.0.0 or [::] for all of them",
                crate::addr::AddrText(*addr)
            ),
            Error::ConnectionRefused { addr } => {
                write!(f, "connection refused by {}: ", crate::addr::AddrText(*addr))?;
                f.push(fix(&Remedy::StartReceiver(*addr)));
                Ok(())
            }
            Error::NotRoot { what } => write!(f, "{what} needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo"),
            Error::MemlockTooSmall {
                what,
                need,
                limit,
                hard,
                shared,
            } => {
                let kib = zcnet_core::memlock::ulimit_kib(*need, *limit, *shared);
                write!(f, "RLIMIT_MEMLOCK ({limit} B) is too small for ")?;
                f.push(what.clone());
                write!(f, ", which locks {need} B")?;
                if *shared {
                    f.write_str(" (other locked memory of this user counts against the same limit)")?;
                }
                write!(
                    f,
                    ": raise it to {kib} KiB (ulimit -l {kib}, or LimitMEMLOCK= in the unit"
                )?;
                if kib.saturating_mul(1024) > *hard {
                    write!(
                        f,
                        "; the hard limit is {} KiB: raise that as root or in /etc/security/limits.conf",
                        hard / 1024
                    )?;
                }
                f.push(") or ");
                f.push(fix(&Remedy::FewerSends));
                Ok(())
            }
            Error::NoHugePages { pages } => write!(
                f,
                "no free 2 MiB huge pages for {pages} page(s): reserve them with 'echo {pages} > /proc/sys/vm/nr_hugepages' or "
            )
            .map(|()| f.push(fix(&Remedy::UseMemory(crate::kinds::MemoryKind::Anonymous)))),
            Error::OptmemExhausted { optmem_max } => write!(
                f,
                "MSG_ZEROCOPY send failed with ENOBUFS: net.core.optmem_max ({}) cannot hold its notifications; raise it with 'sysctl -w net.core.optmem_max={}' (per network namespace)",
                optmem_max.map_or_else(|| "unknown".to_string(), |v| format!("{v} B")),
                zcnet_core::memlock::optmem_suggestion(*optmem_max)
            ),
            Error::PeerReset { accepted, confirmed } => write!(
                f,
                "peer reset the connection: {accepted} B accepted by the kernel, {confirmed} B confirmed sent before the reset"
            ),
            Error::NotCpuAccessible => write!(f, "the buffer is device memory the CPU cannot access: fill it from the device"),
            Error::RegionTooSmall { need, have } => write!(
                f,
                "region of {have} B cannot hold the {need} B of buffers asked for: use a larger region or fewer/smaller buffers"
            ),
            Error::Unsupported { what, source, remedy } => {
                f.push(what.clone());
                write!(f, " is not supported here ({source})")?;
                let fix = fix(remedy);
                if !fix.is_empty() {
                    f.push(": ");
                    f.push(fix);
                }
                Ok(())
            }
            Error::Busy { what, holder, source, remedy } => {
                f.push(what.clone());
                f.push(" is refused: ");
                f.push(holder.clone());
                write!(f, " ({source})")?;
                let fix = fix(remedy);
                if !fix.is_empty() {
                    f.push(": ");
                    f.push(fix);
                }
                Ok(())
            }
            Error::Stalled { seconds, outstanding: 0 } => write!(
                f,
                "no room in the socket for {seconds} s: is the receiver reading?"
            ),
            Error::Stalled { seconds, outstanding } => write!(
                f,
                "no send completion for {seconds} s with {outstanding} buffer(s) held by the kernel: is the receiver reading?"
            ),
            Error::Verify(m) => write!(f, "{m}: the data was corrupted, reordered or sent with ")
                .map(|()| f.push(Field::PatternSeed)),
            Error::Protocol(e) => write!(f, "kernel completion protocol violated: {e} (please report this)"),
            Error::Interrupted => write!(f, "interrupted"),
            Error::UnknownInterface { given } => write!(
                f,
                "no interface named '{given}' in this network namespace: list them with 'ip link'"
            ),
            Error::Kernel { what, message, .. } if what.is_empty() => {
                f.push(message.clone());
                Ok(())
            }
            Error::Kernel { what, message, .. } => {
                f.push(what.clone());
                f.push(": ");
                f.push(message.clone());
                Ok(())
            }
            Error::NicSetup { iface, step, cause, undo } => {
                write!(f, "nic setup on {iface}: ")?;
                f.push(step.clone());
                f.push(" failed: ");
                cause.write_in(f, fix)?;
                f.push("; ");
                f.push(undo.clone());
                Ok(())
            }
            Error::NicState { path, problem } => {
                write!(f, "NIC state file {}: ", path.display())?;
                f.push(problem.clone());
                f.push(": check it by hand, then delete it");
                Ok(())
            }
            Error::Gpu { what, cause, remedy, .. } => {
                f.push(what.clone());
                f.push(": ");
                f.push(cause.clone());
                f.push(": ");
                f.push(fix(remedy));
                Ok(())
            }
            Error::Io { context, .. } if self.is_bad_argument() => {
                f.push(context.clone());
                Ok(())
            }
            Error::Io { context, source } => {
                f.push(context.clone());
                write!(f, ": {source}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Busy { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The source of an [`Error::invalid_input`]: the caller's mistake, not the kernel's `EINVAL`.
#[derive(Debug)]
struct BadArgument;

impl fmt::Display for BadArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid argument")
    }
}

impl std::error::Error for BadArgument {}

impl From<zcnet_core::TrackerError> for Error {
    fn from(e: zcnet_core::TrackerError) -> Self {
        Error::Protocol(e)
    }
}

impl From<zcnet_core::Mismatch> for Error {
    fn from(m: zcnet_core::Mismatch) -> Self {
        Error::Verify(m)
    }
}

/// "512 KiB" / "60000 B": a size in the unit that reads best, for messages.
pub(crate) fn size_words(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}
