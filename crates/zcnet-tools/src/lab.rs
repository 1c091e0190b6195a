//! The namespace lab ([`zcnet_lab`]: namespaces, veth pairs, the sink and dummy paths, deleted
//! on every exit path) with zcnet's errors, for the tools, which return them.
//!
//! The lab lives in its own crate, beside the library rather than above it, so that zcnet's
//! own tests use it without depending on the tools. Its errors are its own; [`error`] turns
//! each into zcnet's, with the words the `zcnet` command has always printed ("lab setup
//! failed: 'ip …': …", "the namespace lab needs root …", the dummy path's refusal naming
//! CONFIG_DUMMY and its fix). A Ctrl-C caught by [`crate::interrupt::install_handler`] ends a
//! run with an error, and the lab's drop deletes its namespaces on that path too.

use zcnet::{Error, Result};

pub use zcnet_lab::{dummy_driver, netns_exists, CommandFailed, DummyPath, SinkPath, VethPath};

/// zcnet's error for the lab's `e`, in the same words: a failed `ip` command is an
/// [`Error::Io`] ("lab setup failed") whose source is the [`CommandFailed`], a missing root is
/// [`Error::NotRoot`], a kernel without the dummy driver is [`no_dummy_driver`]'s refusal.
pub fn error(e: zcnet_lab::Error) -> Error {
    match e {
        zcnet_lab::Error::NotRoot { what } => Error::NotRoot { what },
        zcnet_lab::Error::Command(c) => Error::io("lab setup failed", std::io::Error::other(c)),
        zcnet_lab::Error::Io { context, source } => Error::io(context, source),
        zcnet_lab::Error::NoDummyDriver { kernel } => no_dummy_driver(kernel.as_deref()),
    }
}

/// The refusal of the dummy path on a kernel without the dummy driver, in one line: the cause
/// (CONFIG_DUMMY) and the fix. `kernel`: what `ip link add … type dummy` said, if it ran.
pub fn no_dummy_driver(kernel: Option<&str>) -> Error {
    Error::Unsupported {
        what: zcnet_lab::no_dummy_driver_what(kernel).into(),
        source: zcnet_lab::Error::no_dummy_driver_errno(),
        remedy: zcnet::Remedy::Other(zcnet_lab::NO_DUMMY_DRIVER_FIX),
    }
}

/// The error of a lab command that failed: "lab setup failed: '`command`': `stderr`".
pub(crate) fn command_failed(command: String, stderr: String) -> Error {
    error(zcnet_lab::command_failed(command, stderr))
}

/// Names of all network namespaces (`ip netns list`).
pub fn list_namespaces() -> Result<Vec<String>> {
    zcnet_lab::list_namespaces().map_err(error)
}

/// Deletes lab namespaces whose creating process no longer exists ([`zcnet_lab::cleanup_stale`]).
/// Returns their names.
pub fn cleanup_stale() -> Result<Vec<String>> {
    zcnet_lab::cleanup_stale().map_err(error)
}

/// Moves the calling thread into namespace `ns`. Sockets it creates afterwards live there.
pub fn enter(ns: &str) -> Result<()> {
    zcnet_lab::enter(ns).map_err(error)
}

/// Namespaces made by this lab, deleted on drop ([`zcnet_lab::Lab`] with zcnet's errors).
#[derive(Debug)]
pub struct Lab(zcnet_lab::Lab);

impl Lab {
    /// An empty lab. Needs root; cleans up namespaces left by dead zcnet processes first.
    pub fn new() -> Result<Lab> {
        zcnet_lab::Lab::new().map(Lab).map_err(error)
    }

    /// The namespaces this lab made so far.
    pub fn namespaces(&self) -> &[String] {
        self.0.namespaces()
    }

    /// Two namespaces joined by a veth pair, 10.10.0.1 ↔ 10.10.0.2 ([`zcnet_lab::Lab::veth`]).
    pub fn veth(&mut self) -> Result<VethPath> {
        self.0.veth().map_err(error)
    }

    /// A namespace whose route to 10.30.0.0/24 ends in an ifb device that drops everything
    /// ([`zcnet_lab::Lab::sink`]).
    pub fn sink(&mut self) -> Result<SinkPath> {
        self.0.sink().map_err(error)
    }

    /// A namespace whose route to 10.50.0.0/24 leaves through a dummy device that drops
    /// ([`zcnet_lab::Lab::dummy`]). Without the dummy driver: [`no_dummy_driver`] with what
    /// `ip` said.
    pub fn dummy(&mut self) -> Result<DummyPath> {
        self.0.dummy().map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab's errors reach the tools' callers in the words the `zcnet` command has always
    /// printed, as the kinds of zcnet's error its callers match on.
    #[zcnet_testkit::test]
    fn lab_errors_keep_their_words_in_zcnet_errors() {
        let e = command_failed("ip netns add x".into(), "File exists\n".into());
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "lab setup failed: 'ip netns add x': File exists"
        );
        let e = error(zcnet_lab::Error::NotRoot {
            what: "the namespace lab",
        });
        assert!(matches!(e, Error::NotRoot { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            zcnet_lab::Error::NotRoot {
                what: "the namespace lab"
            }
            .to_string()
        );
        let lab = zcnet_lab::Error::NoDummyDriver {
            kernel: Some("Error: Unknown device type.".into()),
        };
        let said = lab.to_string();
        let e = error(lab);
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert_eq!(e.to_string(), said);
        let e = error(zcnet_lab::Error::io(
            "setns into x",
            std::io::Error::from_raw_os_error(libc::EPERM),
        ));
        assert!(e.to_string().starts_with("setns into x: "), "{e}");
        let e = error(zcnet_lab::Error::io(
            "running 'ip netns list'",
            std::io::Error::from(std::io::ErrorKind::Interrupted),
        ));
        assert!(matches!(e, Error::Interrupted), "{e:?}");
    }
}
