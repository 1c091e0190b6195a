//! The library speaks library, not CLI: no string literal in `crates/zcnet/src` (or in
//! `crates/zcnet-core/src`, whose probe verdicts the library passes on as they are) names a
//! command-line flag (`--` followed by a letter) or a `zcnet` subcommand, and no rendering of
//! a [`Remedy`] does. The `zcnet` command words remedies in flags itself (zcnet-cli's
//! `cli_text`); an embedder, a C caller reading `zcnet_last_error()` and a Python user read the
//! library's words.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use zcnet::error::Error;
use zcnet::Remedy;

const SUBCOMMANDS: [&str; 5] = ["nic", "recv", "send", "probe", "bench"];

/// What in `text` reads as CLI language, if anything: a flag (`--` and a letter, at the start of
/// a word) or `zcnet` and a subcommand.
fn cli_words(text: &str) -> Option<String> {
    let b = text.as_bytes();
    for i in 0..b.len().saturating_sub(2) {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-');
        if word_start && b[i] == b'-' && b[i + 1] == b'-' && b[i + 2].is_ascii_alphabetic() {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(text.len(), |n| i + n);
            return Some(text[i..end].to_string());
        }
    }
    for (at, _) in text.match_indices("zcnet ") {
        let rest = &text[at + "zcnet ".len()..];
        if let Some(cmd) = SUBCOMMANDS.iter().find(|c| rest.starts_with(*c)) {
            return Some(format!("zcnet {cmd}"));
        }
    }
    None
}

/// The string literals of a Rust source, with the line each starts on: comments (line, block,
/// doc) and char literals are skipped; raw strings are read whole.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0usize;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = j + 1;
                let end = src[start..].find(&close).map_or(b.len(), |n| start + n);
                out.push((line, src[start..end].to_string()));
                line += src[start..end].matches('\n').count();
                i = end + close.len();
            }
            b'\'' => {
                // A char literal ('"', '\'', '\n') or a lifetime ('a): skip the char literal.
                if b.get(i + 1) == Some(&b'\\') {
                    let end = src[i + 2..].find('\'').map_or(b.len(), |n| i + 2 + n);
                    i = end + 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'"' => {
                let start_line = line;
                let mut s = String::new();
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        // A line continuation drops the newline and the next line's indent.
                        if b.get(i + 1) == Some(&b'\n') {
                            line += 1;
                            i += 2;
                            while i < b.len() && b[i].is_ascii_whitespace() {
                                if b[i] == b'\n' {
                                    line += 1;
                                }
                                i += 1;
                            }
                            continue;
                        }
                        s.push(b[i + 1] as char);
                        i += 2;
                        continue;
                    }
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    let ch = src[i..].chars().next().unwrap();
                    s.push(ch);
                    i += ch.len_utf8();
                }
                out.push((start_line, s));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[zcnet_testkit::test]
fn the_lexer_finds_literals_and_skips_comments() {
    let src = "// \"--rx\" in a comment\n/// \"--tx\" in a doc comment\n/* \"--mem\" */ let c = '\"';\nlet a = \"use --rx uring\"; let b = r#\"zcnet nic setup\"#;\nlet d = \"a \\\n    b --iface\";";
    let lits = string_literals(src);
    let found: Vec<_> = lits
        .iter()
        .filter_map(|(l, s)| cli_words(s).map(|w| (*l, w)))
        .collect();
    assert_eq!(
        found,
        vec![
            (4, "--rx".to_string()),
            (4, "zcnet nic".to_string()),
            (5, "--iface".to_string())
        ],
        "{lits:?}"
    );
    assert_eq!(cli_words("a -- b, x--y 2"), None);
}

#[zcnet_testkit::test]
fn no_string_literal_in_the_library_names_a_flag_or_a_subcommand() {
    // The library and the core beneath it: the probe's verdicts and remedies (zcnet-core) reach
    // a C caller and a Python user through the probe's JSON as they are.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&manifest.join("src"), &mut files);
    let library = files.len();
    rust_files(&manifest.join("../zcnet-core/src"), &mut files);
    files.sort();
    assert!(library > 20 && files.len() > library + 20, "{files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for (line, lit) in string_literals(&src) {
            if let Some(w) = cli_words(&lit) {
                let rel = f.strip_prefix(manifest).unwrap_or(f);
                bad.push(format!("{}:{line}: '{w}' in \"{lit}\"", rel.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "CLI language in the library (say it with RxConfig/TxConfig fields, modes and functions, or a Remedy):\n{}",
        bad.join("\n")
    );
}

#[zcnet_testkit::test]
fn every_remedy_renders_in_library_words() {
    let all = Remedy::examples();
    assert!(all.len() > 20);
    for r in all {
        let text = r.to_string();
        assert!(cli_words(&text).is_none(), "{r:?}: {text}");
        assert!(!text.contains('\n'), "{r:?}: {text}");
        assert_eq!(text.is_empty(), r == Remedy::None, "{r:?}");
        // And inside an error, as a C caller or a Python user reads it.
        let e = Error::Unsupported {
            what: "zcrx".into(),
            source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            remedy: r,
        };
        assert!(cli_words(&e.to_string()).is_none(), "{e}");
    }
}

#[zcnet_testkit::test(timeout = 60)]
fn the_probe_report_speaks_library() {
    // What a C caller (`zcnet_probe_json`) and `zcnet.probe()` get: this machine's report, the
    // verdicts and remedies of every interface here (lo, the boot-time devices), passive and
    // with the loopback send trials. Read only: the trials on interfaces are not asked for.
    for active in [false, true] {
        let opts = zcnet::probe::ProbeOptions {
            active,
            ..Default::default()
        };
        let report = zcnet::probe::probe(&opts).unwrap();
        let json = zcnet::probe::json::to_json(&report, &zcnet::text::Library).to_string();
        assert!(json.contains("\"remedy\""), "{json}");
        assert_eq!(cli_words(&json), None, "active {active}: {json}");
    }
}

#[zcnet_testkit::test]
fn a_front_end_words_remedies_itself() {
    let e = Error::Unsupported {
        what: "zcrx".into(),
        source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        remedy: Remedy::Any(&[
            Remedy::SetupNic,
            Remedy::UseRxMode(zcnet::rx::RxMode::Uring),
        ]),
    };
    let lib = e.to_string();
    assert!(lib.contains("RxMode::Uring"), "{lib}");
    // A voice that says terms its own way and one remedy in its own words.
    struct Shout;
    impl zcnet::text::Words for Shout {
        fn term(&self, t: &zcnet::text::Term) -> String {
            zcnet::text::Words::term(&zcnet::text::Library, t).to_uppercase()
        }
    }
    impl zcnet::Voice for Shout {
        fn remedy(&self, r: &Remedy) -> Option<String> {
            matches!(r, Remedy::SetupNic).then(|| "SET THE NIC UP".to_string())
        }
    }
    let other = e.render(&Shout);
    assert!(
        other.ends_with(": SET THE NIC UP, or use RXMODE::URING"),
        "{other}"
    );
    // The same error as data: its remedies in the library's wording, its terms typed.
    let t = e.text();
    assert!(
        t.terms().any(|t| *t == zcnet::rx::RxMode::Uring.term()),
        "{t}"
    );
    assert_eq!(t.to_string(), lib);
}

zcnet_testkit::main!();
