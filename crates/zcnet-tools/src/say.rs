//! Printing that survives a closed stdout or stderr.
//!
//! `println!` and `eprintln!` panic when the write fails, and Rust ignores SIGPIPE, so
//! `zcnet perf -s | head -1` panicked (exit 101) at the server's next line and reset the client
//! it was serving. iperf3 (3.12) ignores SIGPIPE and its failed writes: it stops printing and
//! goes on serving. These macros do the same: every line the commands print goes through
//! them, a failed write is dropped, and the test or the command carries on. (The crates deny
//! `clippy::print_stdout` and `clippy::print_stderr` so that no `println!` comes back.)
//!
//! [`outln!`](crate::outln), [`out!`](crate::out): stdout; [`eoutln!`](crate::eoutln),
//! [`eout!`](crate::eout): stderr. Same arguments as `println!`.

use std::fmt;
use std::io::Write;

/// Writes `args` to stdout; a failed write (EPIPE: the reader went away) is dropped.
pub fn stdout(args: fmt::Arguments<'_>) {
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// Writes `args` to stderr; a failed write is dropped.
pub fn stderr(args: fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `println!` that drops a failed write instead of panicking (see [`crate::say`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::say::stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::say::stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that drops a failed write instead of panicking (see [`crate::say`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::say::stdout(format_args!($($arg)*))
    };
}

/// `eprintln!` that drops a failed write instead of panicking (see [`crate::say`]).
#[macro_export]
macro_rules! eoutln {
    () => {
        $crate::say::stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::say::stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that drops a failed write instead of panicking (see [`crate::say`]).
#[macro_export]
macro_rules! eout {
    ($($arg:tt)*) => {
        $crate::say::stderr(format_args!($($arg)*))
    };
}
