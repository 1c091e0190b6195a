//! Why a case failed, was refused or skipped, kept as data ([`Reason`]): the tools' own words,
//! with the library's errors and terms typed inside them. The tools return reasons; a front end
//! says them in its own words ([`Reason::render`] with its [`Voice`]: the `zcnet` command's
//! flags and commands), so that no tool holds a command line's wording. `Display` is the
//! library's words.

use std::fmt;
use std::sync::Arc;
use zcnet::text::{Library, Text};
use zcnet::{Error, Voice};

/// Words, typed terms and library errors, in order: what a report says about a failure.
#[derive(Debug, Clone, Default)]
pub struct Reason(Vec<Piece>);

#[derive(Debug, Clone)]
enum Piece {
    /// Words, their terms typed.
    Words(Text),
    /// A library error, its terms and remedies for the front end to word (shared: reports are
    /// cloned, errors are not).
    Error(Arc<Error>),
}

impl Reason {
    /// The reason in `voice`: its terms, and its errors' terms and remedies, in the front end's
    /// words.
    pub fn render(&self, voice: &dyn Voice) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Words(t) => t.render(voice),
                Piece::Error(e) => e.render(voice),
            })
            .collect()
    }

    /// `parts`, `sep` between them.
    pub fn join(parts: impl IntoIterator<Item = Reason>, sep: &'static str) -> Reason {
        let mut out = Reason::default();
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                out = out + sep;
            }
            out = out + p;
        }
        out
    }

    /// The first library error it carries, if any.
    pub fn error(&self) -> Option<&Error> {
        self.0.iter().find_map(|p| match p {
            Piece::Error(e) => Some(&**e),
            Piece::Words(_) => None,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Library))
    }
}

impl From<Error> for Reason {
    fn from(e: Error) -> Reason {
        Reason(vec![Piece::Error(Arc::new(e))])
    }
}

impl From<Text> for Reason {
    fn from(t: Text) -> Reason {
        Reason(vec![Piece::Words(t)])
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Reason {
        Text::from(s).into()
    }
}

impl From<&'static str> for Reason {
    fn from(s: &'static str) -> Reason {
        Text::from(s).into()
    }
}

impl<T: Into<Reason>> std::ops::Add<T> for Reason {
    type Output = Reason;

    fn add(mut self, other: T) -> Reason {
        self.0.extend(other.into().0);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet::text::{Field, Term, Words};

    /// A voice that says every setting as `<flag>` and words one remedy its own way.
    struct Angle;

    impl Words for Angle {
        fn term(&self, t: &Term) -> String {
            match t {
                Term::Field(_) => "<flag>".into(),
                other => Library.term(other),
            }
        }
    }

    impl Voice for Angle {}

    #[zcnet_testkit::test]
    fn a_reason_is_said_in_the_voice_it_is_rendered_with() {
        let e = Error::invalid_input(zcnet::text!(Field::RxQueue, " 7: lo has 1 RX queue(s)"));
        let r = Reason::from("first: ") + e + "; " + Text::from(Field::TxBufSize);
        assert_eq!(
            r.render(&Angle),
            "first: <flag> 7: lo has 1 RX queue(s); <flag>"
        );
        assert_eq!(
            r.to_string(),
            "first: RxConfig::queue 7: lo has 1 RX queue(s); TxConfig::buf_size"
        );
        assert!(r.error().is_some_and(Error::is_bad_argument));
        let j = Reason::join([Reason::from("a"), Reason::from("b".to_string())], "; ");
        assert_eq!(j.to_string(), "a; b");
        assert!(Reason::join([], "; ").to_string().is_empty());
    }
}
