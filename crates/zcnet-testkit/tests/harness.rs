//! The harness's own rules, checked on small functions through `run_bounded` (the same path
//! every registered test takes), and the workspace rule that no libtest `#[test]` hides in a
//! target that runs under this harness (it would never run).

use std::path::{Path, PathBuf};
use std::time::Duration;
use zcnet_testkit::{run_bounded, skip, Need, Outcome};

zcnet_testkit::main!();

fn passes() -> Result<(), String> {
    Ok(())
}
fn skips_for_root() -> Result<(), String> {
    skip(Need::Root, "creates namespaces")
}
fn skips_deep_in_a_helper() -> Result<(), String> {
    fn helper() -> u32 {
        skip(Need::Tool, "needs `nothing-here`")
    }
    Err(format!("helper returned {}", helper()))
}
fn panics() -> Result<(), String> {
    panic!("assertion failed: 1 == 2")
}
fn errs() -> Result<(), String> {
    Err("Os { code: 110 }".into())
}
fn hangs() -> Result<(), String> {
    std::thread::sleep(Duration::from_secs(3600));
    Ok(())
}

const LIMIT: Duration = Duration::from_secs(10);

#[zcnet_testkit::test]
fn a_pass_is_a_pass() {
    assert_eq!(run_bounded("p", LIMIT, &[], passes), Outcome::Passed);
}

#[zcnet_testkit::test]
fn a_skip_is_reported_with_its_need_and_reason_not_as_a_pass() {
    assert_eq!(
        run_bounded("s", LIMIT, &[], skips_for_root),
        Outcome::Skipped("creates namespaces [root]".into())
    );
    assert_eq!(
        run_bounded("s", LIMIT, &[Need::Kernel], skips_deep_in_a_helper),
        Outcome::Skipped("needs `nothing-here` [tool]".into())
    );
}

#[zcnet_testkit::test]
fn strict_mode_turns_a_skip_for_a_listed_need_into_a_failure() {
    match run_bounded("s", LIMIT, &[Need::Root, Need::Tool], skips_for_root) {
        Outcome::Failed(m) => assert!(
            m.contains("ZCNET_TEST_STRICT") && m.contains("[root]"),
            "{m}"
        ),
        o => panic!("{o:?}"),
    }
}

#[zcnet_testkit::test]
fn panics_and_errors_fail_with_their_message() {
    match run_bounded("f", LIMIT, &[], panics) {
        Outcome::Failed(m) => assert!(
            m.starts_with("assertion failed: 1 == 2\n  at ") && m.contains("harness.rs:"),
            "{m}"
        ),
        o => panic!("{o:?}"),
    }
    assert_eq!(
        run_bounded("e", LIMIT, &[], errs),
        Outcome::Failed("Os { code: 110 }".into())
    );
}

#[zcnet_testkit::test]
fn a_hang_fails_by_its_limit_naming_the_test() {
    let t = std::time::Instant::now();
    match run_bounded("lab::hung_test", Duration::from_millis(300), &[], hangs) {
        Outcome::Failed(m) => {
            assert!(m.starts_with("lab::hung_test: timed out"), "{m}");
            // ...and says where the hung thread sleeps (its name is the test's).
            assert!(
                m.lines()
                    .any(|l| l.contains("'lab::hung_test' S in ") && l.contains("sleep")),
                "{m}"
            );
        }
        o => panic!("{o:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[zcnet_testkit::test]
fn the_attribute_registers_results_and_time_limits() {
    // This very file's tests are registered: find two of them by name, with their limits.
    let me: Vec<&zcnet_testkit::Test> = zcnet_testkit::inventory::iter::<zcnet_testkit::Test>
        .into_iter()
        .filter(|t| t.module == "harness")
        .collect();
    let limited = me
        .iter()
        .find(|t| t.name == "limited_and_returning_a_result")
        .expect("registered");
    assert_eq!(limited.timeout_s, Some(7));
    assert_eq!((limited.run)(), Err("\"an error\"".to_string()));
    let ignored = me
        .iter()
        .find(|t| t.name == "kept_out")
        .expect("registered");
    assert_eq!(ignored.ignored, Some("run by hand"));
}

#[zcnet_testkit::test(timeout = 7)]
#[ignore = "its result is checked by the_attribute_registers_results_and_time_limits"]
fn limited_and_returning_a_result() -> Result<(), &'static str> {
    Err("an error")
}

#[zcnet_testkit::test]
#[ignore = "run by hand"]
fn kept_out() {}

/// An `#[ignore = "why"]` test's line in the output says why (CI counts skips: a bare
/// "ignored" gave no reason), and `--ignored` still runs it.
#[zcnet_testkit::test]
fn an_ignored_test_says_why_and_still_runs_when_asked() {
    let exe = std::env::current_exe().expect("this test's executable");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(&exe)
            .args(["kept_out", "--exact"])
            .args(extra)
            .output()
            .expect("running this test's executable");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = run(&[]);
    assert!(
        plain.contains("kept_out ... ignored (run by hand)") && plain.contains("1 ignored"),
        "{plain}"
    );
    let asked = run(&["--ignored"]);
    assert!(
        asked.contains("kept_out ... ok") && asked.contains("1 passed"),
        "{asked}"
    );
}

/// The workspace root (two levels above this crate).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Targets of `manifest` declared with `harness = false`: "lib" and the `[[test]]` names.
fn harnessless(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut name = None::<String>;
    let flush = |section: &str, name: &Option<String>, off: bool, out: &mut Vec<String>| {
        if off {
            match section {
                "[lib]" => out.push("lib".into()),
                "[[test]]" => out.extend(name.clone()),
                _ => {}
            }
        }
    };
    let mut off = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(&section, &name, off, &mut out);
            section = line.to_string();
            name = None;
            off = false;
        } else if let Some(v) = line.strip_prefix("name") {
            name = Some(
                v.trim_start_matches([' ', '='])
                    .trim_matches('"')
                    .to_string(),
            );
        } else if line.replace(' ', "") == "harness=false" {
            off = true;
        }
    }
    flush(&section, &name, off, &mut out);
    out
}

/// Every crate but zcnet-core (sans-IO, no I/O to bound or skip: it stays on libtest, with
/// proptest) and the proc macro runs its tests under this harness: its library's unit tests
/// (when it has any) and every file of tests/. A `#[test]` there would be dropped unseen.
#[zcnet_testkit::test]
fn no_libtest_tests_left() {
    let crates = workspace().join("crates");
    let mut problems = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if name == "zcnet-core" || name == "zcnet-testkit-macros" {
            continue;
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let off = harnessless(&manifest);
        let mut files = Vec::new();
        // The command's binary keeps its pure argument tests on libtest (a binary's test
        // target with harness = false would run the command itself).
        if name != "zcnet-cli" {
            rust_files(&dir.join("src"), &mut files);
            let has_unit_tests = files.iter().any(|f| {
                std::fs::read_to_string(f).is_ok_and(|s| {
                    s.lines()
                        .any(|l| l.trim_start().starts_with("#[zcnet_testkit::test"))
                })
            });
            if has_unit_tests && !off.iter().any(|t| t == "lib") {
                problems.push(format!("{name}: unit tests but no `[lib] harness = false`"));
            }
        }
        let tests = dir.join("tests");
        if let Ok(rd) = std::fs::read_dir(&tests) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "rs") {
                    let stem = p
                        .file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .to_string();
                    if !off.contains(&stem) {
                        problems.push(format!(
                            "{name}/tests/{stem}.rs: no [[test]] name = \"{stem}\" with harness = false"
                        ));
                    }
                }
            }
        }
        rust_files(&tests, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for (i, line) in text.lines().enumerate() {
                let l = line.trim_start();
                if l.starts_with("#[test]") || l.starts_with("#[tokio::test") {
                    problems.push(format!(
                        "{}:{}: a libtest #[test] (use #[zcnet_testkit::test])",
                        f.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[zcnet_testkit::test]
fn cargo_manifest_reading_finds_harnessless_targets() {
    let m = "[package]\nname = \"x\"\n[lib]\nharness = false\n[[test]]\nname = \"lab\"\nharness = false\n[[test]]\nname = \"other\"\n[dependencies]\n";
    assert_eq!(harnessless(m), vec!["lib".to_string(), "lab".to_string()]);
}

#[zcnet_testkit::test]
fn a_regular_file_in_place_of_dev_null_is_named() {
    assert_eq!(
        zcnet_testkit::dev_null_broken(),
        None,
        "this machine's /dev/null"
    );
    let dir = std::env::temp_dir().join(format!("zcnet-devnull-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let fake = dir.join("null");
    std::fs::write(&fake, b"error[E0554]\n").expect("a file in it");
    let what = zcnet_testkit::not_null_device(&fake);
    let missing = zcnet_testkit::not_null_device(&dir.join("absent"));
    std::fs::remove_dir_all(&dir).expect("removing it");
    assert_eq!(what.as_deref(), Some("a regular file of 13 B"));
    assert!(missing.is_some_and(|m| m.starts_with("unreadable")));
    // /dev/zero is a character device, but not the null one.
    let zero = zcnet_testkit::not_null_device(std::path::Path::new("/dev/zero"));
    assert!(zero.is_some_and(|z| z.contains("not 1:3")), "/dev/zero");
}
