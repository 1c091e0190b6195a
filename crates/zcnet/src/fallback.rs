//! A mechanism that was tried and refused, and why: what `auto` reports for the sends
//! ([`crate::tx::Fallback`]) and the receives ([`crate::rx::Fallback`]) it did not use.

use crate::text::{Text, Words};
use std::fmt;

/// A mechanism `M` (a send or receive mode) that was tried and refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback<M> {
    /// What was tried.
    pub tried: M,
    /// The kernel's (or the machine's) reason, one line, with the fix where there is one, its
    /// terms typed (render it with a front end's [`Voice`](crate::Voice); `Display` is the
    /// library's words).
    pub reason: Text,
}

impl<M: fmt::Display> Fallback<M> {
    /// "MODE refused: REASON" in a front end's words (`Display` is the library's).
    pub fn render(&self, words: &dyn Words) -> String {
        format!("{} refused: {}", self.tried, self.reason.render(words))
    }
}

impl<M: fmt::Display> fmt::Display for Fallback<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} refused: {}", self.tried, self.reason)
    }
}
