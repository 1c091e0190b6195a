//! Process and thread calls: CPU time, RLIMIT_MEMLOCK, privileges, network namespaces, interrupts.
//!
//! One job a submodule, all re-exported here: CPU time, the coarse clock and affinity (`cpu`);
//! privileges, RLIMIT_MEMLOCK and the kernel's release (`limits`); network namespaces (`netns`);
//! the interrupt handlers and pipe (`signal`); waits and sleeps cut short by them (`wait`); the
//! echo server's socket calls (`sock`); interface addresses (`ifaddrs`).

mod cpu;
mod ifaddrs;
mod limits;
mod netns;
mod signal;
mod sock;
mod wait;

pub use cpu::{
    current_cpu, monotonic_coarse, process_cpu_seconds, set_thread_affinity, stat_field,
    thread_affinity, thread_cpu_seconds,
};
pub use ifaddrs::interface_addresses;
pub use limits::{
    has_cap_ipc_lock, is_root, kernel_version, memlock_limit, set_memlock_soft, uring_rings_charged,
};
#[cfg(test)]
pub(crate) use netns::in_private_netns;
pub use netns::{enter_netns, unshare_netns};
pub use signal::{
    install_interrupt_handler, interrupted, set_interrupted, set_on_interrupt, terminate,
};
pub use sock::{
    send_vectored, set_linger_zero, set_recv_buffer, set_tcp_keepalive, set_tcp_user_timeout,
    SEND_IOVECS,
};
pub use wait::{poll_until, sleep, sleep_until, wait_fd, wait_fd_until, Wake, STOP_CHECK};
