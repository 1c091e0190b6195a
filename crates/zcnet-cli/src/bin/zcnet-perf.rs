//! `zcnet-perf`: `zcnet perf` on its own, an iperf3-compatible client and server with
//! zcnet's data paths (`zcnet-perf -s`, `zcnet-perf -c HOST [iperf3 flags] [--tx MODE]`),
//! saying the library's errors in the `zcnet` command's words.

// A closed stdout or stderr must not panic it: print with `eoutln!` and co.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use clap::Parser;
use zcnet_cli::cli_text::Cli;
use zcnet_tools::perf::{self, PerfArgs};

/// An iperf3 that moves data with zcnet: iperf3's flags, protocol and output.
#[derive(Parser, Debug)]
#[command(name = "zcnet-perf", disable_version_flag = true)]
struct Command {
    #[command(flatten)]
    args: PerfArgs,
}

fn main() {
    let cli = Command::parse();
    if let Err(e) = zcnet_tools::interrupt::install_handler() {
        zcnet_tools::eoutln!("zcnet-perf: warning: {e}: Ctrl-C will not stop a test cleanly");
    }
    if let Err(e) = perf::run(&cli.args, &Cli) {
        zcnet_tools::eoutln!("zcnet-perf: error - {}", e.render(&Cli));
        std::process::exit(e.exit_code());
    }
}
