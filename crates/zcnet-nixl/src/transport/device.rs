//! NIXL's VRAM: device memory an agent registered, reached through zcnet's GPU code.
//!
//! A VRAM registration becomes a zcnet region over the borrowed device memory
//! (`zcnet::gpu::borrow_device`: CUDA opened at run time through `ZCNET_LIBCUDA` or the
//! system's libcuda, the device's primary context retained until deregistration). Its bytes
//! are **staged through host memory** with the library's synchronous copies
//! (`Region::read_at` / `Region::write_at`, as zcnet's Python binding receives into CUDA
//! tensors): a payload sent from VRAM is copied device-to-host into the connection's sender
//! buffers (zcnet's `Sender`, which then sends them while the next one is copied), a payload
//! received for VRAM is read from the socket into a host chunk and copied host-to-device. The
//! frame protocol is unchanged: the peer does not know which kind of memory is behind a key.
//!
//! Not here yet: the pipelined staging of `zcnet::gpu::StagedSender` (pinned buffers,
//! asynchronous copies), which takes a whole sender while this connection's sender also
//! carries headers and host payloads; and devmem TX / zcrx into the GPU's dma-buf where a NIC
//! can (the connections are plain TCP sockets the plugin reads itself).

use super::{log, Desc, Engine, Hdr, Out, ERR_BACKEND, ERR_INVALID_PARAM, INLINE_MAX};
use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

/// Bytes staged per copy on the receive side (and per copy when sends fall back to plain
/// writes).
const CHUNK: u64 = 1 << 20;

/// One VRAM registration.
#[derive(Debug)]
pub(super) struct DeviceReg {
    /// The device address of the registration's first byte.
    base: u64,
    /// Locked for each copy (`Region::write_at` takes `&mut`).
    region: Mutex<zcnet::Region>,
}

/// The engine's VRAM registrations by key (the same keys as its `regions`, which keep the
/// ranges every access is checked against).
#[derive(Debug, Default)]
pub(super) struct Devices(RwLock<HashMap<u64, Arc<DeviceReg>>>);

impl Devices {
    pub(super) fn get(&self, key: u64) -> Option<Arc<DeviceReg>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }

    pub(super) fn forget(&self, key: u64) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }
}

fn io_err(e: zcnet::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl DeviceReg {
    /// The region offset of device address `addr` (checked against the registration by the
    /// caller: the C++ half for local descriptors, `region_ok_locked` for a peer's).
    fn off(&self, addr: u64) -> usize {
        addr.saturating_sub(self.base) as usize
    }

    /// Copies `out.len()` bytes at device address `addr` into `out`.
    fn read(&self, addr: u64, out: &mut [u8]) -> io::Result<()> {
        let r = self.region.lock().unwrap_or_else(|e| e.into_inner());
        r.read_at(self.off(addr), out).map_err(io_err)
    }

    /// Reads `len` bytes from `r` into the device memory at `addr`, through a host chunk.
    pub(super) fn recv(&self, r: &mut impl Read, addr: u64, len: u64) -> io::Result<()> {
        let mut host = vec![0u8; len.min(CHUNK) as usize];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            r.read_exact(&mut host[..n])?;
            let mut region = self.region.lock().unwrap_or_else(|e| e.into_inner());
            region
                .write_at(self.off(addr + done), &host[..n])
                .map_err(io_err)?;
            done += n as u64;
        }
        Ok(())
    }
}

impl Out {
    /// A frame whose payload is `len` bytes of device memory at `addr`: copied into the
    /// frame's own buffer when small, else after the header into sender buffers one by one
    /// (each sent while the next is copied). Nothing of the device memory is lent to the
    /// kernel: once this returns, the memory may be released.
    pub(super) fn device(
        &mut self,
        h: &Hdr,
        dev: &DeviceReg,
        addr: u64,
        len: u64,
    ) -> io::Result<()> {
        if len <= INLINE_MAX {
            let mut v = vec![0u8; len as usize];
            dev.read(addr, &mut v)?;
            return self.frame(h, &v);
        }
        self.frame(h, &[])?;
        self.produced(len, CHUNK, |off, dst| dev.read(addr + off, dst))
    }
}

impl Engine {
    /// Registers `len` bytes of device memory at `addr` on CUDA device `ordinal`; its key.
    ///
    /// # Safety
    /// The memory is device memory on that device (in its primary context, as the CUDA
    /// runtime's and torch's is) and stays allocated until deregistered, with no transfer of
    /// it still running: NIXL's contract for registered memory.
    pub unsafe fn register_device(&self, ordinal: u64, addr: u64, len: u64) -> Result<u64, i32> {
        let Ok(ordinal) = u32::try_from(ordinal) else {
            log(&format!(
                "VRAM registration on device {ordinal}: no such CUDA device"
            ));
            return Err(ERR_INVALID_PARAM);
        };
        // SAFETY: the caller's contract, which is BorrowedDevice::new's.
        let b = unsafe { zcnet::gpu::BorrowedDevice::new(ordinal, addr, len as usize) };
        let region = zcnet::gpu::borrow_device(b).map_err(|e| {
            log(&format!("registering {len} B of VRAM at {addr:#x}: {e}"));
            if e.is_caller_mistake() {
                ERR_INVALID_PARAM
            } else {
                ERR_BACKEND
            }
        })?;
        // The device entry first: a peer may use the key once the range is in `regions`.
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.shared
            .devices
            .0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                key,
                Arc::new(DeviceReg {
                    base: addr,
                    region: Mutex::new(region),
                }),
            );
        self.shared
            .regions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (addr, len));
        Ok(key)
    }

    /// The VRAM registrations the local side of `descs` lies in, by key.
    pub(super) fn local_devices(&self, descs: &[Desc]) -> HashMap<u64, Arc<DeviceReg>> {
        descs
            .iter()
            .filter_map(|d| Some((d.local_key, self.shared.devices.get(d.local_key)?)))
            .collect()
    }
}
