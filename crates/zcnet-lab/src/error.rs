//! The lab's errors. zcnet-tools turns each into zcnet's error with the same words
//! (`zcnet_tools::lab::error`), so that the command's messages do not depend on where the lab
//! lives.

use std::fmt;
use std::io;

/// What went wrong making, entering or deleting the lab's namespaces.
#[derive(Debug)]
pub enum Error {
    /// The lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and this process is not root.
    NotRoot {
        /// What needed it.
        what: &'static str,
    },
    /// A lab command (`ip ...`) ran and failed: "lab setup failed: '`command`': `stderr`".
    Command(CommandFailed),
    /// A program that could not be run, or a system call that failed.
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
    /// The kernel has no dummy driver (CONFIG_DUMMY): no dummy path here
    /// ([`no_dummy_driver_what`] and [`NO_DUMMY_DRIVER_FIX`] say it).
    NoDummyDriver {
        /// What `ip link add … type dummy` said, if it ran.
        kernel: Option<String>,
    },
}

/// The lab's result.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`]: `context` says what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The errno the refusal of the dummy path carries (`EOPNOTSUPP`).
    pub fn no_dummy_driver_errno() -> io::Error {
        io::Error::from_raw_os_error(libc::EOPNOTSUPP)
    }
}

/// What the refusal of the dummy path refuses, in one line: the path and its cause
/// (CONFIG_DUMMY). `kernel`: what `ip link add … type dummy` said, if it ran.
pub fn no_dummy_driver_what(kernel: Option<&str>) -> String {
    let said = kernel
        .map(|k| format!("; ip: {}", k.trim().replace(['\n', '\r'], " ")))
        .unwrap_or_default();
    format!(
        "the dummy path (a dummy device the kernel sends through without copying and whose driver drops: this kernel has no dummy driver, CONFIG_DUMMY{said})"
    )
}

/// The fix for a kernel without the dummy driver.
pub const NO_DUMMY_DRIVER_FIX: &str = "boot a kernel built with CONFIG_DUMMY=y or =m (the kernel lab has it: scripts/kernel-lab.sh --kernel 7.2 -- zcnet bench tx --path dummy), or use --path sink (an ifb device that drops: the same measurement)";

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotRoot { what } => write!(
                f,
                "{what} needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo"
            ),
            Error::Command(c) => write!(f, "lab setup failed: {c}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::NoDummyDriver { kernel } => write!(
                f,
                "{} is not supported here ({}): {NO_DUMMY_DRIVER_FIX}",
                no_dummy_driver_what(kernel.as_deref()),
                Error::no_dummy_driver_errno()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Command(c) => Some(c),
            Error::Io { source, .. } => Some(source),
            Error::NotRoot { .. } | Error::NoDummyDriver { .. } => None,
        }
    }
}

/// A lab command (`ip ...`) that failed: what ran and what it printed.
#[derive(Debug)]
pub struct CommandFailed {
    /// The command.
    pub command: String,
    /// What it printed on stderr.
    pub stderr: String,
}

impl fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}': {}", self.command, self.stderr.trim())
    }
}

impl std::error::Error for CommandFailed {}
