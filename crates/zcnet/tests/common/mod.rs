//! Helpers shared by the library's lab tests (each test file is its own crate and uses a part
//! of them), and the simulated NIC of the NIC setup tests ([`fake_nic`]).
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

pub mod fake_nic;

use std::sync::{Mutex, MutexGuard};
use zcnet::Error;
use zcnet_tools::lab::{self, Lab, VethPath};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests of one binary, so that fd counts are taken while no other test of it
/// opens or closes anything.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A lab with a veth pair, or `None` (with the reason printed) when not root.
pub fn veth_lab(test: &str) -> Option<(Lab, VethPath)> {
    match Lab::new() {
        Ok(mut lab) => {
            let p = lab.veth().unwrap();
            Some((lab, p))
        }
        Err(Error::NotRoot { .. }) => {
            eprintln!("skipped {test}: needs root to create network namespaces");
            None
        }
        Err(e) => panic!("lab: {e}"),
    }
}

/// Runs `f` on a thread inside namespace `ns` (the test thread's namespace stays as it is).
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            lab::enter(ns).unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}
