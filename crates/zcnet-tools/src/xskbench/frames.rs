//! The frames `bench xsk` sends, and the receiver's check of each one.

use super::*;

/// The frame every packet of a `size`-byte run is copied from: headers, sequence number 0,
/// then a fixed byte pattern.
pub fn template(flow: &UdpFlow, size: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; size];
    let n = flow
        .write_with(&mut buf, 0, size - HEADERS_LEN, |p| {
            for (i, b) in p.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(7).wrapping_add(3);
            }
            p[..8].fill(0);
        })
        .map_err(|e| Error::invalid_input(format!("building a {size} B frame: {e}")))?;
    debug_assert_eq!(n, size);
    Ok(buf)
}

/// Writes frame `seq` into `buf` (at least the template's length); returns its length.
pub(super) fn write_frame(buf: &mut [u8], tmpl: &[u8], seq: u64) -> usize {
    buf[..tmpl.len()].copy_from_slice(tmpl);
    buf[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    tmpl.len()
}

/// The receiver's check of every frame: frames of other flows (ARP, IPv6 neighbour discovery)
/// are skipped; a frame of the flow must equal the template but for its sequence number, and
/// sequence numbers must rise.
#[derive(Debug)]
pub struct SeqCheck<'a> {
    tmpl: &'a [u8],
    next: u64,
    received: u64,
    gaps: u64,
    bad: u64,
    first_bad: Option<String>,
}

impl<'a> SeqCheck<'a> {
    /// A check against `tmpl`.
    pub fn new(tmpl: &'a [u8]) -> SeqCheck<'a> {
        SeqCheck {
            tmpl,
            next: 0,
            received: 0,
            gaps: 0,
            bad: 0,
            first_bad: None,
        }
    }

    pub(super) fn is_flow(frame: &[u8]) -> bool {
        frame.len() >= HEADERS_LEN
            && frame[12..14] == [0x08, 0x00]
            && frame[23] == 17
            && frame[36..38] == PORT.to_be_bytes()
    }

    fn fail(&mut self, why: String) {
        self.bad += 1;
        if self.first_bad.is_none() {
            self.first_bad = Some(why);
        }
    }

    /// Checks one received frame.
    pub fn frame(&mut self, frame: &[u8]) {
        if !Self::is_flow(frame) {
            return;
        }
        let t = self.tmpl;
        if frame.len() != t.len() {
            return self.fail(format!("a {} B frame, {} B sent", frame.len(), t.len()));
        }
        let end = SEQ_OFFSET + 8;
        if frame[..SEQ_OFFSET] != t[..SEQ_OFFSET] || frame[end..] != t[end..] {
            return self.fail("a frame's bytes differ from those sent".into());
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&frame[SEQ_OFFSET..end]);
        let seq = u64::from_le_bytes(s);
        if seq < self.next {
            return self.fail(format!(
                "frame {seq} after frame {}: duplicated or reordered",
                self.next - 1
            ));
        }
        self.gaps += seq - self.next;
        self.next = seq + 1;
        self.received += 1;
    }

    /// Frames of the flow received and verified.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Frames missing between those received.
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// The highest sequence number seen + 1.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Frames of the flow that failed the check, and the first reason.
    pub fn failures(&self) -> (u64, Option<&str>) {
        (self.bad, self.first_bad.as_deref())
    }
}
