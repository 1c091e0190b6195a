//! One error type for the plugin, mapped to `ncclResult_t` in one place.

use crate::abi::{self, ncclResult_t};

/// Why a call failed; the text is one line naming the cause (logged through NCCL's logger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// A bad argument: null pointer, device out of range, size over the limit.
    Invalid(String),
    /// A call that does not fit the state: a handle from another plugin, an unsupported
    /// pointer type.
    Usage(String),
    /// A system call failed.
    System(String),
    /// The peer misbehaved or went away.
    Remote(String),
    /// A bug (a panic caught at the boundary).
    Internal(String),
}

impl PluginError {
    /// The `ncclResult_t` NCCL sees.
    pub fn code(&self) -> ncclResult_t {
        match self {
            PluginError::Invalid(_) => abi::NCCL_INVALID_ARGUMENT,
            PluginError::Usage(_) => abi::NCCL_INVALID_USAGE,
            PluginError::System(_) => abi::NCCL_SYSTEM_ERROR,
            PluginError::Remote(_) => abi::NCCL_REMOTE_ERROR,
            PluginError::Internal(_) => abi::NCCL_INTERNAL_ERROR,
        }
    }

    /// A system error from an I/O error, with what was being done.
    pub fn io(what: impl std::fmt::Display, e: &std::io::Error) -> PluginError {
        PluginError::System(format!("{what}: {e}"))
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, m) = match self {
            PluginError::Invalid(m) => ("invalid argument", m),
            PluginError::Usage(m) => ("invalid usage", m),
            PluginError::System(m) => ("system error", m),
            PluginError::Remote(m) => ("remote error", m),
            PluginError::Internal(m) => ("internal error", m),
        };
        write!(f, "{kind}: {m}")
    }
}

/// The plugin's result.
pub type Result<T> = std::result::Result<T, PluginError>;
