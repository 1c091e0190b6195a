//! The crate's one error type. Every `Display` is a single line naming the cause and, where
//! there is one, the fix.

use std::fmt;
use std::io;

/// What the kernel refused: the operation, what it was aimed at, the errno and everything the
/// kernel said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// The operation, e.g. `"dev-get"`, `"rings-set"`, `"ETHTOOL_SRXCLSRLINS"`.
    pub op: &'static str,
    /// What it was aimed at, e.g. `"ifindex 7"`, `"dev veth0"`; may be empty.
    pub target: String,
    /// The positive errno.
    pub errno: i32,
    /// The extended ACK (empty for ioctls).
    pub extack: Extack,
    /// The attribute at the extended ACK's offset, named from the request (e.g. `"ifindex"`,
    /// `"header.dev-index"`), when it could be found.
    pub bad_attr: Option<String>,
    /// The missing attribute's name, when the extended ACK reported one.
    pub missing_attr: Option<String>,
}

/// The short C name of common errnos (`Operation not supported (EOPNOTSUPP)` reads better
/// than `os error 95`).
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOBUFS => "ENOBUFS",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => return None,
    })
}

fn strerror(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    let text = s.split(" (os error").next().unwrap_or(&s).to_string();
    match errno_name(errno) {
        Some(n) => format!("{text} ({n})"),
        None => format!("{text} (errno {errno})"),
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op)?;
        if !self.target.is_empty() {
            write!(f, " {}", self.target)?;
        }
        write!(f, ": {}", strerror(self.errno))?;
        let mut notes = Vec::new();
        if let Some(m) = self.extack.msg.as_deref().filter(|m| !m.is_empty()) {
            // The kernel's text goes on the one line too.
            notes.push(format!("kernel: {}", m.replace(['\n', '\r'], " ")));
        }
        match (&self.bad_attr, self.extack.bad_attr_offset) {
            (Some(name), _) => notes.push(format!("bad attribute: {name}")),
            (None, Some(off)) => notes.push(format!("bad attribute at offset {off}")),
            _ => {}
        }
        match (&self.missing_attr, self.extack.missing_type) {
            (Some(name), _) => notes.push(format!("missing attribute: {name}")),
            (None, Some(t)) => notes.push(format!("missing attribute type {t}")),
            _ => {}
        }
        if !notes.is_empty() {
            write!(f, " ({})", notes.join("; "))?;
        }
        let hint = match self.errno {
            libc::EPERM | libc::EACCES => Some("needs root or CAP_NET_ADMIN"),
            libc::ENODEV => Some("no such device in this network namespace"),
            libc::EOPNOTSUPP if self.extack.msg.is_none() => {
                Some("the driver or kernel does not support this")
            }
            _ => None,
        };
        if let Some(h) = hint {
            write!(f, ": {h}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong talking to the kernel's netlink families and ethtool ioctls.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no such generic netlink family.
    FamilyMissing {
        /// Family name, e.g. `"netdev"`.
        family: String,
        /// The kernel that introduced it, e.g. `"Linux 6.5 or newer"`.
        needs: &'static str,
    },
    /// The family exists but lacks the operation.
    OpMissing {
        /// Family name.
        family: String,
        /// Operation name, e.g. `"bind-tx"`.
        op: &'static str,
        /// The kernel that introduced it.
        needs: &'static str,
    },
    /// The kernel refused with `EPERM`/`EACCES`.
    Permission(Box<KernelError>),
    /// The kernel refused with another errno.
    Kernel(Box<KernelError>),
    /// The kernel accepted a set request but did not apply all of it.
    NotApplied {
        /// Operation name.
        op: &'static str,
        /// What it was aimed at.
        target: String,
        /// What stayed as it was.
        what: String,
    },
    /// A reply did not have the expected shape.
    Malformed {
        /// The operation whose reply it was (empty while unknown).
        context: String,
        /// What was wrong.
        what: String,
    },
    /// A socket call failed (including the receive timeout).
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: io::Error,
    },
    /// An argument was refused before anything was sent.
    InvalidInput {
        /// What was wrong with it.
        what: String,
    },
}

impl Error {
    /// Builds `Permission` or `Kernel` from a kernel error, by errno.
    pub fn from_kernel(e: KernelError) -> Error {
        if e.errno == libc::EPERM || e.errno == libc::EACCES {
            Error::Permission(Box::new(e))
        } else {
            Error::Kernel(Box::new(e))
        }
    }

    /// The errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Permission(k) | Error::Kernel(k) => Some(k.errno),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The kernel's extended-ACK message, if it sent one.
    pub fn extack(&self) -> Option<&str> {
        match self {
            Error::Permission(k) | Error::Kernel(k) => k.extack.msg.as_deref(),
            _ => None,
        }
    }

    /// The kernel error details, for `Kernel` and `Permission`.
    pub fn kernel(&self) -> Option<&KernelError> {
        match self {
            Error::Permission(k) | Error::Kernel(k) => Some(k),
            _ => None,
        }
    }

    /// Sets the context of a `Malformed` error that has none yet.
    pub(crate) fn in_context(mut self, ctx: &str) -> Error {
        if let Error::Malformed { context, .. } = &mut self {
            if context.is_empty() {
                *context = ctx.to_string();
            }
        }
        self
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::FamilyMissing { family, needs } => write!(
                f,
                "the kernel has no `{family}` generic netlink family: needs {needs}"
            ),
            Error::OpMissing { family, op, needs } => write!(
                f,
                "the kernel's `{family}` generic netlink family has no {op} operation: needs {needs}"
            ),
            Error::Permission(k) | Error::Kernel(k) => k.fmt(f),
            Error::NotApplied { op, target, what } => write!(
                f,
                "{op} {target}: the kernel accepted the request but did not apply it: {what}"
            ),
            Error::Malformed { context, what } => {
                let ctx = if context.is_empty() { "netlink" } else { context };
                write!(f, "{ctx}: malformed reply from the kernel: {what}")
            }
            Error::Io { context, source } => match source.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => write!(
                    f,
                    "{context}: the kernel did not answer in 30 s (it may still apply the \
                     request): retry, or check the kernel log"
                ),
                _ => write!(f, "{context}: {source}"),
            },
            Error::InvalidInput { what } => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The extended ACK the kernel attaches to an error (or a warning to an ACK).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extack {
    /// `NLMSGERR_ATTR_MSG`: the human-readable reason.
    pub msg: Option<String>,
    /// `NLMSGERR_ATTR_OFFS`: offset of the offending attribute from the request's start.
    pub bad_attr_offset: Option<u32>,
    /// `NLMSGERR_ATTR_COOKIE`.
    pub cookie: Option<Vec<u8>>,
    /// `NLMSGERR_ATTR_POLICY`: the offending attribute's policy, raw nested attributes.
    pub policy: Option<Vec<u8>>,
    /// `NLMSGERR_ATTR_MISS_TYPE`: the type of a required attribute that was missing.
    pub missing_type: Option<u32>,
    /// `NLMSGERR_ATTR_MISS_NEST`: offset of the nest the attribute was missing from.
    pub missing_nest_offset: Option<u32>,
}

impl Extack {
    /// Whether the kernel said nothing beyond the errno.
    pub fn is_empty(&self) -> bool {
        *self == Extack::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn kernel_error_is_one_line_with_extack() {
        let e = Error::from_kernel(KernelError {
            op: "bind-tx",
            target: "ifindex 7".into(),
            errno: libc::EOPNOTSUPP,
            extack: Extack {
                msg: Some("Driver does not support netmem TX".into()),
                ..Extack::default()
            },
            bad_attr: None,
            missing_attr: None,
        });
        let s = e.to_string();
        assert_eq!(
            s,
            "bind-tx ifindex 7: Operation not supported (EOPNOTSUPP) \
             (kernel: Driver does not support netmem TX)"
        );
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
        assert_eq!(e.extack(), Some("Driver does not support netmem TX"));
        assert!(!s.contains('\n'));
    }

    #[zcnet_testkit::test]
    fn permission_names_the_fix() {
        let e = Error::from_kernel(KernelError {
            op: "bind-rx",
            target: String::new(),
            errno: libc::EPERM,
            extack: Extack::default(),
            bad_attr: None,
            missing_attr: None,
        });
        assert!(matches!(e, Error::Permission(_)));
        assert!(
            e.to_string().ends_with("needs root or CAP_NET_ADMIN"),
            "{e}"
        );
    }
}
