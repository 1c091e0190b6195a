//! How `zcnet perf` fails: one line that names the cause and, where there is one, the fix.

use super::proto::ProtoError;
use super::voice::PerfVoice;

/// A failed `zcnet perf` run.
#[derive(Debug)]
#[non_exhaustive]
pub enum PerfError {
    /// The command line is wrong (exit status 2); the text names the flag.
    Usage(String),
    /// The test could not be run or did not complete (exit status 1).
    Failed(String),
    /// The library failed the test (exit status 1): said in the front end's words
    /// ([`PerfError::render`]).
    Library(zcnet::Error),
    /// SIGINT or SIGTERM stopped the run (exit status 130).
    Interrupted,
}

impl PerfError {
    /// A failure with this text.
    pub fn failed(msg: impl Into<String>) -> PerfError {
        PerfError::Failed(msg.into())
    }

    /// The exit status for the process: 2 for usage, 130 for an interrupt, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            PerfError::Usage(_) => 2,
            PerfError::Failed(_) | PerfError::Library(_) => 1,
            PerfError::Interrupted => 130,
        }
    }

    /// The error in `voice`'s words, the front end's that runs perf (with perf's own `-l`:
    /// [`PerfVoice`]); `Display` is the library's words.
    pub fn render(&self, voice: &(dyn zcnet::Voice + Sync)) -> String {
        match self {
            PerfError::Library(e) => e.render(&PerfVoice::new(voice)),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for PerfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PerfError::Usage(m) | PerfError::Failed(m) => f.write_str(m),
            PerfError::Library(e) => std::fmt::Display::fmt(e, f),
            PerfError::Interrupted => f.write_str("interrupted by SIGINT/SIGTERM"),
        }
    }
}

impl std::error::Error for PerfError {}

impl From<ProtoError> for PerfError {
    fn from(e: ProtoError) -> PerfError {
        PerfError::Failed(e.to_string())
    }
}

impl From<zcnet::Error> for PerfError {
    fn from(e: zcnet::Error) -> PerfError {
        match e {
            zcnet::Error::Interrupted => PerfError::Interrupted,
            // Every way perf shows an error (its line, -J's "error") says it in the front
            // end's words: `render`.
            e => PerfError::Library(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_library_error_reaches_perf_in_the_commands_words() {
        let e = PerfError::from(zcnet::Error::invalid_input(zcnet::text!(
            zcnet::text::Field::TxBufSize,
            " is 0: give at least one",
        )));
        let text = e.render(&zcnet::text::Library);
        assert!(!text.contains("::"), "{text}");
        assert!(text.contains("-l is 0: give at least one"), "{text}");
        assert_eq!(e.exit_code(), 1);
        // Display is the library's words.
        assert!(e.to_string().contains("TxConfig::"), "{e}");
    }
}
