//! The UDP datagram check of `recv --udp --verify` (`zcnet_core::dgram::DatagramCheck` and
//! `Pattern::locate`), fed what a peer or the network can deliver: slices of the pattern at any
//! stream offset (in order, lost, reordered, duplicated), slices with a byte changed, and
//! arbitrary bytes. Whatever it accepts must be the pattern at the offset it names, and its
//! counters must add up; nothing may panic or overflow, whatever the offsets.
//! Shared by fuzz/fuzz_targets/dgram.rs and crates/zcnet-tools/tests/fuzz_smoke.rs.

use crate::input::Input;
use zcnet_core::{dgram::DatagramCheck, Pattern};

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let p = Pattern::new(u64::from(inp.u32()));
    let mut check = DatagramCheck::new(p);
    let (mut bytes, mut datagrams, mut end) = (0u64, 0u64, 0u64);
    let mut sent_end = 0u64;
    while !inp.is_empty() {
        let len = inp.index(2000);
        let buf: Vec<u8> = match inp.index(5) {
            // The next datagram in order, or one further on (those between lost).
            0 | 1 => {
                let at = sent_end + inp.index(3) as u64 * len as u64;
                let mut b = vec![0u8; len];
                p.fill(at, &mut b);
                sent_end = at.saturating_add(len as u64);
                b
            }
            // Any offset at all (a late or duplicated datagram, or one near the end of u64).
            2 => {
                let at = match inp.index(3) {
                    0 => u64::MAX - inp.index(4096) as u64,
                    _ => u64::from(inp.u32()),
                };
                let mut b = vec![0u8; len.min(usize::try_from(u64::MAX - at).unwrap_or(len))];
                p.fill(at, &mut b);
                b
            }
            // The pattern with one byte changed.
            3 => {
                let mut b = vec![0u8; len.max(1)];
                p.fill(sent_end, &mut b);
                let i = inp.index(b.len());
                b[i] ^= inp.u8() | 1;
                b
            }
            // Bytes from the input.
            _ => (0..len.min(inp.len())).map(|_| inp.u8()).collect(),
        };
        match check.datagram(&buf) {
            Ok(at) => {
                assert!(
                    p.verify(at, &buf).is_ok(),
                    "accepted at {at}, not the pattern there"
                );
                let stop = at.saturating_add(buf.len() as u64);
                bytes += buf.len() as u64;
                datagrams += 1;
                end = end.max(stop);
            }
            Err(m) => {
                // Refused: the pattern nowhere (and the mismatch is a real difference).
                assert!(p.locate(&buf).is_none());
                assert_ne!(m.expected, m.got, "{m:?}");
            }
        }
        assert_eq!(
            (check.bytes(), check.datagrams(), check.end()),
            (bytes, datagrams, end)
        );
        assert_eq!(check.missing_bytes(), end.saturating_sub(bytes));
        assert!(check.located() <= datagrams && check.late() <= datagrams);
    }
}
