//! The `zcnet` command's wording of library errors: every [`Remedy`] as the flags and
//! commands that carry it out, and the library's config-field names in a message as the flags
//! that set them. The library itself never names a flag (its `Display` speaks `RxConfig`,
//! `TxMode`, `nic::NicGuard::apply`); this is the one place that maps its remedies to the CLI.

use zcnet::region::MemoryKind;
use zcnet::{Error, Remedy};

/// One remedy in the CLI's words (the leaf renderer for [`Remedy::render`]).
pub fn remedy_text(r: &Remedy) -> String {
    match r {
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
        other => other.library_text(),
    }
}

/// The library's names for what a flag sets, as the CLI's flags, for messages that name them
/// (the modes and memory kinds are added by [`words`]).
const FIELDS: [(&str, &str); 29] = [
    ("RxConfig::area_len", "--area"),
    ("RxConfig::iface", "--iface"),
    ("RxConfig::queue", "--queue"),
    ("RxConfig::no_device", "--no-device"),
    ("RxConfig::buffers", "--buffers"),
    ("RxConfig::buf_size", "--buf-size"),
    ("RxConfig::dmabuf", "--mem cuda or udmabuf"),
    ("TxConfig::dmabuf", "--mem cuda or udmabuf"),
    (
        "TxConfig::iface",
        "the interface the route to the peer leaves by",
    ),
    ("TxConfig::buffers", "--inflight"),
    ("Region::anonymous", "--mem host"),
    ("Region::huge", "--mem hugepage"),
    ("Region::cuda", "--mem cuda"),
    ("Region::for_sender", "--mem auto"),
    ("Region::write_at", "a write into device memory"),
    ("Region::read_at", "a read of device memory"),
    ("Sender::send_lent", "lent buffers"),
    ("RxConfig::low_water", "--rcvlowat"),
    ("RxConfig::mode", "--rx"),
    ("TxConfig::mode", "--tx"),
    ("TxConfig::inflight", "--inflight"),
    ("TxConfig::window", "--window"),
    ("TxConfig::buf_size", "--size"),
    ("ProbeOptions::iface", "--iface IF"),
    ("ProbeOptions::all_ifaces", "--all-ifaces"),
    ("ProbeOptions::active", "--active"),
    ("the queue given to probe_queue", "--queue"),
    ("NicSetup::flow", "--port"),
    ("another pattern seed", "another --seed"),
];

/// The prefix of the library's pointer to a NIC restore, followed by the interface and `)`.
const RESTORE: &str = "nic::restore_from_file (interface ";

/// Library text in the CLI's words: config fields, modes and memory kinds as the flags that
/// set them, and a NIC restore as the `zcnet nic restore` command.
pub fn words(text: &str) -> String {
    let mut pairs: Vec<(String, String)> = FIELDS
        .iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect();
    pairs.extend(
        zcnet::tx::TxMode::NAMED
            .iter()
            .map(|m| (format!("TxMode::{m:?}"), format!("--tx {}", m.name()))),
    );
    pairs.extend(
        zcnet::rx::RxMode::ALL
            .iter()
            .map(|m| (format!("RxMode::{m:?}"), format!("--rx {}", m.name()))),
    );
    pairs.extend([
        ("MemoryKind::Anonymous".into(), "--mem host".into()),
        ("MemoryKind::Auto".into(), "--mem auto".into()),
        ("MemoryKind::Huge".into(), "--mem hugepage".into()),
        ("MemoryKind::Udmabuf".into(), "--mem udmabuf".into()),
        ("MemoryKind::Cuda".into(), "--mem cuda".into()),
    ]);
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

/// A library error as the `zcnet` command prints it: its remedies in flags and commands
/// ([`remedy_text`]), and the rest in the CLI's [`words`].
pub fn error_text(e: &Error) -> String {
    words(&e.display_with(&remedy_text).to_string())
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
            let cli = words(&r.render(&remedy_text));
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
