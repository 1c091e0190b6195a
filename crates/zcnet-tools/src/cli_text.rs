//! The `zcnet` command's wording of library errors: every [`Remedy`] as the flags and
//! commands that carry it out, and the library's config-field names in a message as the flags
//! that set them. The library itself never names a flag (its `Display` speaks `RxConfig`,
//! `TxMode`, `nic::NicGuard::apply`); this is the one place that maps its remedies to the CLI.

use zcnet::region::MemoryKind;
use zcnet::text::{Call, Field, Library, Memory, Term, Words};
use zcnet::{Error, Remedy, Voice};

/// The `zcnet` command's voice: settings as the flags that set them, modes and memory kinds
/// as `--tx`/`--rx`/`--mem` values, the library's NIC and probe calls as the commands that make
/// them, and its own wording of the remedies it says differently.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cli;

impl Words for Cli {
    fn term(&self, t: &Term) -> String {
        match t {
            Term::Field(f) => field_flag(*f).to_string(),
            Term::TxMode { name, .. } => format!("--tx {name}"),
            Term::RxMode { name, .. } => format!("--rx {name}"),
            Term::Memory(m) => format!("--mem {}", m.name()),
            Term::Call(c) => call_command(c),
            other => Library.term(other),
        }
    }
}

impl Voice for Cli {
    fn remedy(&self, r: &Remedy) -> Option<String> {
        Some(match r {
            Remedy::UseRxMode(m) => format!("use --rx {}", m.name()),
            Remedy::UseTxMode(m) => format!("use --tx {}", m.name()),
            Remedy::UseMemory(MemoryKind::Anonymous) => "use --mem host".into(),
            Remedy::UseMemory(MemoryKind::Cuda(_)) => {
                "use a device region (--mem cuda, exported as a dma-buf)".into()
            }
            Remedy::UseMemory(MemoryKind::Udmabuf) => {
                "use --mem udmabuf (host memory made a dma-buf, where /dev/udmabuf exists)".into()
            }
            Remedy::UseMemory(k) => format!("use --mem {}", k.name()),
            Remedy::Staging => "receive by staging (--rx auto)".into(),
            Remedy::SetupNic => {
                "run 'zcnet nic setup --iface IFACE' (header split on, hds-thresh 0)".into()
            }
            Remedy::SteerFlow => "steer the flow to the queue and turn header split on ('zcnet nic setup --iface IFACE --queue Q --port P')".into(),
            Remedy::ProbeIface => "check 'zcnet probe --iface IFACE'".into(),
            Remedy::ChooseQueue => "pick a --queue below the RX queue count ('zcnet probe --iface IFACE' lists the queues), or leave --queue out".into(),
            Remedy::OtherQueue => "use another --queue, or stop the other user of the queue".into(),
            Remedy::SmallerArea => "use a smaller --area".into(),
            Remedy::PageSizedArea => "give --area a page multiple of at least one page".into(),
            Remedy::SmallerDmabuf => "use a smaller dma-buf (--area)".into(),
            Remedy::DmabufUpTo1G => "use a dma-buf of 1 GiB or less (--area)".into(),
            Remedy::FewerRxBuffers => "use fewer/smaller --buffers".into(),
            Remedy::FewerSends => "use a smaller --inflight/--size".into(),
            Remedy::LessGpuMemory => "use less GPU memory (send: --size, --inflight; recv: --area) or free GPU memory (nvidia-smi shows who holds it)".into(),
            Remedy::RaiseMemlock => "raise the locked-memory limit (ulimit -l)".into(),
            Remedy::StartReceiver(addr) => {
                format!("start a receiver there first (zcnet recv --listen {addr})")
            }
            _ => return None,
        })
    }
}

/// The flag (or words) that sets a library setting.
fn field_flag(f: Field) -> &'static str {
    match f {
        Field::RxAreaLen => "--area",
        Field::RxIface => "--iface",
        Field::RxQueue | Field::ProbeQueue => "--queue",
        Field::RxNoDevice => "--no-device",
        Field::RxBuffers => "--buffers",
        Field::RxBufSize => "--buf-size",
        Field::RxDmabuf | Field::TxDmabuf => "--mem cuda or udmabuf",
        Field::RxLowWater => "--rcvlowat",
        Field::RxMode => "--rx",
        Field::TxIface => "the interface the route to the peer leaves by",
        Field::TxBuffers | Field::TxInflight => "--inflight",
        Field::TxWindow => "--window",
        Field::TxBufSize => "--size",
        Field::TxMode => "--tx",
        Field::ProbeIface => "--iface IF",
        Field::ProbeAllIfaces => "--all-ifaces",
        Field::ProbeActive => "--active",
        Field::NicFlow => "--port",
        Field::PatternSeed => "another --seed",
        _ => "an option",
    }
}

/// The command (or words) that makes a library call.
fn call_command(c: &Call) -> String {
    match c {
        Call::NicSetup {
            iface: Some(i),
            queue: Some(q),
        } => format!("zcnet nic setup --iface {i} --queue {q} --port PORT"),
        Call::NicSetup { iface: Some(i), .. } => format!("zcnet nic setup --iface {i}"),
        Call::NicSetup { .. } => "'zcnet nic setup --iface IFACE'".into(),
        Call::NicSetupFlow => "'zcnet nic setup --iface IFACE --queue Q --port P'".into(),
        Call::NicRestore { iface: Some(i) } => format!("'zcnet nic restore --iface {i}'"),
        Call::NicRestore { iface: None } => "'zcnet nic restore'".into(),
        Call::SetChannels {
            iface: Some(i),
            change: Some((kind, n)),
        } => format!("zcnet nic channels --iface {i} --{kind} {n}"),
        Call::SetChannels { iface: Some(i), .. } => format!("zcnet nic channels --iface {i}"),
        Call::SetChannels { .. } => "'zcnet nic channels'".into(),
        Call::Probe => "'zcnet probe --iface IFACE'".into(),
        Call::RegionAnonymous => "--mem host".into(),
        Call::RegionHuge => "--mem hugepage".into(),
        Call::RegionCuda => "--mem cuda".into(),
        Call::RegionForSender => "--mem auto".into(),
        Call::RegionWriteAt => "a write into device memory".into(),
        Call::RegionReadAt => "a read of device memory".into(),
        Call::SendLent => "lent buffers".into(),
        other => Library.term(&Term::Call(*other)),
    }
}

/// One remedy in the CLI's words.
pub fn remedy_text(r: &Remedy) -> String {
    r.render(&Cli)
}

/// The prefix of the library's pointer to a NIC restore, followed by the interface and `)`.
const RESTORE: &str = "nic::restore_from_file (interface ";

/// Text the library rendered in its own words (the probe's findings and the receivers'
/// fallback notes, still strings), in the CLI's: every term [`Cli`] says differently, and a NIC
/// restore as the `zcnet nic restore` command. Errors never come through here: they are
/// rendered in [`Cli`]'s words from their terms ([`error_text`]).
pub fn words(text: &str) -> String {
    let mut terms: Vec<Term> = Field::ALL.iter().map(|f| Term::Field(*f)).collect();
    terms.extend(zcnet::tx::TxMode::NAMED.iter().map(|m| m.term()));
    terms.extend(zcnet::rx::RxMode::ALL.iter().map(|m| m.term()));
    terms.extend(Memory::ALL.iter().map(|m| Term::Memory(*m)));
    terms.extend(
        [
            Call::RegionAnonymous,
            Call::RegionHuge,
            Call::RegionCuda,
            Call::RegionForSender,
            Call::RegionWriteAt,
            Call::RegionReadAt,
            Call::SendLent,
            Call::NicSetupFlow,
        ]
        .map(Term::Call),
    );
    let mut pairs: Vec<(String, String)> = terms
        .iter()
        .map(|t| (Library.term(t), Cli.term(t)))
        .collect();
    // Longest first: `TxMode::UringZc` before `TxMode::Uring`.
    pairs.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
    let mut s = text.to_string();
    for (from, to) in &pairs {
        if s.contains(from.as_str()) {
            s = s.replace(from.as_str(), to);
        }
    }
    // "nic::LiveNic::set_channels (eth1, combined 4)": `zcnet nic channels`.
    let s = replace_calls(&s, zcnet::nic::SET_CHANNELS, |args| {
        match args.split_once(", ") {
            Some((iface, change)) => match change.split_once(' ') {
                Some((kind, n)) => format!("zcnet nic channels --iface {iface} --{kind} {n}"),
                None => format!("zcnet nic channels --iface {iface}"),
            },
            None => "zcnet nic channels".to_string(),
        }
    });
    // "nic::NicGuard::apply (eth1, queue 7, the flow's port)": `zcnet nic setup`.
    let s = replace_calls(&s, zcnet::nic::NIC_SETUP, |args| {
        let mut parts = args.split(", ");
        let iface = parts.next().unwrap_or("IFACE");
        match parts.next().and_then(|q| q.strip_prefix("queue ")) {
            Some(q) => format!("zcnet nic setup --iface {iface} --queue {q} --port PORT"),
            None => format!("zcnet nic setup --iface {iface}"),
        }
    });
    let s = replace_calls(&s, RESTORE, |iface| {
        format!("'zcnet nic restore --iface {iface}'")
    });
    // The same calls named without their arguments (a remedy's library text).
    s.replace(
        "a nic::NicSetup with the queue and the port",
        "'zcnet nic setup --iface IFACE --queue Q --port P'",
    )
    .replace("nic::NicGuard::apply", "'zcnet nic setup --iface IFACE'")
    .replace("probe::probe", "'zcnet probe --iface IFACE'")
    .replace("nic::LiveNic::set_channels", "'zcnet nic channels'")
    .replace("nic::restore_from_file", "'zcnet nic restore'")
}

/// `text` with every `prefix ARGS)` replaced by `render(ARGS)` (the library's way of naming a
/// call with its arguments, which the CLI says as a command).
fn replace_calls(text: &str, prefix: &str, render: impl Fn(&str) -> String) -> String {
    let mut s = text.to_string();
    let mut from = 0;
    while let Some(at) = s[from..].find(prefix).map(|n| from + n) {
        let rest = &s[at + prefix.len()..];
        let Some(end) = rest.find(')') else { break };
        let cmd = render(&rest[..end]);
        from = at + cmd.len();
        s = format!("{}{cmd}{}", &s[..at], &rest[end + 1..]);
    }
    s
}

/// [`zcnet::nic::check_queue`] with the CLI's `--queue` named: its bad-argument message
/// ("queue 7: eth1 has ...") as "--queue 7: eth1 has ...".
pub fn check_queue(
    iface: &str,
    queue: u32,
    af_xdp: bool,
    default: Option<&str>,
) -> zcnet::Result<()> {
    zcnet::nic::check_queue(iface, queue, af_xdp, default).map_err(|e| {
        if e.is_bad_argument() {
            Error::invalid_input(format!("--{e}"))
        } else {
            e
        }
    })
}

/// The exit status of the commands for a library error: 130 for an interrupt, 2 for the
/// caller's mistake ([`Error::is_caller_mistake`]: a bad argument, an unknown name), 1 for
/// everything else.
pub fn exit_code(e: &Error) -> i32 {
    match e {
        Error::Interrupted => 130,
        e if e.is_caller_mistake() => 2,
        _ => 1,
    }
}

/// A library error as the `zcnet` command prints it: its terms and remedies in [`Cli`]'s
/// words.
pub fn error_text(e: &Error) -> String {
    e.render(&Cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every library name a message of the library or the tools can carry (a config field, a
    /// mode, a memory kind, a region or sender call inside a string literal) has CLI words:
    /// no line the command prints names a Rust type. A name added to a message without its
    /// words in [`FIELDS`] fails here.
    #[zcnet_testkit::test]
    fn no_library_name_in_a_message_lacks_cli_words() {
        const TYPES: [&str; 8] = [
            "RxConfig",
            "TxConfig",
            "ProbeOptions",
            "NicSetup",
            "MemoryKind",
            "TxMode",
            "RxMode",
            "Region",
        ];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        let mut dirs = vec![root.join("zcnet/src"), root.join("zcnet-tools/src")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
        let mut missing = std::collections::BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for line in text.lines() {
                let code = line.trim_start();
                if code.starts_with("//") || code.contains("assert") || !code.contains('"') {
                    continue;
                }
                // Only what stands between quotes on the line.
                for (i, lit) in code.split('"').enumerate() {
                    if i % 2 == 0 {
                        continue;
                    }
                    for t in TYPES {
                        let pat = format!("{t}::");
                        let mut from = 0;
                        while let Some(at) = lit[from..].find(&pat).map(|n| from + n) {
                            let rest = &lit[at + pat.len()..];
                            let end = rest
                                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .unwrap_or(rest.len());
                            let name = format!("{pat}{}", &rest[..end]);
                            // `RxMode::{m:?}`: a mode by its Debug name, which words() maps.
                            if end > 0 && words(&name).contains("::") {
                                missing.insert(format!("{name} ({})", f.display()));
                            }
                            from = at + pat.len();
                        }
                    }
                }
            }
        }
        assert!(missing.is_empty(), "no CLI words for: {missing:?}");
    }

    #[zcnet_testkit::test]
    fn every_remedy_has_cli_words() {
        for r in Remedy::examples() {
            let lib = r.to_string();
            let cli = r.render(&Cli);
            assert!(
                !cli.contains("RxConfig::") && !cli.contains("TxMode::"),
                "{r:?}: {cli}"
            );
            if matches!(
                r,
                Remedy::UseRxMode(_) | Remedy::UseTxMode(_) | Remedy::ChooseQueue
            ) {
                assert!(cli.contains("--"), "{r:?}: {cli}");
                assert!(!lib.contains("--"), "{r:?}: {lib}");
            }
        }
        assert_eq!(
            words("undo them with nic::restore_from_file (interface eth1); or not"),
            "undo them with 'zcnet nic restore --iface eth1'; or not"
        );
        assert_eq!(
            words("add one: nic::LiveNic::set_channels (eth1, combined 2) (or: ethtool -L eth1 combined 2)"),
            "add one: zcnet nic channels --iface eth1 --combined 2 (or: ethtool -L eth1 combined 2)"
        );
        // The probe's remedies (zcnet-core's words) as the commands that carry them out.
        use zcnet_core::probe::{HeaderSplit, IfaceFacts, IfaceKind};
        let facts = IfaceFacts {
            name: "eth9".into(),
            kind: IfaceKind::Physical,
            driver: Some("mlx5_core".into()),
            xdp_features: None,
            rx_queues: 8,
            header_split: HeaderSplit::Disabled,
            hds_thresh: None,
            ntuple: Some(true),
            scatter_gather: Some(true),
            channels: None,
        };
        let setup = zcnet_core::probe::setup_command(&facts);
        assert!(!setup.contains("--"), "{setup}");
        assert_eq!(
            words(&format!("as root: {setup}; then retry")),
            format!(
                "as root: zcnet nic setup --iface eth9 --queue {} --port PORT; then retry",
                facts.trial_queue()
            )
        );
        assert_eq!(
            words("probe again with ProbeOptions::active, as root, to confirm"),
            "probe again with --active, as root, to confirm"
        );
        assert_eq!(
            words("use TxMode::UringZc or TxMode::Uring"),
            "use --tx uring-zc or --tx uring"
        );
        // Every remedy's library text in CLI words names no Rust path (perf's failures carry
        // the library's text, so this is what they print).
        for r in Remedy::examples() {
            let t = words(&r.to_string());
            assert!(!t.contains("::") || t.contains("[::"), "{r:?}: {t}");
        }
    }
}
