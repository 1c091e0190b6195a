//! The workspace's layering, checked on its sources: no crate's top-level modules import each
//! other in a circle, and only the crates below the library (and the benchmarks' raw loops and
//! the namespace lab, beside it) depend on the unsafe sys crate.
//!
//! A module's imports are the paths its non-test code names: `crate::m`, `crate::{m, …}`,
//! `super::…` chains that reach the crate root, and the root's re-exports (`crate::Error` is the
//! module that `lib.rs` re-exports it from). Doc comments and test code (`#[cfg(test)]`
//! modules, `tests.rs` and `*_tests.rs` files) are not imports.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates that may depend on zcnet-sys: the library, the netlink crate below it, the raw
/// loops the benchmarks measure the library against, and the namespace lab (beside the library,
/// not above it: the library's own tests use it, so it cannot use zcnet's API; it takes setns,
/// its one unsafe call, and the root check from zcnet-sys's safe wrappers).
const SYS_USERS: [&str; 4] = ["zcnet", "zcnet-netlink", "zcnet-rawbench", "zcnet-lab"];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

/// The text with comments and string literals blanked (so that neither names a module).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'"'
            || (b[i] == b'r'
                && b.get(i + 1).is_some_and(|&c| c == b'"' || c == b'#')
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')))
        {
            // A string (raw or not): skipped to its end.
            let mut hashes = 0;
            if b[i] == b'r' {
                i += 1;
                while b.get(i) == Some(&b'#') {
                    hashes += 1;
                    i += 1;
                }
                if b.get(i) != Some(&b'"') {
                    continue;
                }
                i += 1;
                loop {
                    match b.get(i) {
                        None => break,
                        Some(b'"')
                            if b[i + 1..]
                                .iter()
                                .take(hashes)
                                .filter(|&&c| c == b'#')
                                .count()
                                == hashes =>
                        {
                            i += 1 + hashes;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            } else {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A one-character literal such as '"' or '{'.
            out.push_str("' '");
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            let end = b[i + 2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |p| i + 3 + p);
            out.push_str("' '");
            i = end;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The code without its `#[cfg(test)]` items (an inline module or a `mod x;` line), and the
/// names of the test modules declared as files.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut file_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let semi = after.find(';').unwrap_or(after.len());
        let brace = after.find('{').unwrap_or(after.len());
        if semi < brace {
            let item = after[..semi].trim();
            if let Some(name) = item
                .split_whitespace()
                .last()
                .filter(|_| item.contains("mod "))
            {
                file_mods.push(name.to_string());
            }
            rest = &after[(semi + 1).min(after.len())..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, c) in after.char_indices().skip(brace) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, file_mods)
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names a `crate::{…}` group names (its first path segment of each entry).
fn group_heads(group: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(ident_at(group[start..k].trim()));
                start = k + 1;
            }
            _ => {}
        }
    }
    heads.push(ident_at(group[start..].trim()));
    heads
}

/// The top-level names the code reaches from the crate root: `crate::x`, `crate::{x, …}`,
/// and `super::` chains `depth` long (from a file `depth` modules below the root).
fn root_names(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut add = |rest: &str| {
        if let Some(group) = rest.strip_prefix('{') {
            let end = {
                let mut d = 1;
                group
                    .char_indices()
                    .find(|&(_, c)| {
                        d += (c == '{') as i32 - (c == '}') as i32;
                        d == 0
                    })
                    .map_or(group.len(), |(k, _)| k)
            };
            for h in group_heads(&group[..end]) {
                names.insert(h.to_string());
            }
        } else {
            names.insert(ident_at(rest).to_string());
        }
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `zcnet_crate::` or the like
        }
        add(&code[at + "crate::".len()..]);
    }
    if depth > 0 {
        let chain = "super::".repeat(depth);
        for (at, _) in code.match_indices(&chain) {
            let before = &code[..at];
            if before.ends_with("super::") {
                continue;
            }
            let rest = &code[at + chain.len()..];
            if !rest.starts_with("super::") {
                add(rest);
            }
        }
    }
    names
}

struct Crate {
    name: String,
    /// Top-level module → the top-level modules it imports.
    graph: BTreeMap<String, BTreeSet<String>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module path of a file below `src` (`a/b.rs` and `a/b/mod.rs` are `[a, b]`; the root is `[]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("below src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

fn read_crate(dir: &Path) -> Option<Crate> {
    let src = dir.join("src");
    let root = ["lib.rs", "main.rs"]
        .into_iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())?;
    let name = dir.file_name()?.to_string_lossy().to_string();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // Binaries (src/bin) are crates of their own.
    files.retain(|f| !f.strip_prefix(&src).is_ok_and(|r| r.starts_with("bin")));
    let mut code = BTreeMap::new();
    let mut test_mods = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).ok()?;
        let (c, file_mods) = without_tests(&code_only(&text));
        let path = module_path(&src, f);
        for m in file_mods {
            let mut p = path.clone();
            p.push(m);
            test_mods.insert(p);
        }
        code.insert(f.clone(), (path, c));
    }
    let tops: BTreeSet<String> = code
        .values()
        .filter_map(|(p, _)| p.first().cloned())
        .collect();
    // The root's re-exports: `pub use m::{A, B}` makes `crate::A` an import of `m`.
    let mut reexports = BTreeMap::new();
    let root_code = &code[&root].1;
    for line in root_code.split(';') {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let head = ident_at(rest);
        if !tops.contains(head) {
            continue;
        }
        let tail = rest[head.len()..].trim_start_matches("::");
        let names: Vec<&str> = match tail.strip_prefix('{') {
            Some(g) => group_heads(g.trim_end_matches('}')),
            None => vec![tail.rsplit("::").next().unwrap_or(tail)],
        };
        for n in names {
            let n = n.split(" as ").last().unwrap_or(n).trim();
            reexports.insert(n.to_string(), head.to_string());
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, (path, c)) in &code {
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let is_test = stem == "tests"
            || stem.ends_with("_tests")
            || test_mods.iter().any(|t| path.starts_with(t))
            || path.iter().any(|p| p == "tests");
        let Some(top) = path.first() else { continue };
        if is_test {
            continue;
        }
        let deps = graph.entry(top.clone()).or_default();
        for n in root_names(c, path.len()) {
            let target = if tops.contains(&n) {
                Some(n)
            } else {
                reexports.get(&n).cloned()
            };
            if let Some(t) = target.filter(|t| t != top) {
                deps.insert(t);
            }
        }
    }
    Some(Crate { name, graph })
}

/// The circles of `graph` (strongly connected sets of more than one module), each sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two sets reach each other iff each reaches the other: fine for a few dozen modules.
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        if !reaches[m].contains(m) || out.iter().any(|c| c.contains(m)) {
            continue;
        }
        let circle: Vec<String> = graph
            .keys()
            .filter(|o| reaches[m].contains(*o) && reaches.get(o).is_some_and(|r| r.contains(m)))
            .cloned()
            .collect();
        out.push(circle);
    }
    out
}

fn workspace_crates() -> Vec<Crate> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs.iter().filter_map(|d| read_crate(d)).collect()
}

#[zcnet_testkit::test]
fn no_crate_has_an_import_circle_among_its_modules() {
    let crates = workspace_crates();
    assert!(
        crates
            .iter()
            .any(|c| c.name == "zcnet" && c.graph.len() > 10),
        "the library's modules were not found under {}",
        crates_dir().display()
    );
    let found: Vec<String> = crates
        .iter()
        .flat_map(|c| {
            circles(&c.graph)
                .into_iter()
                .map(move |circle| format!("{}: {}", c.name, circle.join(" ⇄ ")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import circles (move what both sides need into a module below them):\n{}",
        found.join("\n")
    );
}

#[zcnet_testkit::test]
fn the_reader_finds_circles_through_paths_groups_supers_and_reexports() {
    let dir = std::env::temp_dir().join(format!("zcnet-layering-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(src.join(p), s).unwrap();
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\npub use d::{Thing, Other as O};\n",
    );
    // a → b (a group), b → c (super:: from b/inner.rs), c → a (the root's re-export of d? no: a path)
    write("a.rs", "use crate::{b::X, std_like};\n// crate::d in a comment is no import\nconst S: &str = \"crate::d\";\n");
    write(
        "b/mod.rs",
        "mod inner;\n#[cfg(test)]\nmod tests { use crate::d; }\n",
    );
    write("b/inner.rs", "use super::super::c::Y;\n");
    write("c.rs", "fn f() -> crate::a::Z { todo!() }\n");
    write("d.rs", "use crate::Thing;\n#[cfg(test)]\nmod helper;\n");
    std::fs::create_dir_all(src.join("d")).unwrap();
    write("d/helper.rs", "use crate::a::Z;\n");
    let c = read_crate(&dir).expect("the crate is read");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(c.graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(c.graph["b"], BTreeSet::from(["c".to_string()]));
    assert_eq!(c.graph["c"], BTreeSet::from(["a".to_string()]));
    assert!(c.graph["d"].is_empty(), "{:?}", c.graph["d"]);
    assert_eq!(
        circles(&c.graph),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    let mut g = c.graph.clone();
    g.get_mut("c").unwrap().clear();
    g.get_mut("c").unwrap().insert("d".into());
    assert!(circles(&g).is_empty());
}

#[zcnet_testkit::test]
fn only_the_crates_below_the_library_and_the_raw_loops_use_the_sys_crate() {
    let mut users = Vec::new();
    for c in workspace_crates() {
        let manifest =
            std::fs::read_to_string(crates_dir().join(&c.name).join("Cargo.toml")).unwrap();
        // [dependencies] only: a test may reach the sys crate's test helpers.
        let deps = manifest
            .split("\n[")
            .find(|s| s.starts_with("dependencies]"))
            .unwrap_or("");
        if deps
            .lines()
            .any(|l| l.trim_start().starts_with("zcnet-sys"))
        {
            users.push(c.name.clone());
        }
    }
    assert!(
        users.iter().any(|u| u == "zcnet"),
        "the library's manifest was not read: {users:?}"
    );
    let above: Vec<&String> = users
        .iter()
        .filter(|u| !SYS_USERS.contains(&u.as_str()))
        .collect();
    assert!(
        above.is_empty(),
        "crates above the library depend on zcnet-sys: {above:?} (use zcnet's API, or move raw benchmark code to zcnet-rawbench)"
    );
}

zcnet_testkit::main!();
