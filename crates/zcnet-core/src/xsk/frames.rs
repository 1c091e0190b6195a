//! Who holds each UMEM frame, and whether what the kernel hands back makes sense.
//!
//! A UMEM in aligned mode (Documentation/networking/af_xdp.rst, "UMEM", "XDP_UMEM_REG") is
//! `count` frames of `frame_size` bytes; a descriptor's `addr` is a byte offset into it and
//! names the frame `addr / frame_size`. A frame is, at any time, with exactly one party:
//!
//! ```text
//!             give_fill                on_rx                       (app reads it)
//!   User ──────────────────► Fill ─────────────► User(received) ── release → give_fill …
//!     │  give_tx                         on_complete
//!     └────────────────────► Tx ────────────────────► User
//! ```
//!
//! The kernel writes frames on the fill ring (RX) and reads frames on the TX ring until their
//! completion: while it may, the application must not touch them. [`Frames`] enforces the
//! moves: a frame goes to the kernel only from the user, an RX descriptor must name a frame the
//! kernel was given on the fill ring and stay inside it, a completion must name a frame on the
//! TX ring. Anything else is a [`FrameError`], so a confused kernel (or caller) is noticed
//! instead of a frame being handed out twice.
//!
//! On the RX side the kernel puts the data `XDP_PACKET_HEADROOM` (256) plus the UMEM's
//! headroom into the frame (net/xdp/xsk_buff_pool.c `xp_alloc`, `xp_get_handle`): the
//! descriptor's `addr` points at the data, not at the frame's start.

use std::fmt;

/// `XDP_PACKET_HEADROOM` (include/uapi/linux/bpf.h): bytes the kernel keeps in front of
/// received data in each frame, before the UMEM's own headroom.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Where a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameState {
    /// With the application.
    User,
    /// On the fill ring or being filled: the kernel may write it.
    Fill,
    /// On the TX ring: the kernel reads it until it completes.
    Tx,
}

/// A received frame: which frame, and where the data is in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxSpan {
    /// The frame index.
    pub frame: u32,
    /// Offset of the data within the frame.
    pub offset: u32,
    /// Data length.
    pub len: u32,
}

/// A move the protocol does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// No frame at this address (past the UMEM).
    OutOfRange {
        /// The address.
        addr: u64,
    },
    /// The frame is not where the move needs it.
    WrongState {
        /// The frame.
        frame: u32,
        /// Where it is.
        state: FrameState,
        /// Where it had to be.
        expected: FrameState,
    },
    /// Data (offset + len) does not fit in the frame.
    TooLong {
        /// The frame.
        frame: u32,
        /// Offset in the frame.
        offset: u32,
        /// Length.
        len: u32,
        /// The frame size.
        frame_size: u32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::OutOfRange { addr } => write!(f, "UMEM address {addr:#x} is past the UMEM"),
            FrameError::WrongState {
                frame,
                state,
                expected,
            } => write!(f, "UMEM frame {frame} is {state:?}, expected {expected:?}"),
            FrameError::TooLong {
                frame,
                offset,
                len,
                frame_size,
            } => write!(
                f,
                "{len} B at offset {offset} of UMEM frame {frame} do not fit its {frame_size} B"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Counts of frame moves.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrameCounts {
    /// Frames given on the fill ring.
    pub filled: u64,
    /// Frames received (RX descriptors).
    pub received: u64,
    /// Frames given on the TX ring.
    pub sent: u64,
    /// Frames completed (completion ring).
    pub completed: u64,
}

/// The state of every frame of a UMEM (aligned mode).
#[derive(Debug, Clone)]
pub struct Frames {
    frame_size: u32,
    state: Vec<FrameState>,
    counts: FrameCounts,
}

impl Frames {
    /// `count` frames of `frame_size` bytes, all with the application.
    pub fn new(count: u32, frame_size: u32) -> Frames {
        Frames {
            frame_size,
            state: vec![FrameState::User; count as usize],
            counts: FrameCounts::default(),
        }
    }

    /// Where frame `frame` is (`None` past the UMEM).
    pub fn state(&self, frame: u32) -> Option<FrameState> {
        self.state.get(frame as usize).copied()
    }

    /// Frames in `state`.
    pub fn in_state(&self, state: FrameState) -> usize {
        self.state.iter().filter(|s| **s == state).count()
    }

    /// The moves so far.
    pub fn counts(&self) -> FrameCounts {
        self.counts
    }

    /// The address of the start of frame `frame`.
    pub(crate) fn addr(&self, frame: u32) -> u64 {
        u64::from(frame) * u64::from(self.frame_size)
    }

    fn frame_of(&self, addr: u64) -> Result<(u32, u32), FrameError> {
        // A UMEM of 0-byte frames has no address at all (found by fuzz/, target xsk: the
        // division by zero panicked on the first descriptor).
        let size = u64::from(self.frame_size);
        let Some(frame) = addr
            .checked_div(size)
            .filter(|&f| f < self.state.len() as u64)
        else {
            return Err(FrameError::OutOfRange { addr });
        };
        // Both fit: frame < count (a u32) and the remainder < frame_size.
        Ok((frame as u32, (addr % size) as u32))
    }

    fn expect(&self, frame: u32, expected: FrameState) -> Result<(), FrameError> {
        match self.state(frame) {
            None => Err(FrameError::OutOfRange {
                addr: self.addr(frame),
            }),
            Some(s) if s == expected => Ok(()),
            Some(state) => Err(FrameError::WrongState {
                frame,
                state,
                expected,
            }),
        }
    }

    /// Frame `frame` goes on the fill ring: returns the address to write there.
    pub fn give_fill(&mut self, frame: u32) -> Result<u64, FrameError> {
        self.expect(frame, FrameState::User)?;
        self.state[frame as usize] = FrameState::Fill;
        self.counts.filled += 1;
        Ok(self.addr(frame))
    }

    /// Frame `frame` goes on the TX ring with `len` bytes at `offset`: returns the descriptor's
    /// address.
    pub fn give_tx(&mut self, frame: u32, offset: u32, len: u32) -> Result<u64, FrameError> {
        self.expect(frame, FrameState::User)?;
        if u64::from(offset) + u64::from(len) > u64::from(self.frame_size) || len == 0 {
            return Err(FrameError::TooLong {
                frame,
                offset,
                len,
                frame_size: self.frame_size,
            });
        }
        self.state[frame as usize] = FrameState::Tx;
        self.counts.sent += 1;
        Ok(self.addr(frame) + u64::from(offset))
    }

    /// Takes back a frame given with [`Frames::give_fill`] or [`Frames::give_tx`] whose ring
    /// entry was reserved but never published.
    pub fn take_back(&mut self, frame: u32) -> Result<(), FrameError> {
        match self.state(frame) {
            Some(FrameState::Fill) => self.counts.filled -= 1,
            Some(FrameState::Tx) => self.counts.sent -= 1,
            Some(state) => {
                return Err(FrameError::WrongState {
                    frame,
                    state,
                    expected: FrameState::Fill,
                })
            }
            None => {
                return Err(FrameError::OutOfRange {
                    addr: self.addr(frame),
                })
            }
        }
        self.state[frame as usize] = FrameState::User;
        Ok(())
    }

    /// An RX descriptor (`addr`, `len`): the frame must be on the fill ring and the data inside
    /// it. The frame is the application's afterwards.
    pub fn on_rx(&mut self, addr: u64, len: u32) -> Result<RxSpan, FrameError> {
        let (frame, offset) = self.frame_of(addr)?;
        self.expect(frame, FrameState::Fill)?;
        if u64::from(offset) + u64::from(len) > u64::from(self.frame_size) {
            return Err(FrameError::TooLong {
                frame,
                offset,
                len,
                frame_size: self.frame_size,
            });
        }
        self.state[frame as usize] = FrameState::User;
        self.counts.received += 1;
        Ok(RxSpan { frame, offset, len })
    }

    /// A completion-ring entry: the frame must be on the TX ring. Returns the frame, the
    /// application's again.
    pub fn on_complete(&mut self, addr: u64) -> Result<u32, FrameError> {
        let (frame, _) = self.frame_of(addr)?;
        self.expect(frame, FrameState::Tx)?;
        self.state[frame as usize] = FrameState::User;
        self.counts.completed += 1;
        Ok(frame)
    }
}

/// The largest packet one RX frame holds: the frame less `XDP_PACKET_HEADROOM` and the UMEM's
/// headroom.
pub fn rx_capacity(frame_size: u32, headroom: u32) -> u32 {
    frame_size.saturating_sub(XDP_PACKET_HEADROOM + headroom)
}
