//! Reading one stream to its end through a [`Receiver`] of any mode: counting, verifying
//! against a [`Pattern`], or writing to a sink what arrives, with the receiver's statistics.
//! What the commands, the benches and the bindings share for a whole-stream receive.

use super::{DeviceSlice, Receiver, RxEvent, RxStats};
use crate::error::{Error, Result};
use crate::net::RecvReport;
use std::net::TcpStream;
use zcnet_core::Pattern;

/// What [`receive_stream`] saw: the byte counts and the receiver's own statistics.
#[derive(Debug, Clone)]
pub struct StreamReport {
    /// Bytes, reads (buffers delivered) and seconds from the first byte to end of stream.
    pub recv: RecvReport,
    /// The receiver's counters (zero-copy vs copied bytes, starvation, re-arms).
    pub stats: RxStats,
    /// Bytes that landed in device memory (never written to the sink; verified only through
    /// [`receive_stream_reading_device`]'s reader).
    pub device_bytes: u64,
}

/// Reads `stream` to its end through `rx` (any receive backend); with `verify`, checks every
/// host byte against the pattern; with `sink`, writes host bytes to it. Device-memory buffers
/// are counted, never read: with `verify`, a device buffer is an error (the pattern cannot be
/// checked there; see [`receive_stream_reading_device`]). Buffers are given back as soon as
/// they are consumed.
pub fn receive_stream(
    rx: &mut Receiver,
    stream: TcpStream,
    verify: Option<Pattern>,
    sink: Option<&mut dyn std::io::Write>,
) -> Result<StreamReport> {
    receive_stream_reading_device(rx, stream, verify, sink, None)
}

/// Copies a device range's bytes into host memory (e.g. a GPU region's
/// [`crate::Region::read_at`] at [`DeviceSlice::offset`], when the dma-buf bound is
/// that region's export). The output is exactly the slice's length.
pub type DeviceReader<'a> = &'a dyn Fn(&DeviceSlice, &mut [u8]) -> Result<()>;

/// [`receive_stream`] that, with `verify`, also checks the bytes that landed in device memory:
/// each device buffer is copied back with `read_device` while it is still held (before its
/// token or area buffer goes back to the kernel) and checked at its stream offset. For
/// verification only: it costs a device-to-host copy per buffer.
pub fn receive_stream_reading_device(
    rx: &mut Receiver,
    stream: TcpStream,
    verify: Option<Pattern>,
    sink: Option<&mut dyn std::io::Write>,
    read_device: Option<DeviceReader<'_>>,
) -> Result<StreamReport> {
    let (rep, failed) = receive_stream_until_failure(rx, stream, verify, sink, read_device)?;
    match failed {
        Some(e) => Err(e),
        None => Ok(rep),
    }
}

/// [`receive_stream_reading_device`] that keeps what was received when the stream fails (a
/// peer reset, a wrong byte, a failed write to the sink): the report of the bytes that came
/// (and were checked) before it, and the failure (`None`: the stream ended normally). `Err`
/// only when the stream could not be received at all (the receiver refused it).
pub fn receive_stream_until_failure(
    rx: &mut Receiver,
    stream: TcpStream,
    verify: Option<Pattern>,
    mut sink: Option<&mut dyn std::io::Write>,
    read_device: Option<DeviceReader<'_>>,
) -> Result<(StreamReport, Option<Error>)> {
    let mut back = Vec::new();
    let conn = rx.add(stream)?;
    let mut rep = RecvReport::default();
    let mut device_bytes = 0u64;
    let mut start = None;
    let mut events = Vec::new();
    let mut result = Ok(());
    'outer: loop {
        if let Err(e) = rx.cancel().check() {
            result = Err(e);
            break;
        }
        if let Err(e) = rx.poll(&mut events, std::time::Duration::from_millis(100)) {
            result = Err(e);
            break;
        }
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(b) => {
                    start.get_or_insert_with(std::time::Instant::now);
                    match rx.bytes(&b) {
                        Some(bytes) => {
                            if let Some(p) = verify {
                                if let Err(m) = p.verify(rep.bytes, bytes) {
                                    result = Err(m.into());
                                    break 'outer;
                                }
                            }
                            if let Some(s) = sink.as_deref_mut() {
                                if let Err(e) = s.write_all(bytes) {
                                    result = Err(Error::io("writing received data", e));
                                    break 'outer;
                                }
                            }
                        }
                        None => {
                            device_bytes += b.len() as u64;
                            if let Some(p) = verify {
                                let checked = match (b.device(), read_device) {
                                    (Some(d), Some(read)) => {
                                        back.resize(d.len, 0);
                                        read(&d, &mut back)
                                            .and_then(|()| Ok(p.verify(rep.bytes, &back)?))
                                    }
                                    _ => Err(Error::io(
                                        crate::text!(
                                            format!(
                                                "cannot verify: {} B at stream offset {} landed in device memory this receiver cannot read back; verify with a GPU region (",
                                                b.len(),
                                                rep.bytes
                                            ),
                                            crate::text::Memory::Cuda,
                                            "), or do not verify",
                                        ),
                                        std::io::ErrorKind::Unsupported.into(),
                                    )),
                                };
                                if let Err(e) = checked {
                                    result = Err(e);
                                    break 'outer;
                                }
                            }
                        }
                    }
                    rep.bytes += b.len() as u64;
                    rep.reads += 1;
                }
                RxEvent::Eof(_) => break 'outer,
                RxEvent::Failed(_, e) => {
                    result = Err(e);
                    break 'outer;
                }
            }
        }
    }
    // Events not looked at (after an error) give their buffers back here.
    events.clear();
    rx.close(conn);
    rep.seconds = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    // Hand the last buffers back so the statistics are final (after a failure too: its report
    // is printed).
    let last = rx.poll(&mut events, std::time::Duration::ZERO);
    events.clear();
    let failed = match (result, last) {
        (Err(e), _) | (Ok(()), Err(e)) => Some(e),
        (Ok(()), Ok(())) => None,
    };
    Ok((
        StreamReport {
            recv: rep,
            stats: rx.stats(),
            device_bytes,
        },
        failed,
    ))
}
