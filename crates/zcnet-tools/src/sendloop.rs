//! The send loop of `zcnet send`, `bench tx` and `zcnet perf`: take a buffer from a
//! [`Sender`], write the payload, send it, until the run is over. What differs between them is
//! passed in ([`SendLoop`]): the end condition (bytes, time, a budget shared between streams),
//! the payload ([`Fill`]: the buffers as they are, the seeded pattern at its stream offset, each
//! buffer written once, standard input, iperf3's datagram headers), the pacing (`-b`), the
//! cancel check and the progress callback.
//!
//! [`Until`] is the end condition by bytes and time, also of the loops that send from GPU
//! memory or AF_XDP frames rather than a [`Sender`]'s buffers.

use std::time::{Duration, Instant};
use zcnet::{Error, Pattern, Result, Sender, TxBuf};

/// The chunk sizes of a run that ends after `limit` bytes or at `deadline` (either, both or
/// neither): [`next_chunk`], with the clock read once every `every` chunks instead of once per
/// chunk (a send to the sink takes about a microsecond; the clock read, the interrupt check and
/// the limit are what remain per send), and that clock the coarse one
/// ([`zcnet::os::monotonic_coarse`]: no TSC read; `Instant::now()` once per 8 sends was
/// 0.4 % of a sender's CPU on a VM). The run overshoots the deadline by at most a timer tick
/// (1-10 ms) and `every - 1` sends.
#[derive(Debug)]
pub struct Until {
    size: usize,
    limit: Option<u64>,
    /// The deadline on the coarse clock.
    deadline: Option<Duration>,
    every: u64,
    /// Chunks left before the next clock read (a countdown: no division per chunk).
    left: u64,
}

impl Until {
    /// Chunks of at most `size` bytes up to `limit` bytes or `deadline`; the clock is read at
    /// the first chunk and then every `every` chunks (0 counts as 1).
    pub fn new(size: usize, limit: Option<u64>, deadline: Option<Instant>, every: usize) -> Until {
        Until {
            size,
            limit,
            deadline: deadline.map(|d| {
                zcnet::os::monotonic_coarse() + d.saturating_duration_since(Instant::now())
            }),
            every: every.max(1) as u64,
            left: 0,
        }
    }

    /// The size of the chunk at stream `offset`, or `None` at the end of the run;
    /// SIGINT/SIGTERM ends the run with [`Error::Interrupted`].
    #[inline]
    pub fn next(&mut self, offset: u64) -> Result<Option<usize>> {
        let mut limit = self.limit;
        if self.left == 0 {
            self.left = self.every;
            if self
                .deadline
                .is_some_and(|d| zcnet::os::monotonic_coarse() >= d)
            {
                // Over: a limit already reached says so in next_chunk, after the interrupt
                // check, which comes first.
                limit = Some(0);
            }
        }
        self.left -= 1;
        next_chunk(offset, self.size, limit, None)
    }
}

/// The size of the next chunk to send at stream `offset` (at most `size`), or `None` once
/// `limit` bytes are sent or `deadline` is over; SIGINT/SIGTERM ends the run with
/// [`Error::Interrupted`].
#[inline]
pub fn next_chunk(
    offset: u64,
    size: usize,
    limit: Option<u64>,
    deadline: Option<Instant>,
) -> Result<Option<usize>> {
    if crate::interrupt::interrupted() {
        return Err(Error::Interrupted);
    }
    if deadline.is_some_and(|d| Instant::now() >= d) || limit.is_some_and(|l| offset >= l) {
        return Ok(None);
    }
    Ok(Some(
        limit.map_or(size as u64, |l| (l - offset).min(size as u64)) as usize,
    ))
}

/// What goes into each send's buffer.
pub trait Fill {
    /// Writes the payload of the send at stream `offset` into `buf`, at most `want` bytes;
    /// returns how many bytes to send. 0 ends the run (a source at its end): the buffer goes
    /// back with an empty send.
    fn fill(&mut self, buf: &mut TxBuf, offset: u64, want: usize) -> Result<usize>;
}

impl<F: FnMut(&mut TxBuf, u64, usize) -> Result<usize>> Fill for F {
    #[inline]
    fn fill(&mut self, buf: &mut TxBuf, offset: u64, want: usize) -> Result<usize> {
        self(buf, offset, want)
    }
}

/// The payloads that need no source: what `bench tx`, `zcnet perf` and `zcnet send` without
/// stdin send.
#[derive(Debug)]
pub enum Payload {
    /// The buffers go as they are (zero-filled, never written): a fill per send would cost more
    /// than a zero-copy send of it (a fill runs at a few GB/s, a zero-copy send to the sink at
    /// tens).
    AsTheyAre,
    /// The seeded pattern at each send's stream offset, for the receiver to check
    /// (`--verify`); memory the CPU cannot write is [`Error::NotCpuAccessible`].
    Pattern(Pattern),
    /// Each buffer written whole once, with the pattern seeded by `seed(id)` (bytes that do not
    /// compress), and sent as it is from then on; memory the CPU cannot write is sent as it is.
    Once {
        /// The pattern's seed for buffer `id`.
        seed: fn(u32) -> u64,
        /// Which buffers are written.
        filled: Vec<bool>,
    },
}

impl Payload {
    /// [`Payload::Once`], no buffer written yet.
    pub fn once(seed: fn(u32) -> u64) -> Payload {
        Payload::Once {
            seed,
            filled: Vec::new(),
        }
    }
}

impl Fill for Payload {
    // Inlined into the loop, and the buffer itself never passed to a call: a call per send, or
    // the buffer copied to the stack for one, cost `bench tx` 3-4 % of its CPU at 4 KiB sends.
    #[inline(always)]
    fn fill(&mut self, buf: &mut TxBuf, offset: u64, want: usize) -> Result<usize> {
        match self {
            Payload::AsTheyAre => {}
            Payload::Pattern(p) => {
                let bytes = buf.bytes_mut().ok_or(Error::NotCpuAccessible)?;
                p.fill(offset, &mut bytes[..want]);
            }
            Payload::Once { seed, filled } => {
                let id = buf.id();
                if filled.get(id as usize) != Some(&true) {
                    fill_once(*seed, filled, id, buf.bytes_mut());
                }
            }
        }
        Ok(want)
    }
}

/// [`Payload::Once`]'s write, the first time buffer `id` (its `bytes`) is taken.
#[cold]
#[inline(never)]
fn fill_once(seed: fn(u32) -> u64, filled: &mut Vec<bool>, id: u32, bytes: Option<&mut [u8]>) {
    let i = id as usize;
    if filled.len() <= i {
        filled.resize(i + 1, false);
    }
    if let Some(bytes) = bytes {
        Pattern::new(seed(id)).fill(0, bytes);
    }
    filled[i] = true;
}

/// A send rate (`-b`): the stream is held at `bits_per_second` since `started`.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// The rate, bits per second (above 0).
    pub bits_per_second: u64,
    /// When the stream started.
    pub started: Instant,
}

impl Pace {
    /// Waits until `offset` bytes since `started` keep the stream at its rate (iperf3 checks
    /// the rate every `pacing_timer` microseconds; this waits about as long). Before it sleeps,
    /// the sends `tx` has queued go to the kernel ([`Sender::submit`]): the io_uring modes would
    /// otherwise hold them until every buffer is in flight and send them in one burst (UDP at
    /// `-b 10M` lost 54-88 % to the receiver's buffer). False when `cancelled` said so
    /// meanwhile.
    fn wait(
        &self,
        tx: &mut Sender,
        offset: u64,
        cancelled: &mut impl FnMut() -> bool,
    ) -> Result<bool> {
        let mut submitted = false;
        loop {
            let allowed = self.started.elapsed().as_secs_f64() * self.bits_per_second as f64 / 8.0;
            if (offset as f64) < allowed {
                return Ok(true);
            }
            if cancelled() {
                return Ok(false);
            }
            if !submitted {
                tx.submit()?;
                submitted = true;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// Why a [`SendLoop`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The end condition (`amount`) said the run is over.
    Done,
    /// The fill had nothing more (a source at its end).
    Drained,
    /// The cancel check said stop (before a send or while pacing).
    Cancelled,
}

/// What a [`SendLoop`] did: the bytes handed to the sender and why it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Bytes handed to the sender (the stream offset reached).
    pub bytes: u64,
    /// Why the loop stopped.
    pub end: End,
}

/// The send loop, with what differs between its users as parameters. Each send, in order:
/// `cancelled` (true ends the run), `amount(offset)` (the size of the next send, `None` at the
/// end of the run: [`Until`] for bytes and time), `pace` (wait until the rate allows it), a
/// buffer from the sender, `fill`, the send, then `progress(bytes)`. The closures are generic
/// parameters: the loop compiles to one function per user, with nothing called through a
/// pointer per send.
pub struct SendLoop<A, F, C, P> {
    /// The end condition: the size of the send at the stream offset, `None` when the run is
    /// over.
    pub amount: A,
    /// What goes into each buffer.
    pub fill: F,
    /// The send rate, if any.
    pub pace: Option<Pace>,
    /// The cancel check: true stops the run ([`End::Cancelled`]).
    pub cancelled: C,
    /// Called after each send with its bytes.
    pub progress: P,
}

impl<A, F, C, P> std::fmt::Debug for SendLoop<A, F, C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendLoop")
            .field("pace", &self.pace)
            .finish_non_exhaustive()
    }
}

impl<A, F, C, P> SendLoop<A, F, C, P>
where
    A: FnMut(u64) -> Result<Option<usize>>,
    F: Fill,
    C: FnMut() -> bool,
    P: FnMut(usize),
{
    /// Sends on `tx` until the end condition, the fill or the cancel check ends the run; the
    /// sends handed over are not waited for ([`Sender::finish`] and [`Sender::flush`] are the
    /// caller's).
    pub fn run(&mut self, tx: &mut Sender) -> Result<Sent> {
        let mut offset = 0u64;
        let end = loop {
            if (self.cancelled)() {
                break End::Cancelled;
            }
            let Some(want) = (self.amount)(offset)? else {
                break End::Done;
            };
            if let Some(pace) = &self.pace {
                if !pace.wait(tx, offset, &mut self.cancelled)? {
                    break End::Cancelled;
                }
            }
            let mut buf = tx.buffer()?;
            let n = self.fill.fill(&mut buf, offset, want)?;
            tx.send(buf, n)?;
            if n == 0 {
                break End::Drained;
            }
            offset += n as u64;
            (self.progress)(n);
        };
        Ok(Sent { bytes: offset, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet::{net, MemoryKind, Region, TxConfig, TxMode};

    #[zcnet_testkit::test]
    fn until_ends_at_the_byte_limit_with_a_short_last_chunk() {
        let mut u = Until::new(4096, Some(10_000), None, 8);
        let mut offset = 0u64;
        let mut sizes = Vec::new();
        while let Some(n) = u.next(offset).unwrap() {
            sizes.push(n);
            offset += n as u64;
        }
        assert_eq!(sizes, vec![4096, 4096, 1808]);
        assert_eq!(offset, 10_000);
    }

    #[zcnet_testkit::test]
    fn until_reads_the_clock_once_every_n_chunks() {
        // A deadline already past: the first chunk sees it, and so does every `every`-th.
        let past = Some(Instant::now());
        let mut u = Until::new(100, None, past, 4);
        assert_eq!(u.next(0).unwrap(), None);
        let mut u = Until::new(100, None, Some(Instant::now() + Duration::from_secs(60)), 4);
        for _ in 0..10 {
            assert_eq!(u.next(0).unwrap(), Some(100));
        }
        assert_eq!(next_chunk(5, 100, Some(5), None).unwrap(), None);
    }

    #[zcnet_testkit::test]
    fn until_ends_within_a_tick_or_two_of_its_deadline() {
        let t0 = Instant::now();
        let mut u = Until::new(1, None, Some(t0 + Duration::from_millis(60)), 1);
        while u.next(0).unwrap().is_some() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = t0.elapsed();
        // The coarse clock lags by at most a tick (10 ms at HZ=100), at the start and the end.
        assert!(
            took >= Duration::from_millis(45) && took < Duration::from_millis(100),
            "ended after {took:?} for a 60 ms deadline"
        );
    }

    fn sender(size: usize, inflight: usize) -> (Sender, std::net::UdpSocket) {
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = net::connect_udp(sink.local_addr().unwrap(), None).unwrap();
        let mut cfg = TxConfig::new(TxMode::Copy);
        cfg.buf_size = size;
        cfg.inflight = inflight;
        let region = Region::new(MemoryKind::Anonymous, zcnet::tx::region_len(&cfg)).unwrap();
        (Sender::new(sock.into(), region, &cfg).unwrap(), sink)
    }

    #[zcnet_testkit::test]
    fn the_loop_sends_what_the_end_condition_allows_and_counts_it() {
        let (mut tx, sink) = sender(1000, 4);
        let mut until = Until::new(1000, Some(5500), None, 4);
        let (mut calls, mut seen) = (0, 0u64);
        let sent = SendLoop {
            amount: |o| until.next(o),
            fill: Payload::Pattern(Pattern::new(7)),
            pace: None,
            cancelled: || false,
            progress: |n| {
                calls += 1;
                seen += n as u64;
            },
        }
        .run(&mut tx)
        .unwrap();
        assert_eq!(
            sent,
            Sent {
                bytes: 5500,
                end: End::Done
            }
        );
        assert_eq!((calls, seen), (6, 5500));
        let st = tx.finish().unwrap();
        assert_eq!((st.bytes, st.sends), (5500, 6));
        // The datagrams carry the pattern at their stream offsets.
        let mut got = vec![0u8; 2000];
        let mut offset = 0u64;
        for want in [1000usize, 1000, 1000, 1000, 1000, 500] {
            let n = sink.recv(&mut got).unwrap();
            assert_eq!(n, want);
            let mut expect = vec![0u8; n];
            Pattern::new(7).fill(offset, &mut expect);
            assert_eq!(&got[..n], &expect[..]);
            offset += n as u64;
        }
    }

    #[zcnet_testkit::test]
    fn a_drained_fill_or_the_cancel_check_ends_the_loop() {
        let (mut tx, _sink) = sender(100, 2);
        let mut left = 250usize;
        let sent = SendLoop {
            amount: |_| Ok(Some(100)),
            fill: |_: &mut TxBuf, _: u64, want: usize| {
                let n = left.min(want);
                left -= n;
                Ok(n)
            },
            pace: None,
            cancelled: || false,
            progress: |_| {},
        }
        .run(&mut tx)
        .unwrap();
        assert_eq!(
            sent,
            Sent {
                bytes: 250,
                end: End::Drained
            }
        );
        let mut sends = 0;
        let sent = SendLoop {
            amount: |_| Ok(Some(100)),
            fill: Payload::once(u64::from),
            pace: None,
            cancelled: || {
                sends += 1;
                sends > 3
            },
            progress: |_| {},
        }
        .run(&mut tx)
        .unwrap();
        assert_eq!(
            sent,
            Sent {
                bytes: 300,
                end: End::Cancelled
            }
        );
        assert_eq!(tx.finish().unwrap().bytes, 550);
    }

    #[zcnet_testkit::test]
    fn pacing_holds_the_rate() {
        let (mut tx, _sink) = sender(1000, 4);
        // 800 kbit/s: 100 kB/s, so 5 sends of 1000 B take about 40 ms after the first.
        let pace = Pace {
            bits_per_second: 800_000,
            started: Instant::now(),
        };
        let mut until = Until::new(1000, Some(5000), None, 1);
        let t0 = Instant::now();
        let sent = SendLoop {
            amount: |o| until.next(o),
            fill: Payload::AsTheyAre,
            pace: Some(pace),
            cancelled: || false,
            progress: |_| {},
        }
        .run(&mut tx)
        .unwrap();
        assert_eq!(sent.bytes, 5000);
        assert!(
            t0.elapsed() >= Duration::from_millis(35),
            "{:?}",
            t0.elapsed()
        );
        tx.finish().unwrap();
    }
}
