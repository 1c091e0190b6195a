//! zcnet-sys's CUDA driver bindings (`src/cuda/`) executed against the CUDA driver stand-in
//! (`tests/cuda-standin/standin.c`, built here with `cc`; see zcnet-testkit's `cuda_standin`).
//! The stand-in is NOT a GPU: these tests prove the driver API is called the way the driver
//! requires (cuInit, a current context, asynchronous copies that complete late, host pages
//! left alone until then, page-aligned dma-buf export, nothing leaked), never speed.
//!
//! The driver is opened once per process, so each case runs in a child process: the parent
//! test runs one `child_*` test of this same executable (ignored in normal runs) with
//! `ZCNET_LIBCUDA` pointing at the stand-in, then checks its exit and the stand-in's summary.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use zcnet_sys::cuda::{self, Context, CudaError, DeviceMem, HostRegistration, Stream};
use zcnet_sys::mem::{Mapping, Slot};
use zcnet_testkit::cuda_standin::{
    self, assert_child_passed, child_passes, in_child, output_text as text, run_child, Summary,
    Variant,
};

zcnet_testkit::main!();

/// Host memory registered with CUDA, cut into 4 slots of 64 KiB.
fn host(ctx: &Arc<Context>) -> (HostRegistration, Vec<Slot>) {
    let (map, slots) = Mapping::anonymous(4 << 16)
        .unwrap()
        .into_slots(1 << 16, 4)
        .unwrap();
    (HostRegistration::new(ctx, map).unwrap(), slots)
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[zcnet_testkit::test]
fn driver_calls_follow_the_driver_contract() {
    let s = child_passes("child_round_trip", Variant::Full, &[]);
    assert_eq!(s.get("device"), cuda_standin::DEVICE_NAME);
    // Both asynchronous copies were queued on pinned memory and answered NOT_READY at least once
    // before they completed (the child checked it saw the pending state).
    assert_eq!(
        (s.count("async_htod"), s.count("async_dtoh")),
        (1, 1),
        "{s}"
    );
    assert_eq!(s.count("pageable_async"), 0, "{s}");
    assert!(s.count("not_ready") >= 2, "{s}");
    // Driver 12.8: the export asked for the PCIe mapping type.
    assert_eq!(
        (s.count("exports"), s.count("export_flags_pcie")),
        (1, 1),
        "{s}"
    );
    assert_eq!(s.count("errors"), 0, "{s}");
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_round_trip() {
    in_child();
    cuda::available().unwrap();
    assert_eq!(cuda::driver_version().unwrap(), 12080);
    assert_eq!(cuda::device_count().unwrap(), 1);
    let info = cuda::device_info(0).unwrap();
    assert_eq!(info.name, cuda_standin::DEVICE_NAME);
    assert!(info.dma_buf);
    // It says it is a stand-in through an attribute no real driver knows.
    assert!(info.standin, "{info:?}");
    assert_eq!(info.standin_label(), Some(cuda::STANDIN_LABEL));
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    assert_eq!(dev.device_addr() % 4096, 0);
    // Synchronous copies and memset.
    let p = pattern(7, 4096);
    dev.write(8192, &p).unwrap();
    let mut back = vec![0u8; 4096];
    dev.read(8192, &mut back).unwrap();
    assert_eq!(back, p);
    dev.fill(0x3c).unwrap();
    dev.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x3c));
    // Out of range is refused before the driver is called.
    assert!(dev.write((1 << 20) - 10, &p).is_err());
    drop(dev.export_dmabuf().unwrap());

    let (reg, mut slots) = host(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    // Host to device: pending until waited for; the source slot comes back only then.
    let src = pattern(1, 1 << 16);
    slots[0].bytes_mut().unwrap().copy_from_slice(&src);
    let pending = stream
        .copy_to_device(&reg, slots.swap_remove(0), &dev, 4096)
        .unwrap();
    let pending = match pending.poll().unwrap() {
        Err(p) => p,
        Ok(_) => panic!("an asynchronous copy is pending at first"),
    };
    let back_src = pending.wait().unwrap();
    assert_eq!(back_src.bytes().unwrap(), &src[..]);
    let mut got = vec![0u8; 1 << 16];
    dev.read(4096, &mut got).unwrap();
    assert_eq!(got, src);
    // Device to host: the slot comes back only once the copy completed.
    let slot = slots.pop().unwrap();
    let pending = stream
        .copy_to_host(&reg, &dev, 4096, slot, 1 << 16)
        .unwrap();
    let pending = match pending.poll().unwrap() {
        Err(p) => p,
        Ok(_) => panic!("the device-to-host copy completed before anyone waited"),
    };
    let slot = pending.wait().unwrap();
    assert_eq!(slot.bytes().unwrap(), &src[..]);
    // Registering device memory as host memory is refused.
    let map = Arc::new(Arc::new(dev).into_mapping());
    assert!(HostRegistration::new(&ctx, map).is_err());
}

#[zcnet_testkit::test]
fn a_failed_event_after_a_queued_copy_waits_for_the_copy() {
    let env = [("ZCNET_STANDIN_FAIL", "cuEventCreate")];
    let (o, sum) = run_child("child_event_create_fails", Variant::Full, &env);
    // Had copy_to_device returned without waiting, the stand-in would have found the host source
    // changed when the copy ran (at the stream's synchronisation on drop) and aborted.
    let s = assert_child_passed("child_event_create_fails", &o, &sum);
    assert_eq!(s.count("injected_failures"), 1, "{s}");
    assert_eq!(s.count("async_htod"), 1, "{s}");
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_event_create_fails() {
    in_child();
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    let (reg, mut slots) = host(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    slots[0].bytes_mut().unwrap().fill(0x11);
    let (mut slot, e) = stream
        .copy_to_device(&reg, slots.swap_remove(0), &dev, 0)
        .unwrap_err();
    assert_eq!(e.code(), Some(cuda::ERR_OUT_OF_MEMORY), "{e}");
    assert!(
        e.to_string()
            .starts_with("cuEventCreate: CUDA_ERROR_OUT_OF_MEMORY"),
        "{e}"
    );
    // The caller has its buffer back: reusing it now must be safe (the copy already ran).
    slot.bytes_mut().unwrap().fill(0x22);
    let mut got = vec![0u8; 1 << 16];
    dev.read(0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0x11));
}

#[zcnet_testkit::test]
fn a_driver_without_dma_buf_export_still_stages() {
    let s = child_passes("child_no_dmabuf", Variant::NoDmabuf, &[]);
    assert_eq!(s.get("dmabuf_export"), "absent");
    assert_eq!((s.count("async_htod"), s.count("exports")), (1, 0), "{s}");
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_no_dmabuf() {
    in_child();
    cuda::available().unwrap();
    assert!(cuda::driver_version().unwrap() < 11070);
    assert!(!cuda::device_info(0).unwrap().dma_buf);
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    match dev.export_dmabuf() {
        Err(CudaError::MissingSymbol { name }) => assert_eq!(name, "cuMemGetHandleForAddressRange"),
        other => panic!("export without the symbol: {other:?}"),
    }
    let (reg, mut slots) = host(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    slots[0].bytes_mut().unwrap().fill(9);
    let pending = stream
        .copy_to_device(&reg, slots.swap_remove(0), &dev, 0)
        .unwrap();
    pending.wait().unwrap();
}

#[zcnet_testkit::test]
fn dma_buf_export_falls_back_to_no_flags_before_cuda_12_8() {
    let env = [("ZCNET_STANDIN_DRIVER_VERSION", "12060")];
    let s = child_passes("child_export", Variant::Full, &env);
    // The stand-in refuses flag 1 from a 12.6 driver: the export passed 0.
    assert_eq!(
        (s.count("exports"), s.count("export_flags_pcie")),
        (1, 0),
        "{s}"
    );
    assert_eq!(s.count("errors"), 0, "{s}");
}

#[zcnet_testkit::test]
fn dma_buf_export_retries_without_the_pcie_flag_where_the_driver_refuses_it() {
    // A 12.8+ driver that knows the flag but will not map through the PCIe BAR here: the
    // export goes on with the default mapping instead of failing (and devmem with it).
    let env = [
        ("ZCNET_STANDIN_DRIVER_VERSION", "12080"),
        ("ZCNET_STANDIN_REFUSE_PCIE", "1"),
    ];
    let s = child_passes("child_export", Variant::Full, &env);
    // One refused try with the flag, then the export without it.
    assert_eq!(
        (
            s.count("exports"),
            s.count("export_flags_pcie"),
            s.count("errors")
        ),
        (1, 0, 1),
        "{s}"
    );
}

#[zcnet_testkit::test]
fn zcnet_puts_back_the_threads_current_context() {
    child_passes("child_leaves_no_context_current", Variant::Full, &[]);
}

/// The CUDA runtime (torch, CuPy) takes a context made current through the driver API for its
/// own: zcnet's calls must leave the thread's current context as they found it.
#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_leaves_no_context_current() {
    in_child();
    let ctx = Context::new(0).unwrap();
    assert!(!ctx.is_current().unwrap(), "made current by Context::new");
    let dev = DeviceMem::alloc(&ctx, 2 << 20).unwrap();
    dev.write(0, &[7u8; 4096]).unwrap();
    let mut back = [0u8; 4096];
    dev.read(0, &mut back).unwrap();
    assert_eq!(back, [7u8; 4096]);
    assert!(!ctx.is_current().unwrap(), "left current by the calls");
    drop(dev);
    assert!(!ctx.is_current().unwrap(), "left current by the free");
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_export() {
    in_child();
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 2 << 20).unwrap();
    let fd = dev.export_dmabuf().unwrap();
    drop(fd);
}

// The stand-in's own checks: what zcnet must never do is caught, not silently allowed.

#[zcnet_testkit::test]
fn the_stand_in_catches_a_host_source_changed_before_its_copy_completed() {
    let (o, _) = run_child("child_changes_source_early", Variant::Full, &[]);
    assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("changed before the copy completed"),
        "{}",
        text(&o)
    );
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_changes_source_early() {
    in_child();
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    let (reg, mut slots) = host(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    let (addr, len) = (slots[0].addr(), slots[0].len());
    let pending = stream
        .copy_to_device(&reg, slots.swap_remove(0), &dev, 0)
        .unwrap();
    // The bug, before the event completed. copy_to_device holds the slot until then, so safe
    // code cannot write it: only a raw write around the type system can, as C code could.
    // SAFETY: [addr, addr+len) is the slot's memory, mapped (the registration holds the
    // mapping) and not borrowed by any Rust reference while the slot sits in `pending`; the
    // stand-in reads it only when the stream is waited for, after this write.
    unsafe { std::ptr::write_bytes(addr as *mut u8, 0xee, len) };
    let _ = pending.wait();
}

/// Dropping a pending copy waits for it before the source goes: the bytes may be written
/// right after (the stand-in aborts if the copy still had to read them).
#[zcnet_testkit::test]
fn dropping_a_pending_copy_waits_for_it() {
    child_passes("child_drops_a_pending_copy", Variant::Full, &[]);
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_drops_a_pending_copy() {
    in_child();
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    let (reg, mut slots) = host(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    let (addr, len) = (slots[0].addr(), slots[0].len());
    let pending = stream
        .copy_to_device(&reg, slots.swap_remove(0), &dev, 0)
        .unwrap();
    drop(pending);
    // SAFETY: [addr, addr+len) is the slot's memory, still mapped (the registration holds the
    // mapping); the slot itself is gone with the pending copy, nothing else refers to it.
    unsafe { std::ptr::write_bytes(addr as *mut u8, 0xee, len) };
    drop(stream);
}

#[zcnet_testkit::test]
fn the_stand_in_reports_leaks_at_exit() {
    let (o, sum) = run_child("child_leaks", Variant::Full, &[]);
    assert_eq!(
        o.status.code(),
        Some(cuda_standin::LEAK_EXIT),
        "{}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("leaked at exit"),
        "{}",
        text(&o)
    );
    let s = Summary::read(&sum);
    assert_eq!(s.count("leaked_allocations"), 1, "{s}");
    assert_eq!(s.count("leaked_contexts"), 1, "{s}");
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_leaks() {
    in_child();
    let ctx = Context::new(0).unwrap();
    std::mem::forget(DeviceMem::alloc(&ctx, 1 << 20).unwrap());
}

#[zcnet_testkit::test]
fn the_cpu_cannot_touch_device_memory() {
    let (o, _) = run_child("child_touches_device_memory", Variant::Full, &[]);
    assert_eq!(o.status.signal(), Some(libc::SIGSEGV), "{}", text(&o));
}

#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_touches_device_memory() {
    in_child();
    let ctx = Context::new(0).unwrap();
    let dev = DeviceMem::alloc(&ctx, 1 << 20).unwrap();
    let p = dev.device_addr() as *const u8;
    // SAFETY: deliberately not: a device address is no host memory. The stand-in maps it
    // PROT_NONE, so this read faults and the process dies of SIGSEGV, which the parent expects.
    let b = unsafe { std::ptr::read_volatile(p) };
    println!("read {b} from device memory");
}
