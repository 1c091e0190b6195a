//! The `zcnet` command's voice ([`Cli`]): the terms of the library's messages (settings, modes,
//! memory kinds, calls) as the flags and commands that carry them out, and its own wording of
//! the remedies it says differently. The library never names a flag (its `Display` speaks
//! `RxConfig`, `TxMode`, `nic::NicGuard::apply`); messages are rendered from their terms
//! ([`zcnet::text`](mod@zcnet::text)), never rewritten.

use zcnet::region::MemoryKind;
use zcnet::text::{Call, Field, Library, Term, Text, Words};
#[cfg(test)]
use zcnet::TxMode;
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
                format!(
                    "start a receiver there first (zcnet recv --listen {})",
                    zcnet::net::AddrText(*addr)
                )
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

/// A report's notes (zcnet-tools' benches), their terms in [`Cli`]'s words.
pub fn notes(notes: &[Text]) -> Vec<String> {
    notes.iter().map(|n| n.render(&Cli)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet::text::IfName;

    /// The library builds every message from words and typed terms: no string literal of the
    /// library, its sans-IO core or the tools names a config field, mode, memory kind or call
    /// as a Rust path (only zcnet-core's `text.rs`, the library's own words, and tests do). A
    /// message that did would reach the command's user as a Rust path: nothing rewrites text.
    #[test]
    fn no_message_names_a_library_path_in_its_words() {
        const PATHS: [&str; 16] = [
            "RxConfig::",
            "TxConfig::",
            "ProbeOptions::",
            "NicSetup::",
            "MemoryKind::",
            "TxMode::",
            "RxMode::",
            "Region::",
            "Sender::",
            "nic::NicGuard",
            "nic::restore_from_file",
            "nic::LiveNic",
            "probe::probe",
            "XskMode::",
            "XdpMode::",
            "GpuPath::",
        ];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        let mut dirs = vec![
            root.join("zcnet/src"),
            root.join("zcnet-core/src"),
            root.join("zcnet-tools/src"),
        ];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if p.is_dir() {
                    if name != "tests" {
                        dirs.push(p);
                    }
                } else if name.ends_with(".rs") && name != "tests.rs" {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 100, "{} files", files.len());
        let own_words = root.join("zcnet-core/src/text.rs");
        let mut found = Vec::new();
        for f in files.iter().filter(|f| **f != own_words) {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("#[cfg(test)]") {
                    break;
                }
                if code.starts_with("//") || !code.contains('"') {
                    continue;
                }
                for (i, lit) in code.split('"').enumerate() {
                    // A path at the start of a word (`StagedSender::send_from` is not
                    // `Sender::`).
                    let named = PATHS.iter().any(|p| {
                        lit.match_indices(p).any(|(at, _)| {
                            !lit[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                        })
                    });
                    if i % 2 == 1 && named {
                        found.push(format!("{}:{}: {lit}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(found.is_empty(), "library paths in words: {found:#?}");
    }

    #[test]
    fn every_remedy_and_term_has_cli_words() {
        for r in Remedy::examples() {
            let lib = r.to_string();
            let cli = r.render(&Cli);
            assert!(!cli.contains("::") || cli.contains("[::"), "{r:?}: {cli}");
            if matches!(
                r,
                Remedy::UseRxMode(_) | Remedy::UseTxMode(_) | Remedy::ChooseQueue
            ) {
                assert!(cli.contains("--"), "{r:?}: {cli}");
                assert!(!lib.contains("--"), "{r:?}: {lib}");
            }
        }
        for f in Field::ALL {
            let t = Cli.term(&Term::Field(f));
            assert!(!t.contains("::"), "{f:?}: {t}");
        }
        let eth1 = Some(IfName::new("eth1"));
        let said = |t: Text| t.render(&Cli);
        assert_eq!(
            said(Text::from("undo them with ") + Call::NicRestore { iface: eth1 } + "; or not"),
            "undo them with 'zcnet nic restore --iface eth1'; or not"
        );
        assert_eq!(
            said(Text::from(Call::SetChannels {
                iface: eth1,
                change: Some(("combined", 2))
            })),
            "zcnet nic channels --iface eth1 --combined 2"
        );
        // The probe's remedies (zcnet-core's terms) as the commands that carry them out.
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
        assert!(!setup.to_string().contains("--"), "{setup}");
        assert_eq!(
            said(Text::from("as root: ") + setup + "; then retry"),
            format!(
                "as root: zcnet nic setup --iface eth9 --queue {} --port PORT; then retry",
                facts.trial_queue()
            )
        );
        assert_eq!(
            said(Text::from("use ") + TxMode::UringZc.term() + " or " + TxMode::Uring.term()),
            "use --tx uring-zc or --tx uring"
        );
        // A queue the interface lacks is said with the flag, from the term (nothing prepends it).
        let e = Error::invalid_input(zcnet::text!(Field::RxQueue, " 7: lo has 1 RX queue(s)"));
        assert_eq!(error_text(&e), "--queue 7: lo has 1 RX queue(s)");
        assert_eq!(e.to_string(), "RxConfig::queue 7: lo has 1 RX queue(s)");
    }
}
