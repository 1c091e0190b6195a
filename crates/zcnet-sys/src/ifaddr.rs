//! An interface's hardware (MAC) address, in the calling thread's network namespace.
//!
//! `ioctl(SIOCGIFHWADDR)` (netdevice(7)) on a socket of the thread's namespace: unlike
//! `/sys/class/net/IF/address`, which shows the namespace sysfs was mounted in, this follows a
//! thread that moved with `setns`.

use crate::ethtool::{ifr_name, ioctl_socket};
use std::io;
use std::os::fd::AsRawFd;

/// `ARPHRD_ETHER` (include/uapi/linux/if_arp.h).
pub(crate) const ARPHRD_ETHER: u16 = 1;

/// The Ethernet address of interface `name`. `ENODEV` when there is no such interface,
/// `InvalidInput` for a bad name, `Unsupported` for an interface that is not Ethernet.
pub fn if_hwaddr(name: &str) -> io::Result<[u8; 6]> {
    let ifr_name = ifr_name(name)?;
    let sock = ioctl_socket()?;
    // SAFETY: ifreq is plain old data (a name array and a union of integers and sockaddrs).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_name = ifr_name;
    // SAFETY: ifr is a live, writable ifreq with a NUL-terminated name; SIOCGIFHWADDR writes
    // only its ifru_hwaddr member.
    crate::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut ifr) })?;
    // SAFETY: the ioctl succeeded, so the union holds ifru_hwaddr (a sockaddr of integers).
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{name} is not an Ethernet interface (ARPHRD {})",
                sa.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn loopback_is_not_ethernet_and_missing_is_enodev() {
        let r = crate::os::in_private_netns(|| {
            (
                if_hwaddr("lo").map_err(|e| e.kind()),
                if_hwaddr("nosuchif0").map_err(|e| e.raw_os_error()),
            )
        });
        let (lo, missing) = r;
        assert_eq!(lo, Err(io::ErrorKind::Unsupported), "lo is ARPHRD_LOOPBACK");
        assert_eq!(missing, Err(Some(libc::ENODEV)));
        assert_eq!(
            if_hwaddr("").map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidInput)
        );
        assert_eq!(format_mac(&[2, 0, 0xab, 0, 0, 1]), "02:00:ab:00:00:01");
    }
}
