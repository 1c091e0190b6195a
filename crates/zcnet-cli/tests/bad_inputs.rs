//! The bad-input corpus (tests/bad_inputs.tsv): every bad or odd invocation of every command and
//! script the project ships, its exit code and the words of the one line it must print. Each
//! runs here with a time limit; stdout must stay empty, stderr must be that one line.
//!
//! The corpus must keep up with the commands: every subcommand `zcnet --help` lists, every flag
//! of each (from its `--help`) and every script in scripts/ needs a line, or for a flag an
//! `@exempt` line saying why it has no bad input. A new flag without one fails this test.
//!
//! Nothing is sent anywhere but 127.0.0.1 and ::1, and no name is looked up through DNS
//! (names that do not resolve are tested in the parsers' unit tests, with a stand-in resolver).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one invocation may take: every one is refused before it connects or runs.
const LIMIT: Duration = Duration::from_secs(20);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs.tsv"))
        .unwrap()
}

/// One line of the corpus.
#[derive(Debug)]
struct Case {
    line: usize,
    code: i32,
    /// `root` (skipped without root), `nobody` (run as uid 65534 through setpriv: needs root),
    /// `memlock=N` (RLIMIT_MEMLOCK N, soft and hard, through prlimit), `absent=PATH` (skipped
    /// where PATH exists), `privport=N` (skipped where an unprivileged user may bind port N),
    /// comma-separated; `-`.
    run_as: Vec<String>,
    /// Every one of these is in the one stderr line.
    words: Vec<String>,
    env: Vec<(String, String)>,
    /// The program (`zcnet` or `scripts/...`) and its arguments.
    argv: Vec<String>,
}

/// `@exempt <TAB> zcnet SUB <TAB> FLAGS <TAB> why`: flags with no bad input of their own.
struct Corpus {
    cases: Vec<Case>,
    exempt: BTreeMap<String, BTreeSet<String>>,
}

fn parse() -> Corpus {
    let mut cases = Vec::new();
    let mut exempt: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, l) in corpus_text().lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        if f[0] == "@exempt" {
            assert_eq!(f.len(), 4, "line {line}: @exempt, command, flags, why: {l}");
            assert!(
                !f[3].trim().is_empty(),
                "line {line}: an exemption says why"
            );
            exempt
                .entry(f[1].to_string())
                .or_default()
                .extend(f[2].split_whitespace().map(str::to_string));
            continue;
        }
        assert_eq!(f.len(), 4, "line {line}: code, as, words, command: {l}");
        let mut env = Vec::new();
        let mut argv = Vec::new();
        for t in f[3].split(' ').filter(|t| !t.is_empty()) {
            let t = if t == "''" { "" } else { t };
            match t.split_once('=') {
                Some((k, v))
                    if argv.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') =>
                {
                    env.push((k.to_string(), v.to_string()))
                }
                _ => argv.push(t.to_string()),
            }
        }
        assert!(
            argv[0] == "zcnet" || argv[0].starts_with("scripts/"),
            "line {line}: runs zcnet or a script: {l}"
        );
        cases.push(Case {
            line,
            code: f[0].parse().unwrap(),
            run_as: f[1]
                .split(',')
                .filter(|s| *s != "-")
                .map(str::to_string)
                .collect(),
            words: f[2].split('|').map(str::to_string).collect(),
            env,
            argv,
        });
    }
    Corpus { cases, exempt }
}

/// `zcnet ARGS --help`, as text.
fn help(args: &[&str]) -> String {
    let o = common::zcnet(&[args, &["--help"]].concat());
    assert!(o.status.success(), "zcnet {args:?} --help");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The subcommands a help text lists under "Commands:" (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(str::to_string)
        .collect()
}

/// Every command that runs (`zcnet send`, `zcnet nic setup`, ...), from `zcnet --help` down.
fn leaf_commands() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let subs = subcommands(&help(&args));
        if subs.is_empty() {
            out.push(path);
        } else {
            for s in subs {
                let mut p = path.clone();
                p.push(s);
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A command's options from its help: each as its spellings (`-t`, `--time`), help left out.
fn flags(help: &str) -> Vec<Vec<String>> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .filter_map(|l| {
            let l = l.trim_start();
            if !l.starts_with('-') {
                return None;
            }
            let names: Vec<String> = l
                .split_whitespace()
                .map(|w| w.trim_end_matches(','))
                .take_while(|w| w.starts_with('-'))
                .map(str::to_string)
                .collect();
            let own = names
                .iter()
                .any(|n| !matches!(n.as_str(), "-h" | "--help" | "-V" | "--version"));
            own.then_some(names)
        })
        .collect()
}

#[zcnet_testkit::test]
fn every_command_flag_and_script_has_bad_inputs() {
    let corpus = parse();
    let mut missing = Vec::new();
    for cmd in leaf_commands() {
        let name = format!("zcnet {}", cmd.join(" "));
        let lines: Vec<&Case> = corpus
            .cases
            .iter()
            .filter(|c| c.argv.len() > cmd.len() && c.argv[1..=cmd.len()] == cmd[..])
            .collect();
        if lines.is_empty() {
            missing.push(format!("{name}: no line"));
            continue;
        }
        let exempt = corpus.exempt.get(&name).cloned().unwrap_or_default();
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        for spellings in flags(&help(&args)) {
            let used = lines.iter().any(|c| {
                c.argv.iter().any(|a| {
                    spellings
                        .iter()
                        .any(|s| a == s || a.starts_with(&format!("{s}=")))
                })
            });
            if !used && !spellings.iter().any(|s| exempt.contains(s)) {
                missing.push(format!(
                    "{name} {}: no line and no @exempt",
                    spellings.join("/")
                ));
            }
        }
    }
    for e in std::fs::read_dir(repo().join("scripts")).unwrap() {
        let e = e.unwrap();
        // scripts/lib holds what the scripts source, not scripts to run.
        if e.file_type().unwrap().is_dir() {
            continue;
        }
        let name = format!("scripts/{}", e.file_name().to_string_lossy());
        if !corpus.cases.iter().any(|c| c.argv[0] == name) {
            missing.push(format!("{name}: no line"));
        }
    }
    assert!(
        missing.is_empty(),
        "tests/bad_inputs.tsv lacks bad inputs for:\n  {}",
        missing.join("\n  ")
    );
}

/// Whether `line` has a Rust path in it (`TxConfig::inflight`, `nic::NicGuard::apply`): a letter,
/// `::`, a letter (an IPv6 address has a digit or a bracket beside its `::`).
fn names_a_rust_path(line: &str) -> bool {
    let b = line.as_bytes();
    (1..b.len().saturating_sub(2)).any(|i| {
        &b[i..i + 2] == b"::" && b[i - 1].is_ascii_alphabetic() && b[i + 2].is_ascii_alphabetic()
    })
}

/// Runs one case to its end or its limit (then kills its process group).
fn run(c: &Case, listener: &str, closed: &str) -> (Option<i32>, String, String, Duration) {
    let argv: Vec<String> = c
        .argv
        .iter()
        .map(|a| match a.as_str() {
            "ADDR" => listener.to_string(),
            "CLOSED" => closed.to_string(),
            "CLOSEDPORT" => closed.rsplit(':').next().unwrap_or_default().to_string(),
            a => a.to_string(),
        })
        .collect();
    let program = if argv[0] == "zcnet" {
        env!("CARGO_BIN_EXE_zcnet").to_string()
    } else {
        repo().join(&argv[0]).display().to_string()
    };
    let mut pre: Vec<String> = Vec::new();
    for r in &c.run_as {
        if let Some(n) = r.strip_prefix("memlock=") {
            pre.extend(["prlimit".into(), format!("--memlock={n}:{n}")]);
        }
    }
    if c.run_as.iter().any(|r| r == "nobody") {
        pre.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from),
        );
    }
    let mut cmd = match pre.first() {
        Some(p) => {
            let mut cmd = Command::new(p);
            cmd.args(&pre[1..]).arg(&program);
            cmd
        }
        None => Command::new(&program),
    };
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_zcnet")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.args(&argv[1..])
        .env("PATH", path)
        .env("ZCNET", env!("CARGO_BIN_EXE_zcnet"))
        .envs(c.env.iter().map(|(k, v)| (k, v)))
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t0.elapsed() > LIMIT {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    (code, o.join().unwrap(), e.join().unwrap(), took)
}

#[zcnet_testkit::test(timeout = 900)]
fn every_bad_input_is_one_line_naming_the_cause_with_its_exit_code() {
    let corpus = parse();
    let root = common::is_root();
    let have_setpriv = zcnet_testkit::have_tool("setpriv");
    let have_prlimit = zcnet_testkit::have_tool("prlimit");
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    for c in &corpus.cases {
        let needs_root = c.run_as.iter().any(|r| r == "root" || r == "nobody");
        if needs_root && !root {
            skipped.push(format!("line {}: needs root", c.line));
            continue;
        }
        // What the line is about may not hold here (a kernel with /dev/udmabuf, a machine
        // whose unprivileged users may bind low ports).
        if let Some(p) = c.run_as.iter().find_map(|r| r.strip_prefix("absent=")) {
            if Path::new(p).exists() {
                skipped.push(format!("line {}: {p} exists here", c.line));
                continue;
            }
        }
        if let Some(n) = c.run_as.iter().find_map(|r| r.strip_prefix("privport=")) {
            let start: u32 =
                std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(1024);
            if n.parse::<u32>().unwrap() >= start {
                skipped.push(format!("line {}: port {n} is not privileged here", c.line));
                continue;
            }
        }
        // A script another change is still to add (or has removed): its lines wait.
        if c.argv[0] != "zcnet" && !repo().join(&c.argv[0]).exists() {
            skipped.push(format!("line {}: no {} in this tree", c.line, c.argv[0]));
            continue;
        }
        if c.run_as.iter().any(|r| r == "nobody") && !have_setpriv {
            skipped.push(format!("line {}: needs setpriv", c.line));
            continue;
        }
        if c.run_as.iter().any(|r| r.starts_with("memlock=")) && !have_prlimit {
            skipped.push(format!("line {}: needs prlimit", c.line));
            continue;
        }
        // A listener that must see no connection, and a port nothing listens on.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let listener = l.local_addr().unwrap().to_string();
        let closed = {
            let c = TcpListener::bind("127.0.0.1:0").unwrap();
            c.local_addr().unwrap().to_string()
        };
        let (code, out, err, took) = run(c, &listener, &closed);
        let what = format!("line {}: {}", c.line, c.argv.join(" "));
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut wrong = Vec::new();
        if code != Some(c.code) {
            wrong.push(format!("exit {code:?}, not {}", c.code));
        }
        if lines.len() != 1 {
            wrong.push(format!("{} lines on stderr, not one", lines.len()));
        }
        for w in &c.words {
            if !lines.first().is_some_and(|l| l.contains(w.as_str())) {
                wrong.push(format!("no '{w}'"));
            }
        }
        if !out.is_empty() {
            wrong.push(format!("printed on stdout: {}", out.trim_end()));
        }
        if let Some(l) = lines.iter().find(|l| names_a_rust_path(l)) {
            wrong.push(format!("names a Rust type or function, not a flag: {l}"));
        }
        if let Ok(x) = l.accept() {
            wrong.push(format!("connected to the listener first: {:?}", x.1));
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{what} ({took:.1?}): {}\n    stderr: {}",
                wrong.join("; "),
                err.trim_end().replace('\n', "\n            ")
            ));
        }
    }
    for s in &skipped {
        eprintln!("bad_inputs: skipped {s}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs answered wrongly:\n{}",
        failures.len(),
        corpus.cases.len(),
        failures.join("\n")
    );
}

#[zcnet_testkit::test]
fn a_rust_path_is_told_from_an_ipv6_address() {
    assert!(names_a_rust_path("use fewer (TxConfig::inflight)"));
    assert!(names_a_rust_path("with nic::NicGuard::apply"));
    assert!(!names_a_rust_path(
        "listen on [::1]:5201 or [fe80::1%lo]:5201"
    ));
    assert!(!names_a_rust_path("[::ffff:127.0.0.1]:9 and fe80::abcd"));
}

zcnet_testkit::main!();
