//! # zcnet-tokio: zcnet's `Sender` and `Receiver` on a tokio runtime
//!
//! [`AsyncReceiver`] and [`AsyncSender`] wrap a [`zcnet::rx::Receiver`] and a [`zcnet::Sender`]
//! and drive them from tokio's reactor through their readiness fds
//! ([`Receiver::readiness_fd`], [`Sender::readiness_fd`]: an eventfd registered with the
//! io_uring ring, or the copy backend's epoll set) and their non-blocking calls (a poll with a
//! zero timeout; `try_buffer` and `submit`). Nothing here blocks a runtime thread: the
//! mechanisms that only work by blocking (`copy`, `msg-zerocopy` and `devmem` sends) are
//! refused by [`AsyncSender::new`].
//!
//! The ownership rules are the library's: a received [`RxBuf`] is the kernel's buffer, lent
//! until dropped (it goes back at the next receive); a [`TxBuf`] goes to the kernel with
//! [`AsyncSender::send`] and comes back from [`AsyncSender::buffer`] once the kernel is done
//! with it (its zero-copy notification arrived). Cancellation is safe: the futures here change
//! nothing before their last await but what they keep in `self` (events already received wait
//! in the receiver for the next call; a buffer is handed out only by a completed `buffer()`),
//! so dropping one — a `select!` branch that lost, a `timeout` — loses no data and leaves no
//! buffer owned by nobody. Deadlines are the caller's (`tokio::time::timeout`): the library's
//! stall timeout applies to its own blocking waits only.
//!
//! A `Receiver` is `!Send` (its io_uring rings take submissions only from the thread that made
//! them): run an [`AsyncReceiver`] on a current-thread runtime or inside a
//! [`tokio::task::LocalSet`]. An [`AsyncSender`] is `Send`.
//!
//! ```
//! use std::io::Write;
//! use zcnet::rx::{Receiver, RxConfig, RxEvent, RxMode};
//! use zcnet_tokio::AsyncReceiver;
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
//! rt.block_on(async {
//!     let mut rx = AsyncReceiver::new(Receiver::new(&RxConfig::new(RxMode::Auto))?)?;
//!     let l = std::net::TcpListener::bind("127.0.0.1:0")?;
//!     let mut peer = std::net::TcpStream::connect(l.local_addr()?)?;
//!     rx.add(l.accept()?.0)?;
//!     peer.write_all(b"hello")?;
//!     drop(peer);
//!     let mut got = Vec::new();
//!     while let Some(ev) = rx.recv().await? {
//!         match ev {
//!             RxEvent::Data(buf) => got.extend_from_slice(rx.bytes(&buf).unwrap_or_default()),
//!             RxEvent::Eof(conn) | RxEvent::Failed(conn, _) => rx.close(conn),
//!         }
//!     }
//!     assert_eq!(got, b"hello");
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use zcnet::rx::{ConnId, Receiver, RxBuf, RxEvent};
use zcnet::{Error, Result, Sender, TxBuf, TxStats};

fn reactor(e: io::Error) -> Error {
    Error::io(
        "registering the readiness fd with tokio's reactor (inside a runtime with I/O enabled?)",
        e,
    )
}

fn wait_error(e: io::Error) -> Error {
    Error::io("waiting for readiness (tokio reactor)", e)
}

/// A [`Receiver`] driven by tokio: [`AsyncReceiver::recv`] waits for the next event without
/// blocking the runtime.
#[derive(Debug)]
pub struct AsyncReceiver {
    /// A duplicate of the receiver's readiness fd, registered with the reactor.
    fd: AsyncFd<OwnedFd>,
    rx: Receiver,
    events: VecDeque<RxEvent>,
    scratch: Vec<RxEvent>,
}

impl AsyncReceiver {
    /// Registers `rx`'s readiness fd with the current runtime's reactor (a runtime with I/O
    /// enabled must be running).
    pub fn new(mut rx: Receiver) -> Result<AsyncReceiver> {
        let fd = zcnet::os::tokio_fd::register(rx.readiness_fd()?).map_err(reactor)?;
        Ok(AsyncReceiver {
            fd,
            rx,
            events: VecDeque::new(),
            scratch: Vec::new(),
        })
    }

    /// Starts receiving on `stream` ([`Receiver::add`]). A stream from tokio
    /// (`tokio::net::TcpStream::into_std`) is non-blocking: it is made blocking here, as zcnet's
    /// mechanisms expect (they never block on it: readiness tells them when to read).
    pub fn add(&mut self, stream: TcpStream) -> Result<ConnId> {
        stream
            .set_nonblocking(false)
            .map_err(|e| Error::io("making the stream blocking", e))?;
        self.rx.add(stream)
    }

    /// The next event: data in order per connection, end of stream, or a failed connection.
    /// `None` when no connection is left to wait for (none added, or all closed) and no event
    /// is pending. Cancel-safe: events received by a call that is dropped wait for the next.
    pub async fn recv(&mut self) -> Result<Option<RxEvent>> {
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(Some(ev));
            }
            if self.rx.connections() == 0 {
                return Ok(None);
            }
            let AsyncReceiver {
                fd,
                rx,
                events,
                scratch,
            } = self;
            // Work no fd signals comes first: buffers the application dropped go back, and
            // connections that ran out of them are re-armed.
            if poll_now(rx, scratch, events)? {
                continue;
            }
            let mut guard = fd.readable().await.map_err(wait_error)?;
            if !poll_now(rx, scratch, events)? {
                // Nothing came: wait for the next signal (one that arrived since the guard was
                // taken is not cleared by this).
                guard.clear_ready();
            }
        }
    }

    /// The host bytes of `buf` ([`Receiver::bytes`]).
    pub fn bytes<'a>(&'a self, buf: &'a RxBuf) -> Option<&'a [u8]> {
        self.rx.bytes(buf)
    }

    /// Lends `buf`'s bytes on without a copy ([`Receiver::lend`]), to send them with
    /// [`AsyncSender::send_lent`]; the buffer goes back to the receive ring once every
    /// reference to the lease is gone. Refused (the buffer handed back) where the mode cannot.
    ///
    /// The sender lets go of the lease when it takes back the send's completion, which it does
    /// only when driven (its next send, [`AsyncSender::flush`]): drive every sender that holds
    /// lent buffers, e.g. a task per connection that loops over its sends and a `flush` while
    /// sends are out (the echo example and the tests do). A sender left alone keeps its last
    /// buffer, and enough of them starve the receiver. A buffer handed back while the receiver
    /// starves wakes its [`recv`](Self::recv), from whichever task drops it.
    #[allow(clippy::result_large_err)] // the buffer comes back with the error
    pub fn lend(
        &mut self,
        buf: RxBuf,
    ) -> std::result::Result<std::sync::Arc<zcnet::engine::ForeignBuf>, (RxBuf, Error)> {
        self.rx.lend(buf)
    }

    /// Stops receiving on `conn` and closes its socket ([`Receiver::close`]).
    pub fn close(&mut self, conn: ConnId) {
        self.rx.close(conn)
    }

    /// The stream of a connection, to reply on ([`Receiver::stream`]).
    pub fn stream(&self, conn: ConnId) -> Option<&TcpStream> {
        self.rx.stream(conn)
    }

    /// The wrapped receiver (counters, mode, held buffers).
    pub fn receiver(&self) -> &Receiver {
        &self.rx
    }

    /// The wrapped receiver, mutable (e.g. to lower a connection's low-water mark).
    pub fn receiver_mut(&mut self) -> &mut Receiver {
        &mut self.rx
    }
}

/// One non-blocking poll of `rx` into `events`; true when it produced any.
fn poll_now(
    rx: &mut Receiver,
    scratch: &mut Vec<RxEvent>,
    events: &mut VecDeque<RxEvent>,
) -> Result<bool> {
    rx.poll(scratch, Duration::ZERO)?;
    let any = !scratch.is_empty();
    events.extend(scratch.drain(..));
    Ok(any)
}

/// A [`Sender`] driven by tokio: [`AsyncSender::buffer`] and [`AsyncSender::flush`] wait for
/// the kernel without blocking the runtime.
#[derive(Debug)]
pub struct AsyncSender {
    /// A duplicate of the sender's readiness fd, registered with the reactor.
    fd: AsyncFd<OwnedFd>,
    tx: Sender,
}

impl AsyncSender {
    /// Registers `tx`'s readiness fd with the current runtime's reactor. Only the io_uring
    /// mechanisms have one (`uring`, `uring-zc`, `auto`): `copy`, `msg-zerocopy` and `devmem`
    /// are refused ([`Sender::readiness_fd`]'s `Unsupported` error), since they block inside
    /// their calls. The sender's socket must be blocking (zcnet's io_uring sends never block
    /// on it; a tokio stream's `into_std` is non-blocking: call `set_nonblocking(false)`).
    pub fn new(mut tx: Sender) -> Result<AsyncSender> {
        let fd = zcnet::os::tokio_fd::register(tx.readiness_fd()?).map_err(reactor)?;
        Ok(AsyncSender { fd, tx })
    }

    /// A free buffer, waiting (without blocking the runtime) for the kernel to give one back
    /// when all are in flight. Cancel-safe: a buffer is taken only when this returns it.
    pub async fn buffer(&mut self) -> Result<TxBuf> {
        loop {
            if let Some(b) = self.tx.try_buffer()? {
                return Ok(b);
            }
            if self.tx.outstanding() == 0 {
                // Nothing free and nothing with the kernel: no completion will ever wake us.
                return Err(zcnet::tx::every_buffer_held());
            }
            let AsyncSender { fd, tx } = self;
            let mut guard = fd.readable().await.map_err(wait_error)?;
            if let Some(b) = tx.try_buffer()? {
                return Ok(b);
            }
            guard.clear_ready();
        }
    }

    /// Sends `buf[..len]` and hands it to the kernel at once (queue and submit: it never
    /// blocks). The buffer comes back from [`Self::buffer`] when the kernel is done with it.
    pub fn send(&mut self, buf: TxBuf, len: usize) -> Result<()> {
        self.tx.send(buf, len)?;
        self.tx.submit()
    }

    /// Copies `data` into as many buffers as it takes and sends them in order, waiting for
    /// free buffers as needed. Not cancel-safe past its first await: a cancelled call may
    /// have sent a prefix of `data`.
    pub async fn send_slice(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let mut b = self.buffer().await?;
            // TxBuf::write copies into device memory too; an error hands the buffer back (a
            // buffer dropped unsent would be gone from the sender for good).
            let n = match b.write(data) {
                Ok(n) => n,
                Err(e) => {
                    self.send(b, 0)?;
                    return Err(e);
                }
            };
            self.send(b, n)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Sends `buf[off..off + len]`, memory lent to the sender ([`Sender::send_lent`]: e.g. a
    /// received buffer, [`AsyncReceiver::lend`]), and hands it to the kernel at once. First
    /// waits (without blocking the runtime) while as many sends as the sender has buffers are
    /// in flight, so lent memory in flight stays bounded as region buffers are. Cancel-safe in
    /// that the memory is sent only when this returns `Ok`; a call dropped while it waits drops
    /// `buf` with it (a received buffer then goes back to its ring): keep a clone of the `Arc`
    /// to send the bytes again.
    pub async fn send_lent(
        &mut self,
        buf: std::sync::Arc<zcnet::engine::ForeignBuf>,
        off: usize,
        len: usize,
    ) -> Result<()> {
        loop {
            self.tx.submit()?;
            if self.tx.outstanding() < self.tx.buffers() {
                break;
            }
            let AsyncSender { fd, tx } = self;
            let mut guard = fd.readable().await.map_err(wait_error)?;
            tx.submit()?;
            if tx.outstanding() >= tx.buffers() {
                guard.clear_ready();
            }
        }
        self.tx.send_lent(buf, off, len)?;
        self.tx.submit()
    }

    /// Waits until every buffer is back: every send completed and every zero-copy notification
    /// arrived. Cancel-safe (nothing is taken or given). Bound it with `tokio::time::timeout`:
    /// a peer that stops reading keeps buffers in flight.
    pub async fn flush(&mut self) -> Result<()> {
        loop {
            self.tx.submit()?;
            if self.tx.outstanding() == 0 {
                return Ok(());
            }
            let AsyncSender { fd, tx } = self;
            let mut guard = fd.readable().await.map_err(wait_error)?;
            tx.submit()?;
            if tx.outstanding() > 0 {
                guard.clear_ready();
            }
        }
    }

    /// Flushes and returns the final statistics ([`Sender::stats`]).
    pub async fn finish(mut self) -> Result<TxStats> {
        self.flush().await?;
        Ok(self.tx.stats())
    }

    /// The wrapped sender (counters, mode, outstanding buffers).
    pub fn sender(&self) -> &Sender {
        &self.tx
    }
}
