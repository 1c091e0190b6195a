//! The `zcnet` command.

// A closed stdout or stderr must not panic a command: print with zcnet_tools' `outln!` and co.
#![deny(clippy::print_stdout, clippy::print_stderr)]

// Command modules import the leaves (args, output, endpoints, units, and the command's words,
// `cli_text`, from the crate's library), never each other both ways: sendrecv dispatches to
// udp_cmd and gpu_cmd, bench_cmd to bench_gpu.
mod args;
mod bench_cmd;
mod bench_gpu;
mod bench_raw;
mod bench_xsk;
mod endpoints;
mod gpu_cmd;
mod nic_cmd;
mod output;
mod plan;
mod probe_cmd;
mod sendrecv;
mod udp_cmd;
mod units;

use args::{BenchRxArgs, BenchTxArgs};
use clap::{Parser, Subcommand};
use zcnet_cli::cli_text;

/// zcnet: zero-copy networking, measured honestly.
#[derive(Parser, Debug)]
#[command(
    name = "zcnet",
    version,
    about = "The zcnet command: probe, nic, bench, send, recv, perf, lab",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Which zero-copy mechanisms work here, why the others don't, and the fix.
    Probe(probe_cmd::ProbeArgs),
    /// Set a NIC up for zero-copy receive (header split, a reserved queue, flow steering).
    #[command(subcommand)]
    Nic(nic_cmd::NicCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Send a stream (TCP) or datagrams (UDP) with a chosen mechanism, netcat-style.
    Send(args::SendArgs),
    /// Receive one TCP stream, or UDP datagrams (--udp), netcat-style.
    Recv(args::RecvArgs),
    /// The namespace lab.
    #[command(subcommand)]
    Lab(LabCmd),
    /// An iperf3 with zcnet's data paths: iperf3's protocol, flags and output, so it runs
    /// against an unmodified `iperf3 -s` or `iperf3 -c` (`zcnet perf -s`, `zcnet perf -c HOST`).
    Perf(zcnet_tools::perf::PerfArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Every send backend on every lab path: MB/s, ratio to copy, % zero-copy, CPU s/GB.
    Tx(BenchTxArgs),
    /// RPC echo (64 KiB requests, one pinned server thread, 24 connections): every receive
    /// backend on veth and loopback: qps, Gbit/s, server CPU µs per request, p50/p99 latency,
    /// ratio to copy.
    Rx(BenchRxArgs),
    /// AF_XDP (copy, zero-copy) against AF_PACKET on the lab veth pair: TX and RX packets per
    /// second, CPU per million packets, drops; 64, 512 and 1500 B frames.
    Xsk(bench_xsk::BenchXskArgs),
    /// A raw send loop alone (no zcnet library around it) on a UDP socket to ADDR: the minimal
    /// MSG_ZEROCOPY loop or the raw SEND_ZC loop, the yardsticks of scripts/send-tax.sh.
    Raw(bench_raw::BenchRawArgs),
}

#[derive(Subcommand, Debug)]
enum LabCmd {
    /// Delete lab namespaces left behind by zcnet processes that no longer exist.
    Cleanup,
}

fn main() {
    // First, so that a signal at any later point is caught and the run stops on its normal path.
    if let Err(e) = zcnet_tools::interrupt::install_handler() {
        zcnet_tools::eoutln!("zcnet: warning: {e}");
    }
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    let r = match cli.cmd {
        Cmd::Perf(a) => perf(&a),
        Cmd::Probe(a) => probe_cmd::run(&a).map(|()| 0),
        Cmd::Nic(c) => nic_cmd::run(&c),
        Cmd::Bench(BenchCmd::Tx(a)) => bench_cmd::run(&a).map(|()| 0),
        Cmd::Bench(BenchCmd::Rx(a)) => bench_cmd::run_rx(&a).map(|()| 0),
        Cmd::Bench(BenchCmd::Xsk(a)) => bench_xsk::run(&a).map(|()| 0),
        Cmd::Bench(BenchCmd::Raw(a)) => bench_raw::run(&a).map(|()| 0),
        Cmd::Send(a) => sendrecv::send(&a).map(|()| 0),
        Cmd::Recv(a) => sendrecv::recv(&a).map(|()| 0),
        Cmd::Lab(LabCmd::Cleanup) => lab_cleanup().map(|()| 0),
    };
    let (line, code) = outcome(r, zcnet_tools::interrupt::interrupted());
    if let Some(l) = line {
        zcnet_tools::eoutln!("zcnet: {l}");
    }
    std::process::exit(code);
}

/// `zcnet perf`: its errors have their own exit codes (2 bad arguments, 1 a failed test, 130
/// interrupted), printed the way iperf3 prints its own, in the command's words.
fn perf(a: &zcnet_tools::perf::PerfArgs) -> ! {
    match zcnet_tools::perf::run(a, &cli_text::Cli) {
        Ok(()) if zcnet_tools::interrupt::interrupted() => std::process::exit(130),
        Ok(()) => std::process::exit(0),
        Err(e) => {
            zcnet_tools::eoutln!("zcnet perf: error - {}", e.render(&cli_text::Cli));
            std::process::exit(if zcnet_tools::interrupt::interrupted() {
                130
            } else {
                e.exit_code()
            })
        }
    }
}

/// What the command prints last (if anything) and its exit code, from its result and whether
/// SIGINT/SIGTERM arrived: an interrupted run exits 130 however it ended — a command that
/// finished anyway (a probe, a restore) or failed because of it (the peer went away on the
/// same Ctrl-C) — after its cleanup has run.
fn outcome(r: zcnet::Result<i32>, interrupted: bool) -> (Option<String>, i32) {
    match r {
        Err(zcnet::Error::Interrupted) => (Some("interrupted".into()), 130),
        // NIC changes left applied are the failure to report, however the run ended.
        Err(e @ zcnet::Error::NicSetup { .. }) => {
            (Some(cli_text::error_text(&e)), cli_text::exit_code(&e))
        }
        Err(e) if interrupted => (
            Some(format!("interrupted ({})", cli_text::error_text(&e))),
            130,
        ),
        Err(e) => (Some(cli_text::error_text(&e)), cli_text::exit_code(&e)),
        Ok(_) if interrupted => (Some("interrupted".into()), 130),
        Ok(code) => (None, code),
    }
}

/// A usage error of the argument parser as one line (the first paragraph and clap's tips, not
/// the usage block), exit code 2; help and version are printed as clap prints them.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    zcnet_tools::eoutln!("zcnet: {}", one_line(&e.render().to_string()));
    std::process::exit(2);
}

/// clap's rendered error on one line: paragraphs other than the usage and the "for more
/// information" hint, their lines joined; "error: " dropped.
fn one_line(rendered: &str) -> String {
    let parts: Vec<String> = rendered
        .split("\n\n")
        .map(|p| {
            p.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|p| {
            !p.is_empty() && !p.starts_with("Usage:") && !p.starts_with("For more information")
        })
        .collect();
    let line = parts.join("; ");
    format!(
        "{} (see --help)",
        line.strip_prefix("error: ").unwrap_or(&line)
    )
}

fn lab_cleanup() -> zcnet::Result<()> {
    if !nic_cmd::zcnet_is_root() {
        return Err(zcnet::Error::NotRoot {
            what: "zcnet lab cleanup",
        });
    }
    let removed = zcnet_tools::lab::cleanup_stale()?;
    if removed.is_empty() {
        zcnet_tools::outln!("no stale lab namespaces");
    }
    for ns in removed {
        zcnet_tools::outln!("deleted {ns}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_run_exits_130_however_it_ended() {
        use zcnet::Error;
        assert_eq!(outcome(Ok(0), false), (None, 0));
        assert_eq!(outcome(Ok(3), false), (None, 3));
        assert_eq!(outcome(Ok(0), true), (Some("interrupted".into()), 130));
        assert_eq!(outcome(Ok(3), true).1, 130);
        assert_eq!(
            outcome(Err(Error::Interrupted), true),
            (Some("interrupted".into()), 130)
        );
        let reset = || Error::PeerReset {
            accepted: 1,
            confirmed: 0,
        };
        let (line, code) = outcome(Err(reset()), true);
        assert_eq!(code, 130);
        assert!(line.unwrap().starts_with("interrupted (peer reset"));
        assert_eq!(outcome(Err(reset()), false).1, 1);
        assert_eq!(
            outcome(Err(Error::invalid_input("--size 0: ...")), false).1,
            2
        );
        // A restore that failed after Ctrl-C left NIC changes applied: that, not 130.
        let left = || Error::NicSetup {
            iface: "eth1".into(),
            step: "restoring the setup".into(),
            cause: Box::new(Error::Kernel {
                what: "rings-set".into(),
                message: "Invalid argument".into(),
                errno: Some(22),
            }),
            undo: "the changes stay applied".into(),
        };
        let (line, code) = outcome(Err(left()), true);
        assert_eq!(code, 1);
        assert!(line.unwrap().contains("the changes stay applied"));
    }

    #[test]
    fn parser_errors_become_one_line() {
        let e = Cli::try_parse_from(["zcnet", "send", "127.0.0.1:9", "--sise", "4"]).unwrap_err();
        let l = one_line(&e.render().to_string());
        assert!(!l.contains('\n') && !l.starts_with("error"), "{l}");
        assert!(l.contains("'--sise'") && l.contains("'--size'"), "{l}");
        let e = Cli::try_parse_from(["zcnet", "nic", "setup", "--queue", "1"]).unwrap_err();
        let l = one_line(&e.render().to_string());
        assert!(l.contains("--iface <IFACE>") && !l.contains("Usage"), "{l}");
        // Negative numbers reach the value checks (which name the flag) instead of being
        // taken for options.
        let c = Cli::try_parse_from(["zcnet", "bench", "tx", "--duration", "-1"]).unwrap();
        let Cmd::Bench(BenchCmd::Tx(a)) = c.cmd else {
            panic!("not bench tx")
        };
        assert_eq!(a.duration, -1.0);
    }

    /// Every `--mem` default is the name the command itself reports for that memory (`host`,
    /// not an alias the rest of the command never prints).
    #[test]
    fn mem_defaults_are_shown_by_their_own_name() {
        use clap::CommandFactory;
        fn walk(c: &clap::Command, path: &str, found: &mut usize) {
            for a in c.get_arguments() {
                if a.get_id() == "mem" {
                    for d in a.get_default_values() {
                        let d = d.to_string_lossy();
                        let kind = zcnet::MemoryKind::parse(&d).expect("a --mem default parses");
                        assert_eq!(kind.name(), d, "{path} --mem [default: {d}]");
                        *found += 1;
                    }
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), found);
            }
        }
        let mut found = 0;
        walk(&Cli::command(), "zcnet", &mut found);
        assert!(found >= 4, "{found} --mem defaults");
    }

    /// `--no-baseline` names every raw loop it skips.
    #[test]
    fn no_baseline_help_names_every_raw_loop() {
        use clap::CommandFactory;
        let mut c = Cli::command();
        let help = c
            .find_subcommand_mut("bench")
            .and_then(|b| b.find_subcommand_mut("tx"))
            .expect("bench tx")
            .render_long_help()
            .to_string();
        let line: String = help
            .split("--no-baseline")
            .nth(1)
            .expect("--no-baseline in the help")
            .split("--json")
            .next()
            .unwrap_or_default()
            .to_string();
        for (_, raw) in zcnet_tools::bench::RAW_LOOPS {
            assert!(line.contains(raw), "{raw} not in: {line}");
        }
    }

    /// The first line of `zcnet --help` names every command.
    #[test]
    fn top_level_help_names_every_command() {
        use clap::CommandFactory;
        let c = Cli::command();
        let about = c.get_about().expect("an about line").to_string();
        for s in c.get_subcommands() {
            let name = s.get_name();
            if name != "help" {
                assert!(about.contains(name), "{name} not in: {about}");
            }
        }
    }
}
