//! TCP data streams: the sending thread (zcnet's [`Sender`] through the shared send loop, with
//! perf's budget, payload and `-b`) and the receiving thread (a zcnet [`Receiver`], counting and
//! with `--verify` checking every byte). The threads, what they share with the controlling
//! thread and how a test ends are in [`super::streams`]; UDP streams in [`super::udp`].

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use zcnet::{Pattern, Receiver, Region, RxEvent, Sender, Socket, TxConfig};

use super::streams::{
    failed_setup, pace, sender_end, Job, Notice, PathReport, RxReport, StreamCounters, StreamEnd,
    NO_TARGET,
};
use crate::sendloop::{End, Payload, SendLoop};

/// Buffers (sends) in flight per sending stream.
pub(super) const TX_INFLIGHT: usize = 8;
/// How long a receiver waits in one poll.
const RX_POLL: Duration = Duration::from_millis(20);
/// A draining receiver without a byte target stops after this long without data.
const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// A draining receiver stops after this long whatever it still expects.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);
pub(super) fn run_sender<E>(job: Job<E>, stream: TcpStream) -> StreamEnd {
    let mut cfg = TxConfig::new(job.path.tx);
    cfg.cancel = crate::interrupt::token();
    cfg.buf_size = job.path.len;
    cfg.inflight = TX_INFLIGHT;
    // TCP_NOTSENT_LOWAT before the first send (tuning.rs says why and when).
    // The report gives what the kernel holds, read back.
    let fd = stream.as_raw_fd();
    let notsent_lowat = job.path.tcp.notsent_lowat.and_then(|n| {
        zcnet::os::sock::set_notsent_lowat(fd, n)
            .and_then(|()| zcnet::os::sock::notsent_lowat(fd))
            .ok()
    });
    let made = Region::for_sender(job.path.memory, &cfg)
        .and_then(|r| Sender::new(Socket::from(stream), r, &cfg));
    let mut tx = match made {
        Ok(tx) => tx,
        Err(e) => return failed_setup(&job.notify, job.index, e),
    };
    let mut last = None;
    let result = send_loop(&mut tx, &job, Instant::now(), &mut last);
    sender_end(&job, tx, result, last, None, notsent_lowat, None)
}

/// What a stream writes into its buffers: the pattern at its stream offset with `--verify`;
/// otherwise each buffer is filled once (with bytes that do not compress) and sent as it is
/// from then on.
fn payload(verify: Option<u64>) -> Payload {
    match verify {
        Some(seed) => Payload::Pattern(Pattern::new(seed)),
        None => Payload::once(|id| 0x7a63_6e65_7420 ^ u64::from(id)),
    }
}

/// Sends until the test stops or the budget (`-n`, `-k`) is spent, at the stream's rate;
/// `last` is when the last send returned.
fn send_loop<E>(
    tx: &mut Sender,
    job: &Job<E>,
    started: Instant,
    last: &mut Option<Instant>,
) -> zcnet::Result<()> {
    let sent = SendLoop {
        amount: |_| Ok(Some(job.shared.budget.take(job.path.len)).filter(|&n| n > 0)),
        fill: payload(job.path.verify),
        pace: pace(job, started),
        cancelled: || !job.shared.sending(),
        progress: |n| {
            *last = Some(Instant::now());
            job.counters.moved.fetch_add(n as u64, Ordering::Relaxed);
        },
    }
    .run(tx)?;
    if sent.end == End::Done {
        job.notify.send(Notice::BudgetSpent(job.index));
    }
    Ok(())
}

pub(super) fn run_receiver<E>(job: Job<E>, stream: TcpStream) -> StreamEnd {
    // SO_RCVLOWAT (tuning.rs); the library applies it to copy and uring only, and it is
    // lowered to 1 when draining starts.
    let mut cfg = job.path.rx.clone();
    cfg.low_water = job.path.tcp.rcvlowat;
    let mut rx = match Receiver::new(&cfg) {
        Ok(rx) => rx,
        Err(e) => return failed_setup(&job.notify, job.index, e),
    };
    let conn = match rx.add(stream) {
        Ok(c) => c,
        Err(e) => return failed_setup(&job.notify, job.index, e),
    };
    let rcvlowat = rx.low_water(conn);
    let mut st = RecvState {
        bytes: 0,
        last: None,
        pattern: job.path.verify.map(Pattern::new),
        complete: false,
        error: None,
    };
    let mut events = Vec::new();
    let mut drain_since: Option<Instant> = None;
    loop {
        if job.shared.abort.load(Ordering::Relaxed) {
            break;
        }
        if let Err(e) = rx.poll(&mut events, RX_POLL) {
            st.error = Some(e.to_string());
            break;
        }
        st.take(&rx, &mut events, &job.counters);
        if st.complete || st.error.is_some() {
            break;
        }
        if job.shared.drain.load(Ordering::Relaxed) {
            if drain_since.is_none() && rcvlowat.is_some() {
                // The tail of the stream may be below the mark: take it now.
                let _ = rx.set_low_water(conn, 1);
            }
            let since = *drain_since.get_or_insert_with(Instant::now);
            if drained(&st, &job.counters, since) {
                break;
            }
        }
    }
    events.clear();
    rx.close(conn);
    if let Some(e) = &st.error {
        job.notify.send(Notice::Failed(job.index, e.clone()));
    }
    StreamEnd {
        bytes: st.bytes,
        last: st.last,
        path: Some(PathReport::Rx(RxReport {
            requested: job.path.rx.mode,
            mode: rx.mode(),
            stats: rx.stats(),
            fallbacks: rx.fallbacks().to_vec(),
            rcvlowat,
            complete: st.complete,
        })),
        udp: None,
        error: st.error,
    }
}

/// A receiver's position.
struct RecvState {
    bytes: u64,
    last: Option<Instant>,
    pattern: Option<Pattern>,
    complete: bool,
    error: Option<String>,
}

impl RecvState {
    /// Counts (and with `--verify` checks) what one poll delivered; the buffers go back as
    /// the events drop.
    fn take(&mut self, rx: &Receiver, events: &mut Vec<RxEvent>, counters: &StreamCounters) {
        let before = self.bytes;
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(b) => {
                    if let Some(bytes) = rx.bytes(&b) {
                        self.check(bytes);
                    }
                    self.bytes += b.len() as u64;
                }
                RxEvent::Eof(_) => self.complete = true,
                RxEvent::Failed(_, e) => {
                    self.error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        if self.bytes > before {
            self.last = Some(Instant::now());
            counters
                .moved
                .fetch_add(self.bytes - before, Ordering::Relaxed);
        }
    }
}

impl RecvState {
    /// `--verify`: checks `bytes`, which start at stream offset `self.bytes`. The first
    /// mismatch of the stream is the one reported: once one is found (or the stream failed),
    /// later buffers are not checked, so they cannot replace it.
    fn check(&mut self, bytes: &[u8]) {
        let Some(p) = self.pattern.filter(|_| self.error.is_none()) else {
            return;
        };
        if let Err(m) = p.verify(self.bytes, bytes) {
            self.error = Some(format!(
                "--verify: {m} (is the sender zcnet perf with --verify?)"
            ));
        }
    }
}

/// Whether a draining receiver is done: it has the peer's count, or (without one) nothing came
/// for a while, or the drain has taken too long.
fn drained(st: &RecvState, counters: &StreamCounters, since: Instant) -> bool {
    let target = counters.target.load(Ordering::Relaxed);
    if target != NO_TARGET && st.bytes >= target {
        return true;
    }
    let idle = st.last.map_or(since, |l| l.max(since)).elapsed();
    (target == NO_TARGET && idle >= DRAIN_IDLE) || since.elapsed() >= DRAIN_LIMIT
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of buffers of which the second and third are corrupted: the error names the
    /// first wrong byte of the stream (it named the last buffer's), and later batches keep it.
    #[zcnet_testkit::test]
    fn verify_reports_the_first_mismatch_of_a_stream() {
        let p = Pattern::new(9);
        let mut stream = vec![0u8; 4 * 1000];
        p.fill(0, &mut stream);
        stream[1234] ^= 0xff;
        stream[2500] ^= 0x01;
        stream[3999] ^= 0x80;
        let mut st = RecvState {
            bytes: 0,
            last: None,
            pattern: Some(p),
            complete: false,
            error: None,
        };
        for chunk in stream.chunks(1000) {
            st.check(chunk);
            st.bytes += chunk.len() as u64;
        }
        let e = st.error.expect("a mismatch");
        assert!(e.contains("mismatch at byte 1234:"), "{e}");
    }
}
