//! How much of a zcrx area one connection's socket may hold.
//!
//! A NIC bound to an area writes every payload into the area's buffers, and TCP holds them in
//! two places until the application reads them: the receive queue (in order) and the
//! out-of-order queue (segments after a hole). The application can hand back only what it has
//! read; out-of-order segments wait for the hole to be filled. When the area runs dry the
//! driver drops frames (its buffer allocation fails: `ZCRX_EVENT_ALLOC_FAIL`), and the
//! segments after a dropped one land out of order. If the out-of-order queue then holds every
//! buffer, the retransmission of the missing segment finds none either: the connection makes
//! no progress again, and the sender's retransmission timer backs off towards its two-minute
//! ceiling. One connection on a 16-page area does this within seconds.
//!
//! TCP bounds what a socket holds by its receive buffer: past `sk_rcvbuf` (counted in
//! `skb->truesize`, which for a frag in an area buffer is the whole buffer:
//! `skb_add_rx_frag_netmem`) it prunes the out-of-order queue before queueing more
//! (`tcp_try_rmem_schedule`, `tcp_prune_ofo_queue` in net/ipv4/tcp_input.c), and it advertises
//! a window no larger than that buffer allows. A connection whose receive buffer is at most
//! half the area therefore leaves the other half free for the segment that fills the hole.
//! Autotuning (`net.ipv4.tcp_moderate_rcvbuf`) grows a socket's buffer up to
//! `net.ipv4.tcp_rmem`'s maximum, so the limit is set whenever that maximum, or the socket's
//! buffer now, is over half the area; the default 64 MiB area is twice the default maximum of
//! Linux 6.18 (32 MiB), so only smaller areas are limited.

/// The receive buffer (`SO_RCVBUF` as read: bytes of `truesize`) to give a connection added to
/// a zcrx area of `area_len` bytes, whose buffer reads `rcvbuf_now` and which autotuning may
/// grow to `autotune_max` (`net.ipv4.tcp_rmem`'s third value; 0 when unknown): `Some(half the
/// area)` when either could exceed it, `None` when the socket can never hold more than that.
pub fn zcrx_socket_limit(area_len: u64, rcvbuf_now: u64, autotune_max: u64) -> Option<u64> {
    let half = area_len / 2;
    (rcvbuf_now > half || autotune_max > half).then_some(half)
}

#[cfg(test)]
mod tests {
    use super::zcrx_socket_limit;

    #[test]
    fn small_areas_are_limited_to_half() {
        // 64 KiB area, a fresh socket (6.18's tcp_rmem: 4096 131072 33554432): half of it.
        assert_eq!(
            zcrx_socket_limit(64 << 10, 131_072, 32 << 20),
            Some(32 << 10)
        );
        // The socket's buffer alone over half (autotuning unknown).
        assert_eq!(zcrx_socket_limit(1 << 20, 1 << 20, 0), Some(512 << 10));
        // Only autotuning could take it over half.
        assert_eq!(
            zcrx_socket_limit(1 << 20, 131_072, 6 << 20),
            Some(512 << 10)
        );
    }

    #[test]
    fn large_areas_leave_the_socket_alone() {
        // The default 64 MiB area: autotuning's maximum (32 MiB on 6.18) reaches half at most.
        assert_eq!(zcrx_socket_limit(64 << 20, 131_072, 32 << 20), None);
        // Half of a 32 MiB area is under that maximum: limited.
        assert_eq!(
            zcrx_socket_limit(32 << 20, 131_072, 32 << 20),
            Some(16 << 20)
        );
        // Exactly half is within the limit.
        assert_eq!(zcrx_socket_limit(2 << 20, 1 << 20, 1 << 20), None);
        assert_eq!(zcrx_socket_limit(2 << 20, (1 << 20) + 1, 0), Some(1 << 20));
    }
}
