//! Registering an interface queue (see the parent module): what a host-memory registration
//! asks for ([`HostRegistration`]), and the [`ZcrxIfq`] constructors that register host memory
//! or a dma-buf and assemble the ifq from what the kernel wrote back.

use super::*;

/// How to register a host-memory area (`ZcrxIfq::register_host_on`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostRegistration {
    /// The interface (0 with [`Self::nodev`]).
    pub ifindex: u32,
    /// Its receive queue (0 with [`Self::nodev`]).
    pub rx_queue: u32,
    /// Refill-ring entries (the kernel rounds up to a power of two).
    pub rq_entries: u32,
    /// The receive buffer size (`rx_buf_len`): 0 for the kernel's default, a page. Larger
    /// powers of two need the kernel's `ZCRX_FEATURE_RX_PAGE_SIZE` (Linux 7.0,
    /// [`ZcrxCaps::rx_buf_len`]), a device (NODEV is `EOPNOTSUPP`), a driver that takes the
    /// queue's page size, and an area whose physically contiguous runs are at least that long
    /// (huge pages), else `ERANGE` (io_uring/zcrx.c `io_zcrx_create_area`,
    /// `io_area_max_shift`).
    pub rx_buf_len: u32,
    /// Without a network device (`ZCRX_REG_NODEV`, Linux 7.1).
    pub nodev: bool,
}

impl ZcrxIfq {
    /// Creates a SINGLE_ISSUER|DEFER_TASKRUN|CQE32 ring of `DEFAULT_RING_ENTRIES`, an area of
    /// `area_len` bytes (rounded up to pages) of anonymous memory, and registers receive queue
    /// `rx_queue` of interface `ifindex` with a refill ring of `rq_entries` entries. Errors carry
    /// the kernel's errno ([`explain_register_errno`]); on error nothing stays pinned or open.
    pub fn register(
        ifindex: u32,
        rx_queue: u32,
        area_len: usize,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let ring = ZcrxRing::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(DEFAULT_RING_ENTRIES)?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_on(ring, ifindex, rx_queue, area, rq_entries)
    }

    /// As [`Self::register`] with a ring and an area of the caller's choosing (ring size, CQ
    /// size, huge-page area...). The ring must have been built with SINGLE_ISSUER and
    /// DEFER_TASKRUN (else the kernel says `EINVAL`); the area must be page-aligned mapped memory
    /// (anonymous or huge pages; `Backing::Caller` is refused with `EINVAL`). Taking the mapping
    /// by value guarantees it has not been cut into slots.
    pub(crate) fn register_on(
        ring: ZcrxRing,
        ifindex: u32,
        rx_queue: u32,
        area: Mapping,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let reg = HostRegistration {
            ifindex,
            rx_queue,
            rq_entries,
            ..HostRegistration::default()
        };
        Self::register_host_on(ring, area, reg)
    }

    /// As [`Self::register_on`] without a network device (`ZCRX_REG_NODEV`, Linux 7.1+:
    /// `if_idx` and `if_rxq` 0): RECV_ZC then works on any TCP socket, loopback included, and
    /// the kernel *copies* every received byte into `area` (at most a page per completion, the
    /// same 32-byte CQEs as with a device). Refill entries are consumed only when
    /// [`Self::flush_refill_queue`] asks ([`ZcrxReceiver::flush_refills`] does). Host memory
    /// only (a dma-buf area needs a device to attach to). A kernel without NODEV (6.18) refuses
    /// the flag with `EINVAL` (after `EPERM` without CAP_NET_ADMIN, and the ring checks).
    pub(crate) fn register_nodev_on(
        ring: ZcrxRing,
        area: Mapping,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let reg = HostRegistration {
            rq_entries,
            nodev: true,
            ..HostRegistration::default()
        };
        Self::register_host_on(ring, area, reg)
    }

    /// Registers a host-memory `area` on `ring` as `reg` says: a device queue or none, the
    /// refill ring's size, the buffer size. The ring must be SINGLE_ISSUER|DEFER_TASKRUN with
    /// 32-byte CQEs; `Backing::Caller` memory is refused with `EINVAL`. Where the kernel says
    /// it can ([`ZcrxCaps`]), its copy statistics ([`Self::kernel_stats`]) and its ALLOC_FAIL
    /// and COPY events ([`ZcrxReceiver::events`]) are asked for. Errors are the kernel's errno;
    /// on error nothing stays pinned or open.
    pub(crate) fn register_host_on(
        ring: ZcrxRing,
        area: Mapping,
        reg: HostRegistration,
    ) -> io::Result<ZcrxIfq> {
        if area.backing() == Backing::Caller {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let rq_mem = Mapping::anonymous(refill_region_len(reg.rq_entries))?;
        // SAFETY: the ring (and so its fd) is alive for the whole call. (io-uring's `AsFd` impl
        // is behind its `io_safety` feature.)
        let ring_fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        let opts = RegOpts {
            flags: if reg.nodev { ZCRX_REG_NODEV } else { 0 },
            rx_buf_len: reg.rx_buf_len,
        };
        let (ifindex, rx_queue) = (reg.ifindex, reg.rx_queue);
        // SAFETY: `area` and `rq_mem` are owned here and move into the ZcrxIfq below (on error
        // the kernel has released everything before returning); neither is cut into slots nor
        // caller-backed, so no Rust reference to their bytes exists, and ZcrxIfq touches them
        // only through raw pointers and atomics.
        let done = unsafe {
            register_raw(
                ring_fd,
                ifindex,
                rx_queue,
                reg.rq_entries,
                &area,
                &rq_mem,
                opts,
            )
        }?;
        Self::assemble(ring, rq_mem, ZcrxArea::Host(area), ifindex, rx_queue, done)
    }

    /// As [`Self::register_on`] with a dma-buf area: `len` bytes at `offset` of `dmabuf`
    /// (`IORING_ZCRX_AREA_DMABUF`, Linux 6.16+; 6.18 wants `offset` 0 and `len` the dma-buf's
    /// whole size, see the module docs for the errnos). The ifq keeps `dmabuf` open as long as
    /// the registration. Nothing is checked here: the kernel checks the device first, so its
    /// errno says what is wrong first. On error nothing stays registered or open (the caller's
    /// `dmabuf` aside).
    pub(crate) fn register_dmabuf_on(
        ring: ZcrxRing,
        ifindex: u32,
        rx_queue: u32,
        dmabuf: Arc<OwnedFd>,
        offset: u64,
        len: u64,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let rq_mem = Mapping::anonymous(refill_region_len(rq_entries))?;
        let area_reg = {
            use std::os::fd::AsFd;
            dmabuf_area_reg(dmabuf.as_fd(), offset, len)
        };
        // SAFETY: the ring (and so its fd) is alive for the whole call.
        let ring_fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        let opts = RegOpts::default();
        // SAFETY: `rq_mem` is owned here and moves into the ZcrxIfq below (on error the kernel
        // has released everything before returning), never cut into slots, and used afterwards
        // only through raw pointers and atomics; the dma-buf fd in `area_reg` is open (`dmabuf`
        // is held) for the call and, moved into the ZcrxIfq, for the registration's life.
        let done = unsafe {
            register_area_raw(
                ring_fd, ifindex, rx_queue, rq_entries, area_reg, &rq_mem, opts,
            )
        }?;
        Self::assemble(
            ring,
            rq_mem,
            ZcrxArea::Dmabuf {
                fd: dmabuf,
                offset,
                len,
            },
            ifindex,
            rx_queue,
            done,
        )
    }

    /// The refill ring over `rq_mem` as the kernel described it, and the ifq; on error the ring
    /// is closed first (ending the registration), then the memory is released.
    fn assemble(
        ring: ZcrxRing,
        rq_mem: Mapping,
        area: ZcrxArea,
        ifindex: u32,
        rx_queue: u32,
        done: Registered,
    ) -> io::Result<ZcrxIfq> {
        let base = NonNull::new(rq_mem.addr() as *mut u8)
            .ok_or_else(|| io::Error::other("refill region at address 0"))?;
        // SAFETY: rq_mem is mapped read-write and moves into the ZcrxIfq together with the ring,
        // its only user besides the kernel; on error the ring is closed first (below).
        let refill =
            unsafe { RefillRing::new(base, rq_mem.len(), &done.reg.offsets, done.reg.rq_entries) };
        let refill = match refill {
            Ok(r) => r,
            Err(e) => {
                drop(ring);
                return Err(e);
            }
        };
        // The statistics must lie past the entries the kernel described, inside the region.
        let entries_end = (done.reg.offsets.rqes as usize)
            .saturating_add(done.reg.rq_entries as usize * std::mem::size_of::<IoUringZcrxRqe>());
        let stats = done
            .stats_offset
            .filter(|&off| {
                off >= entries_end
                    && off % 8 == 0
                    && off + std::mem::size_of::<ZcrxStats>() <= rq_mem.len()
            })
            // SAFETY: just checked to lie inside the region, 8-aligned (the base is a page).
            .map(|off| unsafe { base.add(off) }.cast::<ZcrxStats>());
        Ok(ZcrxIfq {
            // DEFER_TASKRUN (the kernel refuses a zcrx ifq without it); the task-run flag only
            // where `receive::receive_ring` made the ring (`with_taskrun_flag`).
            ring: Core::adopt(ring, TaskRun::Defer, false),
            refill,
            rq_mem,
            area,
            zcrx_id: done.reg.zcrx_id,
            if_idx: ifindex,
            if_rxq: rx_queue,
            rq_entries: done.reg.rq_entries,
            offsets: done.reg.offsets,
            area_token: done.area_token,
            nodev: done.flags & ZCRX_REG_NODEV != 0,
            stats,
            buf_len: match done.reg.rx_buf_len {
                0 => u32::try_from(crate::mem::page_size()).unwrap_or(4096),
                n => n,
            },
            events: done.events,
        })
    }
}
