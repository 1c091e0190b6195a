//! What front ends need of the operating system beside the library's data path: CPU time and
//! affinity, Ctrl-C, waiting on a file descriptor, network namespaces, interface addresses and
//! a few socket calls and options. The functions live in `zcnet-sys` (the one crate with
//! `unsafe`); this module is the library's curated choice of them, so that the CLI, the tools,
//! the plugins and the bindings import `zcnet` and never `zcnet-sys`.

pub use zcnet_sys::devmem::dmabuf_size;
pub use zcnet_sys::ifaddr::format_mac;
pub use zcnet_sys::mem::page_size;
pub use zcnet_sys::os::{
    enter_netns, install_interrupt_handler, interface_addresses, is_root, monotonic_coarse,
    poll_until, process_cpu_seconds, send_vectored, set_interrupted, set_linger_zero,
    set_on_interrupt, set_recv_buffer, set_tcp_keepalive, set_tcp_user_timeout,
    set_thread_affinity, sleep, stat_field, terminate, thread_affinity, thread_cpu_seconds,
    uring_rings_charged, wait_fd, Wake, SEND_IOVECS,
};
pub use zcnet_sys::zcrx::if_index;

/// A readiness fd registered with tokio's reactor (feature `tokio`), for the tokio adapter.
#[cfg(feature = "tokio")]
pub mod tokio_fd {
    pub use zcnet_sys::tokio_fd::register;
}

/// Readiness on several file descriptors (epoll), for front ends that multiplex sockets.
pub mod epoll {
    pub use zcnet_sys::epoll::{Epoll, ERR, HUP, IN, OUT, RDHUP};
}

/// Plain socket calls and options on raw descriptors.
pub mod sock {
    pub use zcnet_sys::sock::{
        disconnect, notsent_lowat, poll_one, recv, send, set_notsent_lowat, set_recv_buffer,
        set_recv_lowat, set_send_buffer, set_udp_segment, socket_drops,
    };
}
