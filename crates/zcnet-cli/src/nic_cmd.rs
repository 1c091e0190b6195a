//! `zcnet nic setup | restore | status`.

use clap::{Args, Subcommand};
use serde_json::json;
use std::time::Duration;
use zcnet::nic::{self, state, LiveNic, NicControl, NicGuard, NicSetup, Proto};
use zcnet::Error;

/// `zcnet nic ...`.
#[derive(Subcommand, Debug)]
pub enum NicCmd {
    /// Header split on, queue Q out of RSS, the flow steered to Q; undone on exit or Ctrl-C.
    Setup(SetupArgs),
    /// Undo what a crashed or killed `zcnet nic setup` left applied (from its state file).
    Restore(RestoreArgs),
    /// What zcnet applied (state files) and what the device reports now.
    Status(StatusArgs),
    /// Show, or set, a device's channel (queue) counts through ethtool netlink: what
    /// `ethtool -l` / `ethtool -L` do, without ethtool. Setting is not undone by zcnet.
    Channels(ChannelsArgs),
}

/// Options of `zcnet nic channels`.
#[derive(Args, Debug)]
pub struct ChannelsArgs {
    /// The interface.
    #[arg(long)]
    pub iface: String,
    /// Set the combined (RX and TX) channel count.
    #[arg(long, allow_negative_numbers = true)]
    pub combined: Option<u32>,
    /// Set the RX-only channel count.
    #[arg(long, allow_negative_numbers = true)]
    pub rx: Option<u32>,
    /// Set the TX-only channel count.
    #[arg(long, allow_negative_numbers = true)]
    pub tx: Option<u32>,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `zcnet nic setup`.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// The interface.
    #[arg(long)]
    pub iface: String,
    /// The RX queue to set aside for zero-copy receive.
    #[arg(long, allow_negative_numbers = true)]
    pub queue: u32,
    /// Steer flows to this destination port to the queue (ntuple rule); without it, no rule.
    #[arg(long, allow_negative_numbers = true)]
    pub port: Option<u16>,
    /// Protocol of the steered flow: tcp or udp (with --port).
    #[arg(long, default_value = "tcp", requires = "port")]
    pub proto: String,
    /// Steer IPv6 flows (flow-type tcp6/udp6) instead of IPv4 (with --port).
    #[arg(long, requires = "port")]
    pub ipv6: bool,
    /// Leave the changes applied when zcnet exits; undo them later with `zcnet nic restore`
    /// (runs no command: it and `-- CMD` exclude each other).
    #[arg(long, conflicts_with = "command")]
    pub keep: bool,
    /// Print what was applied as JSON.
    #[arg(long)]
    pub json: bool,
    /// A command to run while the NIC is set up; the changes are undone when it exits.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Options of `zcnet nic restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Only this interface (default: every state file of this network namespace).
    #[arg(long)]
    pub iface: Option<String>,
}

/// Options of `zcnet nic status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Only this interface (default: those with state files).
    #[arg(long)]
    pub iface: Option<String>,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `zcnet nic` command; returns the exit code for a wrapped command.
pub fn run(cmd: &NicCmd) -> zcnet::Result<i32> {
    match cmd {
        NicCmd::Setup(a) => setup(a),
        NicCmd::Restore(a) => restore(a).map(|()| 0),
        NicCmd::Status(a) => status(a).map(|()| 0),
        NicCmd::Channels(a) => channels(a).map(|()| 0),
    }
}

fn need_root(what: &'static str) -> zcnet::Result<()> {
    if zcnet_is_root() {
        Ok(())
    } else {
        Err(Error::NotRoot { what })
    }
}

fn setup(a: &SetupArgs) -> zcnet::Result<i32> {
    let proto = Proto::parse(&a.proto).ok_or_else(|| {
        Error::invalid_input(format!("unknown --proto '{}': use tcp or udp", a.proto))
    })?;
    if a.port == Some(0) {
        return Err(Error::invalid_input(
            "--port 0: no flow has destination port 0: give the port the receiver listens on (1 to 65535)",
        ));
    }
    // A queue the device does not have: a bad argument, said before anything else is read or
    // changed (exit code 2).
    zcnet::nic::check_queue(&a.iface, a.queue, false, None)?;
    let mut ctl = LiveNic::open(&a.iface)?;
    let want = NicSetup {
        queue: a.queue,
        flow: a.port.map(|p| (proto, a.ipv6, p)),
    };
    if !zcnet_is_root() {
        // What the device itself refuses (root would be refused too) is said first, from
        // reads any user may make; only then is the missing privilege the answer.
        nic::preflight(&mut ctl, &want)?;
        need_root("zcnet nic setup")?;
    }
    let guard = NicGuard::apply(ctl, &want, &state::state_dir())?;
    let changes: Vec<String> = guard.changes().iter().map(|c| c.describe()).collect();
    let path = guard.state_path().map(|p| p.display().to_string());
    if a.json {
        zcnet_tools::outln!(
            "{}",
            json!({"iface": a.iface, "queue": a.queue, "changes": changes, "state_file": path, "kept": a.keep})
        );
    } else {
        if changes.is_empty() {
            zcnet_tools::outln!(
                "{}: already set up for zero copy on queue {}: nothing to change",
                a.iface,
                a.queue
            );
        }
        for c in &changes {
            zcnet_tools::outln!("{}: {c}", a.iface);
        }
    }
    if a.keep {
        if let Some(p) = guard.keep() {
            zcnet_tools::eoutln!(
                "changes kept; undo them with 'zcnet nic restore --iface {}' (state: {})",
                a.iface,
                p.display()
            );
        }
        return Ok(0);
    }
    let held = if a.command.is_empty() {
        zcnet_tools::eoutln!("holding the setup; Ctrl-C restores it");
        hold()
    } else {
        run_child(&a.command)
    };
    // Restored whatever ended the hold: the command's exit, SIGINT/SIGTERM, a failure to start it.
    // A restore that fails leaves changes applied: that is the error, Ctrl-C or not.
    let n = guard.restore().map_err(|e| Error::NicSetup {
        iface: a.iface.clone(),
        step: "restoring the setup".into(),
        cause: Box::new(e),
        undo: format!(
            "the changes stay applied; undo them with 'zcnet nic restore --iface {}'",
            a.iface
        )
        .into(),
    })?;
    zcnet_tools::eoutln!("{}: restored ({n} change(s) undone)", a.iface);
    held
}

/// Holds until SIGINT/SIGTERM: always [`Error::Interrupted`] (exit 130 once restored).
fn hold() -> zcnet::Result<i32> {
    while !zcnet_tools::interrupt::sleep(Duration::from_secs(3600)) {}
    Err(Error::Interrupted)
}

/// Runs `argv` to completion and returns its exit code. Ctrl-C reaches it too, as part of the
/// foreground group; SIGINT/SIGTERM sent to zcnet alone is passed on to it as SIGTERM
/// ([`zcnet_tools::interrupt::wait_child`]), and the result is then [`Error::Interrupted`].
fn run_child(argv: &[String]) -> zcnet::Result<i32> {
    let mut child = match std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .spawn()
    {
        Ok(c) => c,
        // The shell's codes: 127 not found, 126 found but not runnable (the setup is
        // restored either way).
        Err(e) => {
            zcnet_tools::eoutln!("zcnet nic setup: starting '{}': {e}", argv[0]);
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let st = zcnet_tools::interrupt::wait_child(&mut child)?;
    if let Some(code) = st.code() {
        return Ok(code);
    }
    // Killed by a signal: 128 + its number, as a shell reports it, said in one line.
    let sig = std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0);
    zcnet_tools::eoutln!("zcnet nic setup: '{}' was killed by signal {sig}", argv[0]);
    Ok(128 + sig)
}

/// `zcnet nic channels`: the channel counts (current and maximum); with a count, sets it first
/// (ethtool netlink channels-set, the request `ethtool -L` makes).
fn channels(a: &ChannelsArgs) -> zcnet::Result<()> {
    let mut ctl = LiveNic::open(&a.iface)?;
    let no_control = || {
        Error::Kernel {
        what: format!("channels of {}", a.iface).into(),
        message: format!(
            "{} has no channel control (its driver reports no channels), so its queue count cannot be read or changed",
            a.iface
        ).into(),
        errno: None,
    }
    };
    let before = ctl.channel_counts()?.ok_or_else(no_control)?;
    if a.rx.is_some() || a.tx.is_some() || a.combined.is_some() {
        // Past the driver's maximum, root is refused too: said before the privilege is.
        for (flag, want, (_, max)) in [
            ("--rx", a.rx, before.rx),
            ("--tx", a.tx, before.tx),
            ("--combined", a.combined, before.combined),
        ] {
            if let Some(n) = want.filter(|&n| n > max) {
                return Err(Error::invalid_input(format!(
                    "{flag} {n}: {} allows at most {max} ({} reports {})",
                    a.iface,
                    a.iface,
                    before
                        .kinds()
                        .iter()
                        .map(|(k, cur, max)| format!("{k} {cur}/{max}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        // No RX or no TX channel at all: the kernel refuses it (ethnl_set_channels); said
        // here as a usage error naming the flags given.
        for (dir, own, flag) in [("RX", a.rx, "--rx"), ("TX", a.tx, "--tx")] {
            let combined = a.combined.unwrap_or(before.combined.0);
            let own_now = own.unwrap_or(if dir == "RX" {
                before.rx.0
            } else {
                before.tx.0
            });
            if combined + own_now == 0 {
                let given: Vec<String> = [(flag, own), ("--combined", a.combined)]
                    .iter()
                    .filter_map(|(f, v)| v.map(|v| format!("{f} {v}")))
                    .collect();
                return Err(Error::invalid_input(format!(
                    "{} leaves {} with no {dir} channel: give {flag} or --combined of at least 1",
                    given.join(" "),
                    a.iface
                )));
            }
        }
        need_root("zcnet nic channels (setting)")?;
        ctl.set_channels(a.rx, a.tx, a.combined)?;
    }
    let now = ctl.channel_counts()?.ok_or_else(no_control)?;
    if a.json {
        let doc: serde_json::Map<String, serde_json::Value> = now
            .kinds()
            .iter()
            .map(|&(k, cur, max)| (k.to_string(), json!({"current": cur, "max": max})))
            .collect();
        zcnet_tools::outln!("{}", json!({"iface": a.iface, "channels": doc}));
        return Ok(());
    }
    for ((k, was, _), (_, cur, max)) in before.kinds().into_iter().zip(now.kinds()) {
        if cur == 0 && max == 0 {
            continue;
        }
        let change = if was != cur {
            format!(" (was {was})")
        } else {
            String::new()
        };
        zcnet_tools::outln!("{}: {k} {cur} of at most {max}{change}", a.iface);
    }
    Ok(())
}

/// A read as JSON: the value, or `{"error": "..."}`.
fn txt<T: serde::Serialize>(r: &Result<T, Error>) -> serde_json::Value {
    match r {
        Ok(v) => serde_json::to_value(v).unwrap_or_default(),
        Err(e) => json!({"error": e.to_string()}),
    }
}

fn state_files(iface: Option<&str>) -> Vec<std::path::PathBuf> {
    state::list(&state::state_dir())
        .into_iter()
        .filter(|p| {
            iface.is_none_or(|i| state::read(p).map(|(o, _)| o.iface == i).unwrap_or(false))
        })
        .collect()
}

fn restore(a: &RestoreArgs) -> zcnet::Result<()> {
    need_root("zcnet nic restore")?;
    let files = state_files(a.iface.as_deref());
    if files.is_empty() {
        zcnet_tools::outln!("nothing to restore: no zcnet NIC state in this network namespace");
        return Ok(());
    }
    // Each file on its own: one that cannot be restored (its owner still runs, its interface
    // is gone, the kernel refuses) is said and left, and the others are still restored.
    let total = files.len();
    let mut left = Vec::new();
    for p in files {
        let restored = (|| {
            let (owner, _) = state::read(&p)?;
            let mut ctl = LiveNic::open(&owner.iface)?;
            let undone = nic::restore_from_file(&mut ctl, &p)?;
            for r in undone.iter().rev() {
                zcnet_tools::outln!("{}: undid {}", owner.iface, r.change.describe());
            }
            Ok::<_, Error>(())
        })();
        if let Err(e) = restored {
            zcnet_tools::eoutln!(
                "zcnet nic restore: {}: {}",
                p.display(),
                zcnet_cli::cli_text::error_text(&e)
            );
            left.push(p);
        }
    }
    match left.first() {
        None => Ok(()),
        Some(first) => Err(Error::NicState {
            path: first.clone(),
            problem: format!(
                "{} of {total} state file(s) not restored (each said above; an interface that is gone took its changes with it)",
                left.len()
            ).into(),
        }),
    }
}

/// A JSON value as a person reads it: strings without quotes, objects as `k v, k v`, lists
/// joined with `; `, null as `n/a`.
fn plain(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "n/a".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join("; "),
        Value::Object(o) if o.len() == 1 && o.contains_key("error") => {
            format!("unavailable ({})", plain(&o["error"]))
        }
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| format!("{} {}", k.replace('_', "-"), plain(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

fn status(a: &StatusArgs) -> zcnet::Result<()> {
    let files = state_files(a.iface.as_deref());
    let mut ifaces: Vec<String> = a.iface.iter().cloned().collect();
    let mut applied = Vec::new();
    for p in &files {
        let (owner, recs) = state::read(p)?;
        let liveness = state::owner_liveness(&owner);
        let alive = liveness == state::Liveness::Alive;
        if !ifaces.contains(&owner.iface) {
            ifaces.push(owner.iface.clone());
        }
        applied.push(json!({
            "iface": owner.iface, "pid": owner.pid, "process_alive": alive, "queue": owner.queue,
            "state_file": p.display().to_string(),
            "changes": recs.iter().map(|r| json!({"change": r.change.describe(), "done": r.done})).collect::<Vec<_>>(),
        }));
        if !a.json {
            zcnet_tools::outln!(
                "{}: set up by pid {} ({}), queue {}, state {}",
                owner.iface,
                owner.pid,
                match &liveness {
                    state::Liveness::Alive => "running".to_string(),
                    state::Liveness::Gone => "gone: run 'zcnet nic restore'".to_string(),
                    state::Liveness::Unknown(why) => format!("not known here: {why}"),
                },
                owner.queue,
                p.display()
            );
            for r in &recs {
                zcnet_tools::outln!(
                    "  {}{}",
                    r.change.describe(),
                    if r.done { "" } else { " (may be half-made)" }
                );
            }
        }
    }
    let mut live = Vec::new();
    for i in &ifaces {
        let mut ctl = match LiveNic::open(i) {
            Ok(c) => c,
            // `--iface` naming no interface, and no state file naming it either: a bad
            // argument (exit code 2), on stderr like every other.
            Err(e @ Error::UnknownInterface { .. }) if files.is_empty() => return Err(e),
            // A state file's interface that is gone: said, and the others are still shown.
            Err(e) => {
                let why = zcnet_cli::cli_text::error_text(&e);
                if !a.json {
                    zcnet_tools::outln!("{i}: {why}");
                }
                live.push(json!({"iface": i, "error": why}));
                continue;
            }
        };
        let rings = ctl.rings().map(
            |r| json!({"tcp_data_split": nic::split_name(r.split), "hds_thresh": r.hds_thresh}),
        );
        let ntuple = ctl.ntuple();
        let rules = ctl.rules().map(|v| {
            v.iter()
                .map(|(l, s)| {
                    format!(
                        "location {l}: flow-type {}{} dst-port {} action {}",
                        s.proto.name(),
                        if s.ipv6 { 6 } else { 4 },
                        s.dst_port,
                        s.queue
                    )
                })
                .collect::<Vec<_>>()
        });
        let indir = ctl.indir();
        let doc = json!({
            "iface": i,
            "rings": txt(&rings),
            "ntuple": txt(&ntuple),
            "rules": txt(&rules),
            "rss_indirection": txt(&indir),
        });
        if !a.json {
            zcnet_tools::outln!("{i} now:");
            for (k, v) in doc
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| *k != "iface")
            {
                zcnet_tools::outln!("  {k}: {}", plain(v));
            }
        }
        live.push(doc);
    }
    if a.json {
        zcnet_tools::outln!("{}", json!({"applied": applied, "devices": live}));
    } else if files.is_empty() && ifaces.is_empty() {
        zcnet_tools::outln!("no zcnet NIC changes applied in this network namespace");
    }
    Ok(())
}

/// Whether the command runs as root (effective UID 0).
pub(crate) fn zcnet_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
