//! The initiator's sending side of a stream: posted requests and notifications queued in order,
//! sent in steps by whichever thread holds the sending side.
//!
//! Two kinds of thread send: the posting thread sends a request of at most `DIRECT_MAX`
//! whole when the stream is idle (nothing queued or unfinished), saving it the hand-off to the
//! writer thread; the writer thread sends everything else, a step at a time. A step sends at
//! most `STEP` bytes of payload and ends with a `flush`: when the thread lets go of the sending
//! side the kernel is done with every byte it sent, so no io_uring request is left to a thread
//! that may sleep or exit (the ring's completions run on the thread that submitted them), and a
//! released request's memory is never read after `releaseReqH` returns (each step holds the
//! request's `released` lock). A thread checking a request while its stream still has bytes to
//! send (`checkXfer` in a polling loop) sleeps until the writer finishes a step, at most
//! `CHECK_WAIT`, instead of competing with the writer for a CPU; it never waits on the network.
//!
//! A request released before its first byte left sends no payload (END marked aborted); one
//! released in the middle of a descriptor sends zeros for the rest of that descriptor, whose
//! header promised its length, then END marked aborted: the target acknowledges it as
//! cancelled and drops its notification.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::out::{mem, Out, INLINE_MAX};
use super::wire::*;
use super::{log, Conn, Part, ERR_REMOTE_DISCONNECT, OP_WRITE};

/// How often an idle writer thread checks that its connection still exists.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Longest a thread checking a request sleeps waiting for the writer's next step.
const CHECK_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Most payload bytes one step sends before the thread lets go of the sending side.
pub(super) const STEP: u64 = 4 << 20;

/// Work queued on a stream, in order.
pub(super) enum Work {
    Post(Cursor),
    Notif(Vec<u8>),
}

/// A posted part and how far its sending got.
pub(super) struct Cursor {
    part: Part,
    /// The descriptor being sent, and the bytes of it already sent (its header went first).
    desc: usize,
    off: u64,
    /// Set once the request was found released: no more of its memory is read.
    aborted: bool,
}

impl Cursor {
    pub(super) fn new(part: Part) -> Cursor {
        Cursor {
            part,
            desc: 0,
            off: 0,
            aborted: false,
        }
    }
}

/// The sending side of a stream: the work not yet begun, the work being sent, and the sender.
#[derive(Default)]
pub(super) struct Tx {
    queue: Mutex<Queue>,
    /// Signalled when work is queued or left unfinished, and when the stream closes.
    more: Condvar,
    /// Signalled when the writer finished a step.
    stepped: Condvar,
    state: Mutex<State>,
    /// Work was left unfinished in `state` (the writer thread goes on with it).
    unfinished: AtomicBool,
}

#[derive(Default)]
struct Queue {
    work: VecDeque<Work>,
    closed: bool,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) out: Option<Out>,
    current: Option<Work>,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tx")
    }
}

impl Tx {
    pub(super) fn new(out: Out) -> Tx {
        let tx = Tx::default();
        tx.state.lock().unwrap_or_else(|e| e.into_inner()).out = Some(out);
        tx
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `work` behind what is queued; false once the stream closed.
    fn push(&self, work: Work) -> bool {
        let mut q = self.queue();
        if q.closed {
            return false;
        }
        q.work.push_back(work);
        true
    }

    /// Wakes the writer thread to go on with what is queued or unfinished.
    fn wake(&self) {
        let _q = self.queue();
        self.more.notify_one();
    }

    /// No more work is taken; the writer thread ends.
    pub(super) fn close(&self) {
        let mut q = self.queue();
        q.closed = true;
        q.work.clear();
        self.more.notify_all();
        self.stepped.notify_all();
    }
}

impl Conn {
    /// Queues `work`; when `direct` and the stream is idle (nothing queued before it, nothing
    /// unfinished, the sending side free), sends it from this thread now, else wakes the writer
    /// thread. False if the stream cannot take it (closed or failed).
    pub(super) fn post_work(&self, work: Work, direct: bool) -> bool {
        if !self.tx.push(work) {
            return false;
        }
        let st = if direct {
            self.tx.state.try_lock().ok()
        } else {
            None
        };
        match st {
            Some(mut st) if st.current.is_none() && self.tx.queue().work.len() == 1 => {
                self.step(&mut st, u64::MAX)
            }
            _ => self.tx.wake(),
        }
        !self.dead.load(Ordering::SeqCst)
    }

    /// For a thread checking a request: while the stream has bytes to send, sleeps until the
    /// writer thread finished a step (at most [`CHECK_WAIT`]).
    pub(super) fn wait_for_writer(&self) {
        let q = self.tx.queue();
        if !q.closed && (!q.work.is_empty() || self.tx.unfinished.load(Ordering::SeqCst)) {
            let _ = self.tx.stepped.wait_timeout(q, CHECK_WAIT);
        }
    }

    /// One step under the sending side's lock; a failure fails the stream. Work left
    /// unfinished or queued wakes the writer thread.
    fn step(&self, st: &mut State, budget: u64) {
        match self.send_step(st, budget) {
            Ok(true) => self.tx.wake(),
            Ok(false) => {}
            Err(e) => self.send_failed(st, &e),
        }
    }

    /// Sends up to `budget` payload bytes of the work at the head; true if work remains.
    fn send_step(&self, st: &mut State, budget: u64) -> io::Result<bool> {
        if st.current.is_none() {
            st.current = self.tx.queue().work.pop_front();
        }
        let Some(work) = st.current.as_mut() else {
            self.tx.unfinished.store(false, Ordering::SeqCst);
            return Ok(false);
        };
        let Some(out) = st.out.as_mut() else {
            return Err(io::Error::other("sending failed earlier"));
        };
        let done = match work {
            Work::Notif(msg) => {
                send_msg(out, Hdr::new(K_NOTIF, 0), std::mem::take(msg))?;
                out.flush()?;
                true
            }
            Work::Post(c) => send_part(out, c, budget)?,
        };
        if done {
            st.current = None;
        }
        self.tx
            .unfinished
            .store(st.current.is_some(), Ordering::SeqCst);
        Ok(st.current.is_some() || !self.tx.queue().work.is_empty())
    }

    /// Sending failed with `e`: the sending side is retired (its counts kept), the stream shut
    /// down and every request waiting on it failed.
    pub(super) fn send_failed(&self, st: &mut State, e: &io::Error) {
        if st.out.is_some() {
            log(&format!("send failed: {e}"));
        }
        self.retire_out(st);
        self.tx.close();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.fail_all(ERR_REMOTE_DISCONNECT);
    }

    /// Takes the sending side out of use, adding what it did to the engine's counts.
    pub(super) fn retire_out(&self, st: &mut State) {
        st.current = None;
        if let Some(t) = st.out.take().and_then(|o| o.stats()) {
            self.stats.add(&t);
        }
    }
}

/// The writer thread: sends, a step at a time, what is queued or left unfinished, until the
/// stream closes or a send fails.
pub(super) fn writer_loop(conn: std::sync::Weak<Conn>) {
    loop {
        let Some(c) = conn.upgrade() else { return };
        {
            let q = c.tx.queue();
            if q.closed {
                drop(q);
                c.retire_out(&mut c.tx.state.lock().unwrap_or_else(|e| e.into_inner()));
                return;
            }
            if q.work.is_empty() && !c.tx.unfinished.load(Ordering::SeqCst) {
                // Woken by work or the close; the timeout only lets go of the connection
                // now and then, so that one never closed still ends its thread once dropped.
                let _ = c.tx.more.wait_timeout(q, IDLE_CHECK);
                continue;
            }
        }
        let mut st = c.tx.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = c.send_step(&mut st, STEP);
        if let Err(e) = r {
            c.send_failed(&mut st, &e);
            return;
        }
        drop(st);
        let _q = c.tx.queue();
        c.tx.stepped.notify_all();
    }
}

/// A header whose `b` is the length of `msg`, followed by `msg`.
pub(super) fn send_msg(out: &mut Out, mut h: Hdr, msg: Vec<u8>) -> io::Result<()> {
    h.b = msg.len() as u64;
    if msg.len() as u64 <= INLINE_MAX {
        return out.frame(&h, &msg);
    }
    out.frame(&h, &[])?;
    out.lent(zcnet::engine::ForeignBuf::owned(msg.into_boxed_slice()))
}

/// Sends up to `budget` payload bytes of a part, its END once every descriptor went, and
/// flushes; true once the part was sent whole.
fn send_part(out: &mut Out, c: &mut Cursor, budget: u64) -> io::Result<bool> {
    let (x, descs, post) = (c.part.x.clone(), c.part.descs.clone(), c.part.post);
    if x.op != OP_WRITE {
        for (i, d) in descs.iter().enumerate() {
            let mut h = Hdr::new(K_READ_REQ, post);
            (h.a, h.b, h.c, h.d) = (d.remote_addr, d.len, d.remote_key, i as u64);
            out.frame(&h, &[])?;
        }
        c.desc = descs.len();
        send_end(out, c)?;
        out.flush()?;
        return Ok(true);
    }
    // Held until the kernel is done with every byte this step lent it (the flush at the end),
    // so that once NIXL released the request nothing reads its memory any more.
    let released = x.released.lock().unwrap_or_else(|e| e.into_inner());
    if *released && !c.aborted {
        c.aborted = true;
        if c.off > 0 {
            // The descriptor's header promised its length: the rest goes as zeros.
            out.zeros(descs[c.desc].len - c.off)?;
        }
        c.desc = descs.len();
    }
    let mut left = budget.max(1);
    while c.desc < descs.len() && left > 0 {
        let d = descs[c.desc];
        if c.off == 0 {
            let mut h = Hdr::new(K_WRITE, post);
            (h.a, h.b, h.c) = (d.remote_addr, d.len, d.remote_key);
            let whole = if let Some(dev) = x.devices.get(&d.local_key) {
                out.device(&h, dev, d.local_addr, d.len)?;
                true
            } else if d.len <= INLINE_MAX {
                // SAFETY: the C++ half checked the range lies in this engine's registration
                // of the descriptor; `released` is false and held: NIXL has not released the
                // request, so the memory is registered and not written meanwhile.
                out.frame(&h, unsafe { mem(d.local_addr, d.len) })?;
                true
            } else {
                out.frame(&h, &[])?;
                false
            };
            if whole {
                left = left.saturating_sub(d.len.max(1));
                c.desc += 1;
                continue;
            }
        }
        let n = (d.len - c.off).min(left);
        // SAFETY: as above; the sender drops the buffer once the kernel is done with it, at
        // the latest in the flush below, still under `released`.
        let buf = unsafe {
            zcnet::engine::ForeignBuf::new((d.local_addr + c.off) as usize as *mut u8, n as usize)
        }
        .ok_or_else(|| io::Error::other("a NULL descriptor"))?;
        out.lent(buf)?;
        c.off += n;
        left -= n;
        if c.off == d.len {
            (c.desc, c.off) = (c.desc + 1, 0);
        }
    }
    let done = c.desc == descs.len();
    if done {
        send_end(out, c)?;
    }
    out.flush()?;
    drop(released);
    Ok(done)
}

/// The part's END: whether it was aborted, its notification, its group and part count.
fn send_end(out: &mut Out, c: &mut Cursor) -> io::Result<()> {
    let p = &mut c.part;
    let mut h = Hdr::new(K_END, p.post);
    h.a = if c.aborted { END_ABORTED } else { 0 } | if p.notif.is_some() { END_NOTIF } else { 0 };
    // c, d: the request's group and its number of parts (1: not striped).
    (h.c, h.d) = (p.group, p.parts);
    send_msg(out, h, p.notif.take().unwrap_or_default())
}
