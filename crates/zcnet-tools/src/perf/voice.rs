//! `zcnet perf`'s voice ([`PerfVoice`]): the words of the front end that runs it (the `zcnet`
//! command's flags and commands, handed to [`super::run()`]), but for the size of a send,
//! which is iperf3's `-l` here.

use zcnet::text::{Field, Term, Words};
use zcnet::{Remedy, Voice};

/// The voice `zcnet perf` says the library's errors in: `base`'s (the front end's), with
/// iperf3's `-l` for the size of a send.
#[derive(Clone, Copy)]
pub struct PerfVoice<'a> {
    base: &'a (dyn Voice + Sync),
}

impl std::fmt::Debug for PerfVoice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerfVoice")
    }
}

impl<'a> PerfVoice<'a> {
    /// The front end's voice with perf's own flag.
    pub fn new(base: &'a (dyn Voice + Sync)) -> PerfVoice<'a> {
        PerfVoice { base }
    }
}

impl Words for PerfVoice<'_> {
    fn term(&self, t: &Term) -> String {
        match t {
            Term::Field(Field::TxBufSize) => "-l".to_string(),
            other => self.base.term(other),
        }
    }
}

impl Voice for PerfVoice<'_> {
    fn remedy(&self, r: &Remedy) -> Option<String> {
        match r {
            Remedy::FewerSends => Some("use a smaller -l".to_string()),
            other => self.base.remedy(other),
        }
    }
}
