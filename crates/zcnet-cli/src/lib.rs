//! The `zcnet` command's words, shared by its binaries (`zcnet`, and `zcnet-perf`: zcnet-tools'
//! perf on its own): the library and the tools return typed errors and reports, and these
//! front ends say them ([`cli_text::Cli`]).

// A closed stdout or stderr must not panic a command: print with zcnet_tools' `outln!` and co.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod cli_text;
