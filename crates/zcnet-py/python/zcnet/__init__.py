"""zcnet: zero-copy networking for Linux, from Python.

Received buffers are tensors without a copy (DLPack: ``np.from_dlpack(buf)``,
``torch.from_dlpack(buf)``); sends take numpy arrays, tensors and bytes-like objects::

    import socket, numpy as np, zcnet

    rx = zcnet.Receiver(mode="auto")      # copy | uring | zcrx | devmem | auto
    rx.add(conn)                          # a connected socket.socket: zcnet takes it over
    for buf in rx:                        # until every connection ended
        view = np.from_dlpack(buf)        # 1-D uint8, read-only, no copy
        ...                               # dropping the last reference returns it to the kernel
    # or: n = rx.recv_into(out)         # a copy into host or CUDA memory (torch.cuda, DeviceBuffer)
    # Receiver(mode="auto", iface="eth1", mem="cuda:0"): into GPU memory by devmem or zcrx where
    # the NIC can (kDLCUDA buffers: torch.from_dlpack(buf), no copy), else staged
    print(rx.stats())

    tx = zcnet.Sender(sock, mode="auto")  # copy | msg-zerocopy | uring | uring-zc | devmem | auto
    tx.send(np.arange(1 << 20, dtype=np.uint32))
    tx.send(torch.ones(1 << 20, device="cuda"))  # CUDA memory: staged through zcnet's buffers
    print(tx.finish())

``zcnet.cuda_buffer(nbytes, device=0)`` allocates CUDA memory through zcnet's driver wrapper
(a ``DeviceBuffer``: DLPack kDLCUDA, ``fill()``, ``tobytes()``) for use without torch.

Errors are ``zcnet.Error`` subclasses carrying the library's cause and remedy.
"""

from ._zcnet import (
    MODES,
    ArgumentError,
    Buffer,
    ConnectionError,
    DeviceBuffer,
    Error,
    GpuError,
    MemlockError,
    NotRootError,
    Receiver,
    Sender,
    StalledError,
    StarvedError,
    UnsupportedError,
    VerifyError,
    cuda_buffer,
    pattern,
    probe,
)

__all__ = [
    "MODES",
    "ArgumentError",
    "Buffer",
    "ConnectionError",
    "DeviceBuffer",
    "Error",
    "GpuError",
    "MemlockError",
    "NotRootError",
    "Receiver",
    "Sender",
    "StalledError",
    "StarvedError",
    "UnsupportedError",
    "VerifyError",
    "cuda_buffer",
    "pattern",
    "probe",
]
