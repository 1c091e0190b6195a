//! The receive buffer of a connection whose payload lands in an area a NIC writes into (zcrx,
//! devmem): at most half the area, so that TCP's out-of-order queue cannot hold every buffer
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
    let Some(limit) = zcrx_socket_limit(area_len, now as u64, tcp_rmem_max()) else {
        return Ok(());
    };
    zcnet_sys::sock::limit_recv_buffer(fd, usize::try_from(limit).unwrap_or(usize::MAX))
        .map_err(|e| Error::io(what(), e))?;
    Ok(())
}

/// `net.ipv4.tcp_rmem`'s maximum in this network namespace: how far autotuning may grow a
/// socket's receive buffer (0 when it cannot be read).
fn tcp_rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(0)
}
