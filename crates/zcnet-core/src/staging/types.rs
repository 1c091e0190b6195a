//! Commands, reasons, errors, counters and configuration of [`super::StagingRx`] and
//! [`super::StagingTx`].

use std::fmt;

/// Names one copy of a pipeline: a counter from 0, never reused, so a late or repeated
/// completion can always be told from a current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyId(pub u64);

impl fmt::Display for CopyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "copy {}", self.0)
    }
}

/// One asynchronous copy for the caller's engine to run: host-to-device for
/// [`super::StagingRx`], device-to-host for [`super::StagingTx`]. The engine reports its end
/// with `on_copy_done(copy)` or `on_copy_failed(copy)`, in any order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyCmd {
    /// The copy's name, for the completion.
    pub copy: CopyId,
    /// The host buffer read (receive) or written (send).
    pub host_buf: u16,
    /// Offset in that host buffer.
    pub host_off: u32,
    /// Offset in the GPU buffer: in the destination ring (receive), or in the source memory
    /// as given to [`super::StagingTx::push_source`] (send).
    pub dev_off: u64,
    /// Bytes, at least 1 and at most the host buffer size.
    pub len: u32,
    /// Position of the first byte in the stream.
    pub(crate) stream_off: u64,
}

/// One chunk for the socket to send, in stream order: `len` bytes from offset 0 of host buffer
/// `host_buf`. The buffer stays the pipeline's until [`super::StagingTx::on_send_done`] (the
/// zero-copy notification) or [`super::StagingTx::on_send_failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendCmd {
    /// The host buffer holding the chunk.
    pub host_buf: u16,
    /// Bytes.
    pub len: u32,
    /// Position of the first byte in the stream.
    pub(crate) stream_off: u64,
}

/// Why a pipeline holds back: the receive side should stop refilling the socket's buffers
/// ([`super::StagingRx::pause`]), or no copy can be issued now ([`super::StagingTx::pause`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pause {
    /// Receive: the GPU ring has less free space than one host buffer's worth of bytes; the
    /// application must release delivered bytes.
    RingFull,
    /// Send: every host buffer is being copied into, waits to be sent, or is being sent.
    NoHostBuffer,
    /// The configured maximum of copies is in flight.
    CopiesInFlight,
    /// Send: the configured maximum of sends is in flight (chunks wait, copied).
    SendsInFlight,
    /// The pipeline has stopped ([`Cause`]): it takes nothing more.
    Stopped,
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pause::RingFull => "GPU ring full",
            Pause::NoHostBuffer => "no free host buffer",
            Pause::CopiesInFlight => "maximum copies in flight",
            Pause::SendsInFlight => "maximum sends in flight",
            Pause::Stopped => "stopped",
        })
    }
}

/// What stopped a pipeline. A stopped pipeline issues nothing and takes no new input; it still
/// accepts completions of what was in flight, and hands back each host buffer as the last
/// operation on it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// This copy failed.
    CopyFailed(CopyId),
    /// The send of this host buffer failed.
    SendFailed(u16),
    /// The caller called `abort`.
    Aborted,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::CopyFailed(c) => write!(f, "{c} failed"),
            Cause::SendFailed(h) => write!(f, "the send of host buffer {h} failed"),
            Cause::Aborted => f.write_str("aborted"),
        }
    }
}

/// Input that contradicts the protocol: a bug in the caller or its engine. Nothing changes
/// when one is returned (only `StagingStats::rejected` counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StagingError {
    /// Unusable configuration.
    BadConfig(&'static str),
    /// A completion for a copy id never issued.
    UnknownCopy(CopyId),
    /// A second completion (or failure) for a copy.
    CopyAlreadyDone(CopyId),
    /// A host buffer id outside the configured count.
    UnknownHostBuf(u16),
    /// Received data in a host buffer the pipeline still holds (not handed back yet).
    HostBufHeld(u16),
    /// A send completion for a host buffer with no send in flight.
    NotSending(u16),
    /// A received chunk of 0 bytes (end of stream is the caller's, not a chunk).
    EmptyChunk(u16),
    /// A received chunk longer than a host buffer.
    ChunkTooLarge {
        /// The host buffer.
        host_buf: u16,
        /// Bytes claimed.
        len: u32,
        /// The host buffer size.
        max: u32,
    },
    /// Release of more bytes than were delivered and not yet released.
    ReleasePastDelivered {
        /// Bytes asked.
        asked: u64,
        /// Bytes that could be released.
        deliverable: u64,
    },
    /// A source range that runs past the end of the address space.
    BadSource {
        /// Offset.
        dev_off: u64,
        /// Length.
        len: u64,
    },
    /// New input after the pipeline stopped.
    Stopped(Cause),
}

impl fmt::Display for StagingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StagingError::BadConfig(why) => write!(f, "staging pipeline: {why}"),
            StagingError::UnknownCopy(c) => write!(f, "completion of {c}, which was never issued"),
            StagingError::CopyAlreadyDone(c) => write!(f, "second completion of {c}"),
            StagingError::UnknownHostBuf(h) => write!(f, "host buffer {h} does not exist"),
            StagingError::HostBufHeld(h) => {
                write!(
                    f,
                    "data received into host buffer {h}, which is still being copied"
                )
            }
            StagingError::NotSending(h) => {
                write!(
                    f,
                    "send completion for host buffer {h}, which has no send in flight"
                )
            }
            StagingError::EmptyChunk(h) => write!(f, "empty chunk received in host buffer {h}"),
            StagingError::ChunkTooLarge { host_buf, len, max } => write!(
                f,
                "chunk of {len} bytes in host buffer {host_buf}, which holds {max}"
            ),
            StagingError::ReleasePastDelivered { asked, deliverable } => write!(
                f,
                "release of {asked} bytes with only {deliverable} delivered and unreleased"
            ),
            StagingError::BadSource { dev_off, len } => {
                write!(f, "source of {len} bytes at {dev_off:#x} overflows")
            }
            StagingError::Stopped(cause) => write!(f, "pipeline stopped ({cause}): input refused"),
        }
    }
}

impl std::error::Error for StagingError {}

/// Sizes and limits of a pipeline. `max_sends` is read by [`super::StagingTx`] only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingConfig {
    /// Bytes of each host buffer (at least 1).
    pub(crate) host_buf_size: u32,
    /// Number of host buffers: ids `0..host_bufs` (at least 1).
    pub(crate) host_bufs: u16,
    /// Most copies in flight at once (at least 1).
    pub(crate) max_copies: u32,
    /// Most sends in flight at once (at least 1).
    pub(crate) max_sends: u32,
}

impl StagingConfig {
    /// `host_bufs` buffers of `host_buf_size` bytes, with no limit on copies or sends beyond
    /// the number of host buffers.
    pub fn new(host_buf_size: u32, host_bufs: u16) -> StagingConfig {
        StagingConfig {
            host_buf_size,
            host_bufs,
            max_copies: u32::from(host_bufs),
            max_sends: u32::from(host_bufs),
        }
    }

    /// The same, with at most `n` copies in flight.
    pub fn with_max_copies(self, n: u32) -> StagingConfig {
        StagingConfig {
            max_copies: n,
            ..self
        }
    }

    /// The same, with at most `n` sends in flight.
    #[cfg(test)]
    pub(crate) fn with_max_sends(self, n: u32) -> StagingConfig {
        StagingConfig {
            max_sends: n,
            ..self
        }
    }

    pub(super) fn validate(&self) -> Result<(), StagingError> {
        if self.host_buf_size == 0 || self.host_bufs == 0 {
            return Err(StagingError::BadConfig("no host buffer space"));
        }
        if self.max_copies == 0 || self.max_sends == 0 {
            return Err(StagingError::BadConfig("a limit in flight of 0"));
        }
        Ok(())
    }
}

/// Counters and gauges of one pipeline. Fields marked *send* stay 0 for a receive pipeline,
/// *receive* for a send pipeline.
///
/// Stall counters count *episodes*: each time the pipeline starts holding back for that reason
/// (the reason changes to it), not each time it is asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Bytes received into host buffers (receive) or pushed as source (send).
    pub(crate) bytes_in: u64,
    /// Bytes of completed copies.
    pub(crate) bytes_copied: u64,
    /// Copies issued.
    pub(crate) copies_issued: u64,
    /// Copies completed.
    pub copies_completed: u64,
    /// Copies failed.
    pub(crate) copies_failed: u64,
    /// Gauge: copies in flight.
    pub(crate) copies_in_flight: u64,
    /// Most copies in flight at once.
    pub(crate) max_copies_in_flight: u64,
    /// Completions (copy or send, ended well or not) accepted after the pipeline stopped.
    pub(crate) late_completions: u64,
    /// Receive: episodes of `Pause::RingFull` (GPU ring space).
    pub ring_full: u64,
    /// Send: episodes of [`Pause::NoHostBuffer`] while source bytes wait ("starved").
    pub(crate) starved: u64,
    /// Episodes of [`Pause::CopiesInFlight`].
    pub(crate) copy_limited: u64,
    /// Send: episodes of a copied chunk waiting at the head for [`Pause::SendsInFlight`].
    pub(crate) send_limited: u64,
    /// Send: sends issued.
    pub(crate) sends_issued: u64,
    /// Send: sends completed (notification received).
    pub(crate) sends_completed: u64,
    /// Send: sends failed.
    pub(crate) sends_failed: u64,
    /// Send: gauge of sends in flight.
    pub(crate) sends_in_flight: u64,
    /// Send: bytes of completed sends.
    pub(crate) bytes_sent: u64,
    /// Gauge: host buffers the pipeline holds (receive: not yet handed back; send: being
    /// copied into, waiting to be sent, or being sent).
    pub(crate) host_bufs_held: u64,
    /// Inputs refused with a [`StagingError`].
    pub(crate) rejected: u64,
}

impl StagingStats {
    /// Counts an episode when the holding-back reason changes to `now`.
    pub(super) fn edge(&mut self, last: &mut Option<Pause>, now: Option<Pause>) {
        if *last != now {
            match now {
                Some(Pause::RingFull) => self.ring_full += 1,
                Some(Pause::NoHostBuffer) => self.starved += 1,
                Some(Pause::CopiesInFlight) => self.copy_limited += 1,
                Some(Pause::SendsInFlight) => self.send_limited += 1,
                Some(Pause::Stopped) | None => {}
            }
            *last = now;
        }
    }

    pub(super) fn issued(&mut self) {
        self.copies_issued += 1;
        self.copies_in_flight += 1;
        self.max_copies_in_flight = self.max_copies_in_flight.max(self.copies_in_flight);
    }

    pub(super) fn copy_ended(&mut self, len: u32, ok: bool, late: bool) {
        self.copies_in_flight -= 1;
        if ok {
            self.copies_completed += 1;
            self.bytes_copied += u64::from(len);
        } else {
            self.copies_failed += 1;
        }
        self.late_completions += u64::from(late);
    }
}
