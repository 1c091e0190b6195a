//! The conformance harness's view of the plugin: it `dlopen`s the built
//! `libnccl_net_zcnet.so`, looks up a table by its exported name, and calls it the way NCCL
//! does. One wrapper hides the differences between versions (init's signature, int/size_t
//! sizes, profiler handles, per-communicator contexts).
#![allow(dead_code)]

use nccl_net_zcnet::abi::*;
use std::ffi::{c_int, c_void, CString};
use std::path::PathBuf;

/// The cdylib cargo built for this test binary: in its own directory (`target/<profile>/deps`;
/// the copy one level up is refreshed only by a plain `cargo build`).
pub fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .expect("target dir")
        .join("libnccl_net_zcnet.so")
}

/// A loaded table of one version.
pub enum Table {
    V8(&'static ncclNet_v8_t),
    V9(&'static ncclNet_v9_t),
    V10(&'static ncclNet_v10_t),
    V11(&'static ncclNet_v11_t<ncclNetProperties_v11_t>),
    V12(&'static ncclNet_v11_t<ncclNetProperties_v12_t>),
}

pub const VERSIONS: [u32; 5] = [8, 9, 10, 11, 12];

/// dlopens the plugin (once per process; never closed) and finds `ncclNetPlugin_v{version}`.
pub fn load(version: u32) -> Table {
    let path = CString::new(plugin_path().to_string_lossy().into_owned()).expect("path");
    // SAFETY: dlopen of a library this workspace built; its constructors are Rust's own.
    let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen {}", plugin_path().display());
    let sym = CString::new(format!("ncclNetPlugin_v{version}")).expect("name");
    // SAFETY: dlsym on a live handle.
    let p = unsafe { libc::dlsym(lib, sym.as_ptr()) };
    assert!(!p.is_null(), "{sym:?} not exported");
    // SAFETY: the symbol is a static table of that version (repr(transparent) wrapper), alive
    // as long as the library, which is never closed.
    unsafe {
        match version {
            8 => Table::V8(&*(p as *const ncclNet_v8_t)),
            9 => Table::V9(&*(p as *const ncclNet_v9_t)),
            10 => Table::V10(&*(p as *const ncclNet_v10_t)),
            11 => Table::V11(&*(p as *const _)),
            12 => Table::V12(&*(p as *const _)),
            v => panic!("no version {v}"),
        }
    }
}

pub type P = *mut c_void;
const NULL: P = std::ptr::null_mut();

macro_rules! each {
    ($self:ident, $t:ident => $e:expr) => {
        match $self {
            Table::V8($t) => $e,
            Table::V9($t) => $e,
            Table::V10($t) => $e,
            Table::V11($t) => $e,
            Table::V12($t) => $e,
        }
    };
}

// SAFETY (for every call below): the harness passes valid pointers of the sizes NCCL would,
// and keeps buffers alive until test() reports their request done.
impl Table {
    pub fn name(&self) -> String {
        let n = each!(self, t => t.name);
        // SAFETY: a static NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(n) }
            .to_string_lossy()
            .into_owned()
    }

    /// init; returns the context (NULL before v11).
    pub fn init(&self) -> (c_int, P) {
        let mut ctx = NULL;
        let rc = unsafe {
            match self {
                Table::V8(t) => (t.init)(None),
                Table::V9(t) => (t.init)(None),
                Table::V10(t) => (t.init)(None, NULL),
                Table::V11(t) => (t.init)(&mut ctx, 1, std::ptr::null_mut(), None, NULL),
                Table::V12(t) => (t.init)(&mut ctx, 1, std::ptr::null_mut(), None, NULL),
            }
        };
        (rc, ctx)
    }

    pub fn finalize(&self, ctx: P) -> c_int {
        match self {
            Table::V11(t) => unsafe { (t.finalize)(ctx) },
            Table::V12(t) => unsafe { (t.finalize)(ctx) },
            _ => 0,
        }
    }

    pub fn devices(&self) -> (c_int, c_int) {
        let mut n = -1;
        let rc = each!(self, t => unsafe { (t.devices)(&mut n) });
        (rc, n)
    }

    /// (rc, ptrSupport, maxRecvs, name) of device `dev`.
    pub fn props(&self, dev: c_int) -> (c_int, c_int, c_int, String) {
        fn s(p: *mut std::ffi::c_char) -> String {
            if p.is_null() {
                return String::new();
            }
            // SAFETY: the plugin's static device name.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
        unsafe {
            match self {
                Table::V8(t) => {
                    let mut p = std::mem::zeroed::<ncclNetProperties_v8_t>();
                    let rc = (t.getProperties)(dev, &mut p);
                    (rc, p.ptrSupport, p.maxRecvs, s(p.name))
                }
                Table::V9(t) => {
                    let mut p = std::mem::zeroed::<ncclNetProperties_v9_t>();
                    let rc = (t.getProperties)(dev, &mut p);
                    (rc, p.ptrSupport, p.maxRecvs, s(p.name))
                }
                Table::V10(t) => {
                    let mut p = std::mem::zeroed::<ncclNetProperties_v9_t>();
                    let rc = (t.getProperties)(dev, &mut p);
                    (rc, p.ptrSupport, p.maxRecvs, s(p.name))
                }
                Table::V11(t) => {
                    let mut p = std::mem::zeroed::<ncclNetProperties_v11_t>();
                    let rc = (t.getProperties)(dev, &mut p);
                    (rc, p.v9.ptrSupport, p.v9.maxRecvs, s(p.v9.name))
                }
                Table::V12(t) => {
                    let mut p = std::mem::zeroed::<ncclNetProperties_v12_t>();
                    let rc = (t.getProperties)(dev, &mut p);
                    (rc, p.ptrSupport, p.maxRecvs, s(p.name))
                }
            }
        }
    }

    pub fn listen(&self, ctx: P, dev: c_int, handle: &mut [u8; NET_HANDLE_MAXSIZE]) -> (c_int, P) {
        let mut l = NULL;
        let h = handle.as_mut_ptr().cast();
        let rc = unsafe {
            match self {
                Table::V8(t) => (t.listen)(dev, h, &mut l),
                Table::V9(t) => (t.listen)(dev, h, &mut l),
                Table::V10(t) => (t.listen)(dev, h, &mut l),
                Table::V11(t) => (t.listen)(ctx, dev, h, &mut l),
                Table::V12(t) => (t.listen)(ctx, dev, h, &mut l),
            }
        };
        (rc, l)
    }

    pub fn connect(&self, ctx: P, dev: c_int, handle: &mut [u8; NET_HANDLE_MAXSIZE]) -> (c_int, P) {
        let mut s = NULL;
        let mut d: *mut ncclNetDeviceHandle_t = std::ptr::null_mut();
        let h = handle.as_mut_ptr().cast();
        let rc = unsafe {
            match self {
                Table::V8(t) => (t.connect)(dev, h, &mut s, &mut d),
                Table::V9(t) => (t.connect)(dev, h, &mut s, &mut d),
                Table::V10(t) => (t.connect)(dev, std::ptr::null_mut(), h, &mut s, &mut d),
                Table::V11(t) => (t.connect)(ctx, dev, h, &mut s, &mut d),
                Table::V12(t) => (t.connect)(ctx, dev, h, &mut s, &mut d),
            }
        };
        (rc, s)
    }

    pub fn accept(&self, l: P) -> (c_int, P) {
        let mut r = NULL;
        let mut d: *mut ncclNetDeviceHandle_t = std::ptr::null_mut();
        let rc = each!(self, t => unsafe { (t.accept)(l, &mut r, &mut d) });
        (rc, r)
    }

    pub fn reg_mr(&self, comm: P, data: *mut u8, len: usize, ty: c_int) -> (c_int, P) {
        let mut m = NULL;
        let rc = each!(self, t => unsafe { (t.regMr)(comm, data.cast(), len, ty, &mut m) });
        (rc, m)
    }

    pub fn dereg_mr(&self, comm: P, m: P) -> c_int {
        each!(self, t => unsafe { (t.deregMr)(comm, m) })
    }

    pub fn isend(&self, comm: P, data: *mut u8, len: usize, tag: c_int, m: P) -> (c_int, P) {
        let mut r = NULL;
        let d = data.cast();
        let rc = unsafe {
            match self {
                Table::V8(t) => (t.isend)(comm, d, len as c_int, tag, m, &mut r),
                Table::V9(t) => (t.isend)(comm, d, len, tag, m, &mut r),
                Table::V10(t) => (t.isend)(comm, d, len, tag, m, NULL, &mut r),
                Table::V11(t) => (t.isend)(comm, d, len, tag, m, NULL, &mut r),
                Table::V12(t) => (t.isend)(comm, d, len, tag, m, NULL, &mut r),
            }
        };
        (rc, r)
    }

    pub fn irecv(
        &self,
        comm: P,
        bufs: &[(*mut u8, usize)],
        tags: &[c_int],
        ms: &[P],
    ) -> (c_int, P) {
        let mut r = NULL;
        let n = bufs.len() as c_int;
        let mut data: Vec<P> = bufs.iter().map(|b| b.0.cast()).collect();
        let mut sizes: Vec<usize> = bufs.iter().map(|b| b.1).collect();
        let mut sizes_i: Vec<c_int> = bufs.iter().map(|b| b.1 as c_int).collect();
        let mut tags = tags.to_vec();
        let mut ms = ms.to_vec();
        let mut ph: Vec<P> = vec![NULL; bufs.len()];
        let (d, tg, m) = (data.as_mut_ptr(), tags.as_mut_ptr(), ms.as_mut_ptr());
        let rc = unsafe {
            match self {
                Table::V8(t) => (t.irecv)(comm, n, d, sizes_i.as_mut_ptr(), tg, m, &mut r),
                Table::V9(t) => (t.irecv)(comm, n, d, sizes.as_mut_ptr(), tg, m, &mut r),
                Table::V10(t) => (t.irecv)(
                    comm,
                    n,
                    d,
                    sizes.as_mut_ptr(),
                    tg,
                    m,
                    ph.as_mut_ptr(),
                    &mut r,
                ),
                Table::V11(t) => (t.irecv)(
                    comm,
                    n,
                    d,
                    sizes.as_mut_ptr(),
                    tg,
                    m,
                    ph.as_mut_ptr(),
                    &mut r,
                ),
                Table::V12(t) => (t.irecv)(
                    comm,
                    n,
                    d,
                    sizes.as_mut_ptr(),
                    tg,
                    m,
                    ph.as_mut_ptr(),
                    &mut r,
                ),
            }
        };
        (rc, r)
    }

    /// (rc, done); `sizes` gets one size per buffer when done.
    pub fn test(&self, req: P, sizes: &mut [c_int]) -> (c_int, bool) {
        let mut done = 0;
        let rc = each!(self, t => unsafe { (t.test)(req, &mut done, sizes.as_mut_ptr()) });
        (rc, done != 0)
    }

    pub fn close_send(&self, c: P) -> c_int {
        each!(self, t => unsafe { (t.closeSend)(c) })
    }

    pub fn close_recv(&self, c: P) -> c_int {
        each!(self, t => unsafe { (t.closeRecv)(c) })
    }

    pub fn close_listen(&self, c: P) -> c_int {
        each!(self, t => unsafe { (t.closeListen)(c) })
    }
}

/// The pattern byte at `off` of message `seq` (so a misplaced chunk is caught).
pub fn pattern(seq: u64, off: usize) -> u8 {
    let x = (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (off as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9))
        >> 29;
    x as u8
}

/// A small deterministic PRNG (splitmix64), the same in both processes.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One grouped transfer of the script: (tag, message size, receive capacity) per buffer.
pub type Group = Vec<(c_int, usize, usize)>;

/// The script both sides follow, from `seed`: `groups` grouped transfers with sizes from 0 to
/// `max` (zero-byte messages and exact chunk multiples included), receive buffers sometimes
/// larger than the message.
pub fn script(seed: u64, groups: usize, max: usize) -> Vec<Group> {
    let mut r = Rng(seed);
    (0..groups)
        .map(|_| {
            let grouped = r.below(3) == 0;
            let n = 1 + r.below(if grouped { 8 } else { 1 }) as usize;
            (0..n)
                .map(|i| {
                    let size = match r.below(6) {
                        0 => 0,
                        1 => 512 << 10,
                        2 => r.below(64) as usize,
                        3 if r.below(4) == 0 => max,
                        3 => r.below(max as u64 + 1) as usize,
                        _ => r.below((max as u64 / 16).max(1)) as usize,
                    };
                    let cap = if r.below(2) == 0 {
                        size
                    } else {
                        size + r.below(4096) as usize
                    };
                    (i as c_int + 100, size, cap)
                })
                .collect()
        })
        .collect()
}
