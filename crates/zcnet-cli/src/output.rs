//! What the commands print the same way: the `--json` line of send and recv, the progress line
//! of a bench, and a bench's verdict. A leaf: it imports no command module.

use serde::Serialize;
use std::io::Write;
use zcnet::Error;

/// Prints `doc` as one line of JSON on stdout (the `--json` output of send and recv).
pub fn print_json(doc: &impl Serialize) -> Result<(), Error> {
    let line = serde_json::to_string(doc)
        .map_err(|e| Error::io("writing JSON", std::io::Error::other(e)))?;
    zcnet_tools::outln!("{line}");
    Ok(())
}

/// The end of a bench run: `Ok` when every case ran, else an error saying how many of them
/// failed (their rows say why), so that the command exits 1 — a table with failed rows is not
/// a successful run.
pub(crate) fn all_ran(bench: &str, failed: usize, total: usize) -> Result<(), Error> {
    if failed == 0 {
        return Ok(());
    }
    Err(Error::io(
        bench.to_string(),
        std::io::Error::other(format!(
            "{failed} of {total} case(s) failed (their rows say why)"
        )),
    ))
}

/// A progress line on stderr: rewritten in place on a terminal, one line per case otherwise.
pub(crate) fn show_progress(tty: bool, line: &str) {
    if tty {
        zcnet_tools::eout!("\r\x1b[K{line}");
    } else {
        zcnet_tools::eoutln!("{line}");
    }
    let _ = std::io::stderr().flush();
}

/// Clears the progress line on a terminal (before printing a result).
pub(crate) fn clear_progress(tty: bool) {
    if tty {
        zcnet_tools::eout!("\r\x1b[K");
    }
}
