//! The socket error queue: `zcnet_core::errqueue::parse_control` (the walk zcnet-sys's
//! `read_errqueue` does over what `recvmsg(MSG_ERRQUEUE)` wrote) on arbitrary control bytes and
//! `msg_controllen`, then each MSG_ZEROCOPY completion it finds applied to a `ZcRanges`, as the
//! MSG_ZEROCOPY sender does. No input reads out of range or panics; every entry comes from an
//! `IP_RECVERR`/`IPV6_RECVERR` message long enough for a `sock_extended_err`; completions
//! count every id once.

use crate::input::Input;
use zcnet_core::errqueue::{
    parse_control, ErrqueueEntry, CMSG_HDR_LEN, IPV6_RECVERR, IP_RECVERR, RECVERR_CMSG_LEN, SOL_IP,
    SOL_IPV6, SO_EE_ORIGIN_ZEROCOPY,
};
use zcnet_core::zc_ranges::ZcRanges;

/// Control bytes as the kernel writes them (with chosen fields), or damaged, or anything.
fn control(inp: &mut Input<'_>) -> Vec<u8> {
    if inp.one_in(4) {
        return inp.small_bytes(160).to_vec();
    }
    let mut c = Vec::new();
    for _ in 0..inp.index(5) {
        let (level, ty) = match inp.u8() % 6 {
            0 => (SOL_IPV6, IPV6_RECVERR),
            1 => (i32::from(inp.u8()), i32::from(inp.u8())),
            _ => (SOL_IP, IP_RECVERR),
        };
        let mut ee = [0u8; 16];
        if !inp.one_in(4) {
            ee[4] = SO_EE_ORIGIN_ZEROCOPY;
            ee[6] = inp.u8() & 1;
            ee[8..].copy_from_slice(&inp.array::<8>());
        } else {
            ee = inp.array();
        }
        let extra = inp.pick(&[0usize, 0, 16, 3]);
        let dlen = (ee.len() + extra).saturating_sub(if inp.one_in(16) { 1 } else { 0 });
        let len = CMSG_HDR_LEN + dlen;
        let at = c.len();
        c.resize(at + len.div_ceil(8) * 8, 0);
        c[at..at + 8].copy_from_slice(&(len as u64).to_ne_bytes());
        c[at + 8..at + 12].copy_from_slice(&level.to_ne_bytes());
        c[at + 12..at + 16].copy_from_slice(&ty.to_ne_bytes());
        let n = dlen.min(16);
        c[at + 16..at + 16 + n].copy_from_slice(&ee[..n]);
    }
    for _ in 0..inp.index(3) {
        if !c.is_empty() {
            let at = inp.index(c.len());
            c[at] = inp.u8();
        }
    }
    c
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut r: ZcRanges<u32> = ZcRanges::starting_at(inp.u32() & 0xffff_ff00);
    let sends = inp.index(200) as u32;
    for i in 0..sends {
        r.push(u64::from(i) + 1, i);
    }
    let mut done = vec![false; sends as usize];
    let mut completed = Vec::new();
    while !inp.is_empty() {
        let buf = control(&mut inp);
        let controllen = match inp.u8() % 4 {
            0 => inp.index(buf.len() + 9),
            _ => buf.len(),
        };
        let mut out = vec![ErrqueueEntry::Other {
            errno: 1,
            origin: 0,
        }];
        let n = parse_control(&buf, controllen, &mut out);
        assert_eq!(out.len(), n + 1, "the count is what was appended");
        assert!(n <= controllen.min(buf.len()) / RECVERR_CMSG_LEN + 1);
        for e in &out[1..] {
            if let ErrqueueEntry::Zerocopy { lo, hi, copied } = *e {
                completed.clear();
                let o = r.complete(lo, hi, copied, &mut completed);
                assert_eq!(
                    o.fresh + o.duplicate + o.unknown,
                    u64::from(hi.wrapping_sub(lo)) + 1
                );
                for c in &completed {
                    assert!(!done[c.token as usize], "send {} completed twice", c.token);
                    done[c.token as usize] = true;
                    assert_eq!(c.bytes, u64::from(c.token) + 1);
                }
            }
        }
        let left = done.iter().filter(|d| !**d).count();
        assert_eq!(r.outstanding(), left);
    }
}
