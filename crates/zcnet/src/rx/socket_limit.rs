//! The receive buffer of a connection whose payload lands in a zcrx area a NIC writes into:
//! at most half the area, so that TCP's out-of-order queue cannot hold every buffer
//! while the segment that fills its hole waits for one (zcnet_core::rxring::zcrx_socket_limit
//! says why and when).

use super::ConnId;
use crate::error::{Error, Result};
use std::os::fd::RawFd;
use zcnet_core::rxring::zcrx_socket_limit;

/// Lowers `conn`'s receive buffer (`fd`) to half of an area of `area_len` bytes where it, or
/// autotuning's maximum, could exceed that; leaves it alone otherwise.
pub(super) fn limit_to_half_area(conn: ConnId, fd: RawFd, area_len: u64) -> Result<()> {
    let what = || {
        format!("limiting connection {conn}'s receive buffer to half the receive area (SO_RCVBUF)")
    };
    let now = zcnet_sys::sock::recv_buffer(fd).map_err(|e| Error::io(what(), e))?;
    // How far autotuning may grow the buffer: `net.ipv4.tcp_rmem`'s maximum in this network
    // namespace (0 when it cannot be read).
    let autotune_max = crate::sysctl_field("net/ipv4/tcp_rmem", 2).unwrap_or(0);
    let Some(limit) = zcrx_socket_limit(area_len, now as u64, autotune_max) else {
        return Ok(());
    };
    // The kernel keeps twice what it is asked. SO_RCVBUFFORCE (CAP_NET_ADMIN, which zcrx and
    // devmem need anyway) takes a half area larger than `net.core.rmem_max`, where plain
    // SO_RCVBUF would cut it to that.
    zcnet_sys::sock::set_recv_buffer(fd, usize::try_from(limit / 2).unwrap_or(usize::MAX))
        .map_err(|e| Error::io(what(), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A connected TCP socket on loopback (the accepted end).
    fn accepted() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    #[zcnet_testkit::test(timeout = 30)]
    fn a_connection_gets_half_the_area_past_rmem_max_and_a_default_area_leaves_it_alone() {
        zcnet_testkit::require_root("SO_RCVBUFFORCE (CAP_NET_ADMIN), which zcrx and devmem have");
        let rmem_max = crate::sysctl_u64("net/core/rmem_max").expect("net.core.rmem_max");
        let autotune_max = crate::sysctl_field("net/ipv4/tcp_rmem", 2).expect("tcp_rmem");
        let (_c, s) = accepted();
        let fd = s.as_raw_fd();
        let read = || zcnet_sys::sock::recv_buffer(fd).expect("SO_RCVBUF") as u64;
        // An area whose half is above what plain SO_RCVBUF would grant (twice rmem_max) and
        // below autotuning's maximum: the socket reads exactly half the area.
        let area = (8 * rmem_max).min(autotune_max) & !4095;
        if area / 2 > 2 * rmem_max && area / 2 < autotune_max {
            limit_to_half_area(ConnId(1), fd, area).expect("limit");
            assert_eq!(read(), area / 2, "rmem_max {rmem_max}, area {area}");
        } else {
            eprintln!(
                "rmem_max {rmem_max}, tcp_rmem max {autotune_max}: no area between them to check"
            );
        }
        // A 64 KiB area: 32 KiB.
        limit_to_half_area(ConnId(1), fd, 64 << 10).expect("limit");
        assert_eq!(read(), 32 << 10);
        // An area over twice everything the socket may hold: untouched.
        let (_c2, s2) = accepted();
        let before = zcnet_sys::sock::recv_buffer(s2.as_raw_fd()).expect("SO_RCVBUF") as u64;
        let huge = 4 * before.max(autotune_max);
        limit_to_half_area(ConnId(2), s2.as_raw_fd(), huge).expect("limit");
        assert_eq!(
            zcnet_sys::sock::recv_buffer(s2.as_raw_fd()).expect("SO_RCVBUF") as u64,
            before
        );
    }
}
