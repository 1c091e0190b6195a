//! RLIMIT_MEMLOCK facts and the errors that name it. The arithmetic (what the kernel charges for
//! a ring, a registered region, a `MSG_ZEROCOPY` send) and the choice between `RLIMIT_MEMLOCK`
//! and `net.core.optmem_max` are `zcnet_core::memlock`'s; this file reads the limits and the
//! capability and words the result.

use crate::error::Error;
use zcnet_core::memlock::{self as core_memlock, RingGeometry};
use zcnet_sys::mem::{Backing, Mapping, HUGE_2M};

/// The soft RLIMIT_MEMLOCK in bytes when the kernel applies it to this process: `None` with
/// `CAP_IPC_LOCK` (nothing is charged) or an unlimited limit.
pub(crate) fn applying_limit() -> Option<u64> {
    if zcnet_sys::os::has_cap_ipc_lock() {
        return None;
    }
    match zcnet_sys::os::memlock_limit() {
        Ok((soft, _)) if soft != libc::RLIM_INFINITY => Some(soft),
        _ => None,
    }
}

/// [`Error::MemlockTooSmall`] for `need` bytes of `what`, refused when `charged` of them would
/// have been charged (the step that failed and those before it), when the kernel applies the
/// limit to this process; `None` when it does not (then `ENOMEM`/`ENOBUFS` has another cause).
pub(crate) fn too_small(what: impl Into<String>, need: u64, charged: u64) -> Option<Error> {
    let limit = applying_limit()?;
    let hard = zcnet_sys::os::memlock_limit().map_or(u64::MAX, |l| l.1);
    Some(Error::MemlockTooSmall {
        what: what.into().into(),
        need,
        limit,
        hard,
        // Refused although what was charged fits: other locked memory of the user counted.
        shared: charged <= limit,
    })
}

fn page() -> u64 {
    zcnet_sys::mem::page_size() as u64
}

/// Bytes an io_uring ring set up with `entries` SQ entries (zcnet's send rings: no CQSIZE,
/// 16-byte CQEs, 64-byte SQEs) charges: none where the kernel no longer charges rings (Linux
/// 7.2; measured, `zcnet_sys::os::uring_rings_charged`), else its pages (6.18, and where the
/// measurement could not tell).
pub(crate) fn ring_bytes(entries: u32) -> u64 {
    if zcnet_sys::os::uring_rings_charged() == Some(false) {
        return 0;
    }
    RingGeometry::for_entries(entries).locked_bytes(page())
}

/// Bytes registering all of `map` as a fixed buffer charges.
pub(crate) fn registered_bytes(map: &Mapping) -> u64 {
    let folio = match map.backing() {
        Backing::HugeTlb | Backing::TransparentHuge => HUGE_2M as u64,
        _ => page(),
    };
    core_memlock::registered_bytes(map.addr() as u64, map.len() as u64, page(), folio)
}

/// The error for an `ENOBUFS` from a `MSG_ZEROCOPY` send call of `send_len` bytes by a sender
/// of `buffers` x `buf_size`: RLIMIT_MEMLOCK or `net.core.optmem_max`, as the facts say.
pub(crate) fn msg_zerocopy_enobufs(
    send_len: usize,
    buffers: usize,
    buf_size: usize,
    in_flight: bool,
) -> Error {
    let optmem_max = crate::sysctl_u64("net/core/optmem_max");
    let facts = core_memlock::EnobufsFacts {
        memlock: applying_limit(),
        optmem_max,
        send_len: send_len as u64,
        buffers: buffers as u64,
        buf_size: buf_size as u64,
        in_flight,
        page: page(),
    };
    match core_memlock::enobufs_cause(&facts) {
        core_memlock::EnobufsCause::Memlock {
            need,
            limit,
            shared,
        } => Error::MemlockTooSmall {
            what: format!(
                "MSG_ZEROCOPY sends of {} ({buffers} in flight; the kernel pins each send's pages plus 2 until its notification, and refuses with ENOBUFS)",
                crate::error::size_words(buf_size.max(send_len) as u64)
            ).into(),
            need,
            limit,
            hard: zcnet_sys::os::memlock_limit().map_or(u64::MAX, |l| l.1),
            shared,
        },
        core_memlock::EnobufsCause::Optmem { current, .. } => Error::OptmemExhausted {
            optmem_max: current,
        },
    }
}

/// The RLIMIT_MEMLOCK refusal a [`crate::Sender`] of `cfg` on `region` would meet when it is
/// made, found before anything else is (a connection, the sender): `uring-zc` locks its ring
/// and registers the region, `uring` locks its ring, each charged in full when the sender is
/// made (what the uring backend's `Charges` counts, the figures of the refusal itself);
/// `msg-zerocopy` is charged per send until its notification, so it is refused only when the
/// limit cannot hold even one send (a limit between one send and all in flight makes the sender
/// wait for notifications instead), with the same error its send would meet. `None` when they
/// fit the limit, when the kernel does not apply it (CAP_IPC_LOCK, unlimited), and for the
/// other modes (`auto` falls back instead).
/// Other locked memory of the same user can still make the sender's own setup fail.
pub fn memlock_refusal(region: &crate::Region, cfg: &super::TxConfig) -> Option<Error> {
    memlock_refusal_for(region, cfg, 1)
}

/// [`memlock_refusal`] for `senders` senders alike (the streams of one process, each with its
/// own ring and region), which the limit holds together: the charge is `senders` times one's.
pub fn memlock_refusal_for(
    region: &crate::Region,
    cfg: &super::TxConfig,
    senders: u64,
) -> Option<Error> {
    let stride = super::buffer_stride(cfg.buf_size).max(1);
    let buffers = cfg.buffers().min(region.len() / stride);
    let zero_copy = match cfg.mode {
        super::TxMode::UringZc => true,
        super::TxMode::Uring => false,
        super::TxMode::MsgZerocopy => {
            let limit = applying_limit()?;
            let one = core_memlock::msg_zerocopy_send_bytes(cfg.buf_size as u64, page());
            return (limit < one)
                .then(|| msg_zerocopy_enobufs(cfg.buf_size, buffers, cfg.buf_size, false));
        }
        _ => return None,
    };
    let c = super::uring::Charges::of(region.mapping(), buffers, zero_copy);
    let senders = senders.max(1);
    let need = (c.ring_bytes + c.region_bytes).saturating_mul(senders);
    let limit = applying_limit()?;
    if need <= limit {
        return None;
    }
    let what = if senders == 1 {
        c.what
    } else {
        format!("{senders} senders, each with {}", c.what)
    };
    too_small(what, need, need)
}
