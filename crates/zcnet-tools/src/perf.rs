//! `zcnet perf`: an iperf3 that speaks iperf3's protocol and moves data with zcnet's data
//! paths.
//!
//! ```text
//!   args ─► Settings ─┬─► client: control connection ─► ClientControl (proto) ─┐
//!                     └─► server: listener ───────────► ServerControl (proto) ─┤ actions
//!                                                                              ▼
//!                 TestRun: one thread per data stream (zcnet Sender / Receiver), intervals,
//!                 results ─► report (iperf3's text) / jsonout (iperf3's -J) + zerocopy
//! ```
//!
//! [`proto`] is the protocol, sans-IO; everything else here is the I/O around it: sockets,
//! threads, clocks, and output. An unmodified `iperf3 -c` runs against `zcnet perf -s`, and
//! `zcnet perf -c` against an unmodified `iperf3 -s`.

pub mod args;
pub mod client;
pub mod error;
mod events;
pub mod jsonout;
pub mod net;
pub mod proto;
pub mod report;
pub mod run;
pub mod server;
pub mod streams;
pub mod sysinfo;
mod tcp;
pub mod tuning;
pub mod udp;
pub mod units;
mod voice;
pub mod zerocopy;

pub use args::{PerfArgs, Settings};
pub use error::PerfError;
pub use voice::PerfVoice;

/// Runs `zcnet perf` with these arguments: a client test, or a server until it is stopped
/// (or, with `-1`, after one test). What it prints of the library's errors, fallbacks and notes
/// is in `voice`'s words: the front end's that runs it (the `zcnet` command's flags and
/// commands), with perf's own `-l` ([`PerfVoice`]); its own errors are said with
/// [`PerfError::render`] in the same voice.
pub fn run(args: &PerfArgs, voice: &'static (dyn zcnet::Voice + Sync)) -> Result<(), PerfError> {
    let settings = Settings::from_args(args, voice)?;
    match &settings.role {
        args::Role::Client(host) => client::run(&settings, host),
        args::Role::Server => server::run(&settings),
    }
}
