//! AF_PACKET mmap rings (`PACKET_MMAP`), sans-IO: the ring request the kernel accepts, where
//! each TX frame lies, and walking a TPACKET_V3 receive block's packets from plain bytes.
//!
//! Layouts and rules are those of Linux 6.18:
//! - `include/uapi/linux/if_packet.h`: `struct tpacket_req3`, `struct tpacket_block_desc`
//!   (with `struct tpacket_hdr_v1`), `struct tpacket3_hdr`, the `TP_STATUS_*` bits,
//!   `TPACKET_ALIGNMENT` (16) and `TPACKET3_HDRLEN`.
//! - `Documentation/networking/packet_mmap.rst`: the ring is `tp_block_nr` blocks of
//!   `tp_block_size` bytes mapped back to back; a V3 RX block belongs to user space while its
//!   `block_status` has `TP_STATUS_USER`, holds `num_pkts` packets starting
//!   `offset_to_first_pkt` bytes into the block, each packet's `tp_next_offset` leading to the
//!   next; giving it back is writing `TP_STATUS_KERNEL`. A TX frame is a `tpacket3_hdr`
//!   followed (at `TPACKET3_HDRLEN - sizeof(struct sockaddr_ll)`) by the packet; V3 TX frames
//!   must have `tp_next_offset == 0`.
//! - `net/packet/af_packet.c` (`packet_set_ring`, `prb_open_block`, `prb_fill_curr_block`,
//!   `tpacket_parse_header`): the checks on the request, packets aligned to 8 bytes
//!   (`V3_ALIGNMENT`) inside a block, the first one after the 48-byte block descriptor, the
//!   last one's `tp_next_offset` set to 0 when the block is closed.
//!
//! The memory ordering (an acquire load of `block_status` before reading the block, a release
//! store of `TP_STATUS_KERNEL` after) is zcnet-rawbench's `af_packet`; here a block is only
//! bytes, and anything the kernel could have written wrong is an error, never a panic or a read
//! out of range.

use std::fmt;

/// `TPACKET_V3` (`enum tpacket_versions`): the value for `PACKET_VERSION`, and the `version`
/// the kernel writes into each block descriptor.
pub const TPACKET_V3: u32 = 2;
/// `TPACKET_ALIGNMENT`.
pub(crate) const TPACKET_ALIGNMENT: usize = 16;
/// `V3_ALIGNMENT` (af_packet.c): packets in a V3 block start on 8-byte boundaries.
pub const V3_ALIGNMENT: usize = 8;
/// `sizeof(struct tpacket3_hdr)`.
pub const TPACKET3_HDR_LEN: usize = 48;
/// `sizeof(struct sockaddr_ll)`.
pub(crate) const SOCKADDR_LL_LEN: usize = 20;
/// `TPACKET3_HDRLEN`: `TPACKET_ALIGN(sizeof(struct tpacket3_hdr)) + sizeof(struct sockaddr_ll)`.
pub(crate) const TPACKET3_HDRLEN: usize = tpacket_align(TPACKET3_HDR_LEN) + SOCKADDR_LL_LEN;
/// `sizeof(struct tpacket_block_desc)` (version, offset_to_priv, `tpacket_hdr_v1`).
pub const BLOCK_DESC_LEN: usize = 48;
/// Byte offset of `block_status` in a block (`tpacket_block_desc.hdr.bh1.block_status`).
pub const BLOCK_STATUS_OFFSET: usize = 8;
/// Byte offset of `tp_status` in a `tpacket3_hdr` (a TX frame's status word).
pub const TX_STATUS_OFFSET: usize = 20;
/// Byte offset of `tp_len` in a `tpacket3_hdr`.
pub const TX_LEN_OFFSET: usize = 16;
/// Byte offset of `tp_snaplen` in a `tpacket3_hdr`.
pub const TX_SNAPLEN_OFFSET: usize = 12;
/// Byte offset of `tp_next_offset` in a `tpacket3_hdr` (0 in every TX frame).
pub const TX_NEXT_OFFSET_OFFSET: usize = 0;
/// Where the packet starts in a V3 TX frame without `PACKET_TX_HAS_OFF`:
/// `tp_hdrlen - sizeof(struct sockaddr_ll)` (af_packet.c `tpacket_parse_header`).
pub const TX_DATA_OFFSET: usize = TPACKET3_HDRLEN - SOCKADDR_LL_LEN;

/// RX status: the block (or frame) is the kernel's.
pub const TP_STATUS_KERNEL: u32 = 0;
/// RX status: the block is user space's.
pub const TP_STATUS_USER: u32 = 1 << 0;
/// RX status: packets were dropped since the statistics were last read.
#[cfg(test)]
pub(crate) const TP_STATUS_LOSING: u32 = 1 << 2;
/// RX status: the block was closed by its timeout, not because it was full.
#[cfg(test)]
pub(crate) const TP_STATUS_BLK_TMO: u32 = 1 << 5;
/// RX status: the kernel validated the transport checksum.
#[cfg(test)]
pub(crate) const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
/// TX status: the frame is to be sent at the next `send()`.
pub const TP_STATUS_SEND_REQUEST: u32 = 1 << 0;
/// TX status: the frame is being sent.
pub const TP_STATUS_SENDING: u32 = 1 << 1;
/// TX status: the kernel refused the frame (and stopped there, without `PACKET_LOSS`).
pub const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;

/// `TPACKET_ALIGN(x)`.
pub(crate) const fn tpacket_align(x: usize) -> usize {
    (x + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

/// What does not fit: a refused ring request, or a block whose contents do not add up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpacketError {
    /// The ring request breaks one of `packet_set_ring`'s rules (the kernel would say EINVAL).
    BadRequest(String),
    /// The block is shorter than its descriptor or than its own `blk_len`.
    ShortBlock {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// The block descriptor names another TPACKET version.
    BadVersion(u32),
    /// The block descriptor's offsets or lengths do not fit the block.
    BadBlock(&'static str),
    /// Packet `index` of the block does not fit it.
    BadPacket {
        /// Which packet (from 0).
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
}

impl fmt::Display for TpacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TpacketError::BadRequest(s) => write!(f, "TPACKET ring request: {s}"),
            TpacketError::ShortBlock { need, have } => {
                write!(f, "TPACKET_V3 block needs {need} B, has {have} B")
            }
            TpacketError::BadVersion(v) => {
                write!(
                    f,
                    "TPACKET block version {v} is not TPACKET_V3 ({TPACKET_V3})"
                )
            }
            TpacketError::BadBlock(w) => write!(f, "TPACKET_V3 block descriptor: {w}"),
            TpacketError::BadPacket { index, what } => {
                write!(f, "TPACKET_V3 block, packet {index}: {what}")
            }
        }
    }
}

impl std::error::Error for TpacketError {}

/// A ring request (`struct tpacket_req3`), checked as `packet_set_ring` checks it for a
/// TPACKET_V3 socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingRequest {
    /// `tp_block_size`: a multiple of the page size.
    pub block_size: u32,
    /// `tp_block_nr`.
    pub block_nr: u32,
    /// `tp_frame_size`: a multiple of 16, at least `TPACKET3_HDRLEN`.
    pub frame_size: u32,
    /// `tp_frame_nr`: exactly `block_size / frame_size * block_nr`.
    pub frame_nr: u32,
    /// `tp_retire_blk_tov`: RX only, ms after which a block that is not full is handed over
    /// anyway (0: the kernel derives it from the link speed).
    pub retire_blk_tov: u32,
    /// `tp_sizeof_priv`: a private area at the start of each RX block (0 here).
    pub sizeof_priv: u32,
    /// `tp_feature_req_word`: `TP_FT_REQ_FILL_RXHASH` or 0.
    pub feature_req_word: u32,
}

/// `BLK_PLUS_PRIV(priv)`: the block descriptor plus the private area, 8-aligned.
const fn blk_plus_priv(sizeof_priv: usize) -> usize {
    align8(BLOCK_DESC_LEN) + align8(sizeof_priv)
}

const fn align8(x: usize) -> usize {
    (x + V3_ALIGNMENT - 1) & !(V3_ALIGNMENT - 1)
}

impl RingRequest {
    /// A TPACKET_V3 receive ring: `block_nr` blocks of `block_size` bytes, each handed to user
    /// space when full or after `retire_ms` milliseconds. `frame_size` only has to satisfy the
    /// kernel's checks for V3 receive (packets are packed by their length), 2048 here.
    pub fn rx_v3(
        block_size: u32,
        block_nr: u32,
        retire_ms: u32,
        page_size: usize,
    ) -> Result<RingRequest, TpacketError> {
        let frame_size = 2048u32.min(block_size);
        let r = RingRequest {
            block_size,
            block_nr,
            frame_size,
            frame_nr: block_size
                .checked_div(frame_size)
                .unwrap_or(0)
                .saturating_mul(block_nr),
            retire_blk_tov: retire_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        r.check(page_size, false)?;
        Ok(r)
    }

    /// A TPACKET_V3 transmit ring: `frame_nr` frames of `frame_size` bytes in blocks of
    /// `block_size` bytes (`frame_nr` is rounded down to whole blocks).
    pub fn tx_v3(
        block_size: u32,
        frame_size: u32,
        frame_nr: u32,
        page_size: usize,
    ) -> Result<RingRequest, TpacketError> {
        let per_block = block_size.checked_div(frame_size).unwrap_or(0);
        let block_nr = frame_nr.checked_div(per_block).unwrap_or(0);
        let r = RingRequest {
            block_size,
            block_nr,
            frame_size,
            frame_nr: per_block * block_nr,
            retire_blk_tov: 0,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        r.check(page_size, true)?;
        Ok(r)
    }

    /// The checks of `packet_set_ring` (Linux 6.18) for a TPACKET_V3 socket with no
    /// `PACKET_RESERVE`: EINVAL from the kernel for anything refused here.
    pub fn check(&self, page_size: usize, tx: bool) -> Result<(), TpacketError> {
        let bad = |s: String| Err(TpacketError::BadRequest(s));
        let (bs, fs) = (self.block_size as usize, self.frame_size as usize);
        if bs == 0 || bs > i32::MAX as usize || page_size == 0 || !bs.is_multiple_of(page_size) {
            return bad(format!(
                "block size {bs} is not a positive multiple of the page size ({page_size})"
            ));
        }
        if self.block_nr == 0 {
            return bad("no blocks".into());
        }
        let min_frame = TPACKET3_HDRLEN;
        if !tx && bs < blk_plus_priv(self.sizeof_priv as usize) + min_frame {
            return bad(format!("block size {bs} leaves no room for a packet"));
        }
        if fs < min_frame {
            return bad(format!(
                "frame size {fs} is smaller than TPACKET3_HDRLEN ({min_frame})"
            ));
        }
        if !fs.is_multiple_of(TPACKET_ALIGNMENT) {
            return bad(format!("frame size {fs} is not a multiple of 16"));
        }
        let per_block = bs / fs;
        if per_block == 0 {
            return bad(format!(
                "frame size {fs} is larger than the block size {bs}"
            ));
        }
        if (per_block as u64) * u64::from(self.block_nr) != u64::from(self.frame_nr) {
            return bad(format!(
                "frame count {} is not {per_block} frames per block × {} blocks",
                self.frame_nr, self.block_nr
            ));
        }
        if tx && (self.retire_blk_tov != 0 || self.sizeof_priv != 0 || self.feature_req_word != 0) {
            return bad("a TX ring takes no block timeout, private area or feature word".into());
        }
        if self.ring_len().is_none() {
            return bad("ring size overflows".into());
        }
        Ok(())
    }

    /// Bytes of the mapping (`block_size * block_nr`).
    pub fn ring_len(&self) -> Option<usize> {
        (self.block_size as usize).checked_mul(self.block_nr as usize)
    }

    /// Frames per block.
    pub fn frames_per_block(&self) -> u32 {
        self.block_size.checked_div(self.frame_size).unwrap_or(0)
    }

    /// Where frame `i` (`i < frame_nr`) starts in the mapping: frames do not span blocks
    /// (packet_mmap.rst, "Mapping and use of the circular buffer").
    pub fn frame_offset(&self, i: u32) -> usize {
        let per = self.frames_per_block().max(1);
        (i / per) as usize * self.block_size as usize
            + (i % per) as usize * self.frame_size as usize
    }

    /// Where block `b` starts in the mapping.
    pub fn block_offset(&self, b: u32) -> usize {
        b as usize * self.block_size as usize
    }

    /// The largest packet a TX frame carries (`tp_len` up to
    /// `frame_size - (tp_hdrlen - sizeof(struct sockaddr_ll))`, af_packet.c `tpacket_snd`).
    pub fn tx_capacity(&self) -> usize {
        (self.frame_size as usize).saturating_sub(TX_DATA_OFFSET)
    }

    /// The struct as the kernel reads it (seven native-endian `u32`s).
    pub fn to_words(&self) -> [u32; 7] {
        [
            self.block_size,
            self.block_nr,
            self.frame_size,
            self.frame_nr,
            self.retire_blk_tov,
            self.sizeof_priv,
            self.feature_req_word,
        ]
    }
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn rd64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// A TPACKET_V3 block descriptor (`struct tpacket_block_desc` with `tpacket_hdr_v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// `version`: [`TPACKET_V3`].
    pub version: u32,
    /// `offset_to_priv`.
    pub(crate) offset_to_priv: u32,
    /// `block_status`: `TP_STATUS_USER` (| `TP_STATUS_LOSING`, `TP_STATUS_BLK_TMO`) when handed
    /// over; `TP_STATUS_KERNEL` otherwise.
    pub(crate) block_status: u32,
    /// `num_pkts`.
    pub num_pkts: u32,
    /// `offset_to_first_pkt`.
    pub(crate) offset_to_first_pkt: u32,
    /// `blk_len`: bytes used, descriptor and padding included.
    pub blk_len: u32,
    /// `seq_num`: 1 for the first block the kernel opens, then +1 per block.
    pub(crate) seq_num: u64,
    /// `ts_first_pkt` (seconds, nanoseconds).
    pub(crate) ts_first_pkt: (u32, u32),
    /// `ts_last_pkt` (seconds, nanoseconds).
    pub(crate) ts_last_pkt: (u32, u32),
}

impl BlockHeader {
    /// Reads the descriptor at the start of `block`.
    pub(crate) fn parse(block: &[u8]) -> Result<BlockHeader, TpacketError> {
        if block.len() < BLOCK_DESC_LEN {
            return Err(TpacketError::ShortBlock {
                need: BLOCK_DESC_LEN,
                have: block.len(),
            });
        }
        Ok(BlockHeader {
            version: rd32(block, 0),
            offset_to_priv: rd32(block, 4),
            block_status: rd32(block, 8),
            num_pkts: rd32(block, 12),
            offset_to_first_pkt: rd32(block, 16),
            blk_len: rd32(block, 20),
            seq_num: rd64(block, 24),
            ts_first_pkt: (rd32(block, 32), rd32(block, 36)),
            ts_last_pkt: (rd32(block, 40), rd32(block, 44)),
        })
    }

    /// Whether the block is user space's (`TP_STATUS_USER`).
    #[cfg(test)]
    pub(crate) fn is_user(&self) -> bool {
        self.block_status & TP_STATUS_USER != 0
    }

    /// Whether the kernel dropped packets since the statistics were last read.
    #[cfg(test)]
    pub(crate) fn is_losing(&self) -> bool {
        self.block_status & TP_STATUS_LOSING != 0
    }

    /// Whether the block was closed by its timeout rather than full.
    #[cfg(test)]
    pub(crate) fn timed_out(&self) -> bool {
        self.block_status & TP_STATUS_BLK_TMO != 0
    }
}

/// A packet's header in a V3 block (`struct tpacket3_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// `tp_next_offset`: bytes from this header to the next one (0 for the last).
    pub(crate) next_offset: u32,
    /// `tp_sec`.
    pub(crate) sec: u32,
    /// `tp_nsec`.
    pub(crate) nsec: u32,
    /// `tp_snaplen`: bytes captured.
    pub snaplen: u32,
    /// `tp_len`: the packet's length on the wire.
    pub len: u32,
    /// `tp_status`: `TP_STATUS_CSUMNOTREADY`, `TP_STATUS_CSUM_VALID`, VLAN bits…
    pub(crate) status: u32,
    /// `tp_mac`: where the link-layer header starts, from this header.
    pub mac: u16,
    /// `tp_net`: where the network header starts, from this header.
    pub(crate) net: u16,
    /// `hv1.tp_rxhash`.
    pub(crate) rxhash: u32,
    /// `hv1.tp_vlan_tci`.
    pub(crate) vlan_tci: u32,
    /// `hv1.tp_vlan_tpid`.
    pub(crate) vlan_tpid: u16,
}

impl PacketHeader {
    fn parse(b: &[u8]) -> PacketHeader {
        PacketHeader {
            next_offset: rd32(b, 0),
            sec: rd32(b, 4),
            nsec: rd32(b, 8),
            snaplen: rd32(b, 12),
            len: rd32(b, 16),
            status: rd32(b, 20),
            mac: rd16(b, 24),
            net: rd16(b, 26),
            rxhash: rd32(b, 28),
            vlan_tci: rd32(b, 32),
            vlan_tpid: rd16(b, 36),
        }
    }

    /// Whether the packet was truncated (`tp_snaplen < tp_len`).
    pub fn truncated(&self) -> bool {
        self.snaplen < self.len
    }
}

/// One packet of a block: its header, where the header lies in the block, and the bytes
/// captured (from the link-layer header on, `tp_snaplen` of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The header.
    pub header: PacketHeader,
    /// Byte offset of the header in the block.
    pub offset: usize,
    /// The packet.
    pub data: &'a [u8],
}

/// The packets of one block, in order. After the first error it yields nothing more.
#[derive(Debug, Clone)]
pub struct BlockPackets<'a> {
    block: &'a [u8],
    header: BlockHeader,
    index: u32,
    offset: usize,
    failed: bool,
}

/// Reads the descriptor of `block` (the whole block as mapped, `tp_block_size` bytes), checks
/// it, and returns its packets. A block whose descriptor does not fit is an error here; a
/// packet that does not is an error from the iterator.
pub fn walk_block(block: &[u8]) -> Result<BlockPackets<'_>, TpacketError> {
    let header = BlockHeader::parse(block)?;
    if header.version != TPACKET_V3 {
        return Err(TpacketError::BadVersion(header.version));
    }
    let blk_len = header.blk_len as usize;
    if blk_len > block.len() {
        return Err(TpacketError::ShortBlock {
            need: blk_len,
            have: block.len(),
        });
    }
    let first = header.offset_to_first_pkt as usize;
    if first < BLOCK_DESC_LEN {
        return Err(TpacketError::BadBlock(
            "first packet inside the block descriptor",
        ));
    }
    if !first.is_multiple_of(V3_ALIGNMENT) {
        return Err(TpacketError::BadBlock("first packet not 8-byte aligned"));
    }
    if header.num_pkts > 0 && first > blk_len {
        return Err(TpacketError::BadBlock("first packet past blk_len"));
    }
    Ok(BlockPackets {
        block: &block[..blk_len],
        header,
        index: 0,
        offset: first,
        failed: false,
    })
}

impl<'a> BlockPackets<'a> {
    /// The block's descriptor.
    pub fn header(&self) -> &BlockHeader {
        &self.header
    }

    fn bad(&mut self, what: &'static str) -> Option<Result<Packet<'a>, TpacketError>> {
        self.failed = true;
        Some(Err(TpacketError::BadPacket {
            index: self.index,
            what,
        }))
    }
}

impl<'a> Iterator for BlockPackets<'a> {
    type Item = Result<Packet<'a>, TpacketError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.index >= self.header.num_pkts {
            return None;
        }
        let off = self.offset;
        let end = self.block.len();
        if off.checked_add(TPACKET3_HDR_LEN).is_none_or(|e| e > end) {
            return self.bad("header past blk_len");
        }
        let h = PacketHeader::parse(&self.block[off..off + TPACKET3_HDR_LEN]);
        let start = off + usize::from(h.mac);
        if usize::from(h.mac) < TPACKET3_HDR_LEN {
            return self.bad("tp_mac inside the packet header");
        }
        let Some(data_end) = start.checked_add(h.snaplen as usize).filter(|&e| e <= end) else {
            return self.bad("tp_mac + tp_snaplen past blk_len");
        };
        if h.snaplen > h.len {
            return self.bad("tp_snaplen larger than tp_len");
        }
        let last = self.index + 1 == self.header.num_pkts;
        if !last {
            let next = h.next_offset as usize;
            if !next.is_multiple_of(V3_ALIGNMENT) {
                return self.bad("tp_next_offset not 8-byte aligned");
            }
            // The kernel advances by the aligned length of mac offset + snaplen.
            if next < usize::from(h.mac) + h.snaplen as usize {
                return self.bad("tp_next_offset inside the packet");
            }
            if off + next >= end {
                return self.bad("tp_next_offset past blk_len");
            }
            self.offset = off + next;
        }
        self.index += 1;
        Some(Ok(Packet {
            header: h,
            offset: off,
            data: &self.block[start..data_end],
        }))
    }
}

#[cfg(test)]
mod tests;
