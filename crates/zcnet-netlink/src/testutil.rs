//! Test helper: loads captured exchanges (`tests/captured/*.hex`) and replays them through
//! the reply collector.

use crate::conn::{Op, Reply, ReplyCollector};
use crate::error::Result;
use crate::wire::NlMsgHdr;

/// One captured exchange: the request sent and the datagrams received.
pub(crate) struct Capture {
    pub request: Vec<u8>,
    pub datagrams: Vec<Vec<u8>>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex digit"))
        .collect()
}

impl Capture {
    pub fn load(name: &str) -> Capture {
        let path = format!("{}/tests/captured/{name}.hex", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut request = Vec::new();
        let mut datagrams = Vec::new();
        for line in text.lines() {
            if let Some(h) = line.strip_prefix("> ") {
                request = unhex(h.trim());
            } else if let Some(h) = line.strip_prefix("< ") {
                datagrams.push(unhex(h.trim()));
            }
        }
        Capture { request, datagrams }
    }

    pub fn header(&self) -> NlMsgHdr {
        NlMsgHdr::parse(&self.request).expect("request header")
    }

    /// Replays the datagrams; `Ok` holds the data messages.
    pub fn replay(&self, op: Op, target: &str) -> Result<Vec<Reply>> {
        let h = self.header();
        let dump = h.flags & crate::wire::NLM_F_DUMP == crate::wire::NLM_F_DUMP;
        let mut c = ReplyCollector::new(op, target, &self.request, h.seq, h.kind, dump);
        for d in &self.datagrams {
            if c.feed(d)? {
                return Ok(c.into_replies());
            }
        }
        panic!("capture ended before the exchange did");
    }
}
