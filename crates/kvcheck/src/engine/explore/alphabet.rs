//! The op alphabet: for one state, a finite set of ops that is complete for
//! small numbers (every start, length, head range, window and count near the
//! state's global end and capacity, plus one invalid value of each kind).

use kvmodel::{Config, Model, Op};

use crate::subject::Capabilities;

/// An alphabet name that is neither `full` nor `small`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown alphabet {text:?}: expected full or small")]
pub struct UnknownAlphabet {
    /// The text parsed.
    pub text: String,
}

/// Which ops the explorer tries from each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Alphabet {
    /// The full product: writes at every start in `[0, G+1]`, every length
    /// in `[0, C+1]`, with every head option (all heads, each valid range,
    /// one invalid range) and every recent window (none, 0, 1, C, −1).
    #[default]
    Full,
    /// The full product without head ranges and recent windows, which are
    /// only tried on appends (`start = G`); reaches deeper in the same time.
    Small,
}

impl Alphabet {
    /// Parses `full` or `small`; anything else is an [`UnknownAlphabet`]
    /// quoting the text.
    pub fn parse(text: &str) -> Result<Alphabet, UnknownAlphabet> {
        match text {
            "full" => Ok(Alphabet::Full),
            "small" => Ok(Alphabet::Small),
            _ => Err(UnknownAlphabet {
                text: text.to_string(),
            }),
        }
    }

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Alphabet::Full => "full",
            Alphabet::Small => "small",
        }
    }

    /// The ops to try from `model`'s state, in a fixed order (so BFS, and
    /// therefore the counterexample it reports, is deterministic).
    ///
    /// - writes: starts `0..=G+1`, lengths `0..=C+1`, head options and
    ///   recent windows as the variant says; plus `write -1+1`
    ///   (`invalid_argument`);
    /// - rewinds to `0..=G+1`;
    /// - evicts of `0..=evictable+1`;
    /// - pins of `0..=G+1`;
    /// - reset.
    pub fn ops(self, model: &Model) -> Vec<Op> {
        let config = model.config();
        let g = model.global_end() as i64;
        let c = model.capacity() as i64;
        let heads = head_options(config);
        let windows = [None, Some(0), Some(1), Some(c), Some(-1)];
        let mut ops = Vec::new();
        for start in 0..=g + 1 {
            for len in 0..=c + 1 {
                let rich = match self {
                    Alphabet::Full => true,
                    Alphabet::Small => start == g && len >= 1,
                };
                if rich {
                    for &h in &heads {
                        for &r in &windows {
                            ops.push(Op::write(start, len, h, r));
                        }
                    }
                } else {
                    ops.push(Op::write(start, len, None, None));
                }
            }
        }
        ops.push(Op::write(-1, 1, None, None));
        ops.extend((0..=g + 1).map(|to| Op::Rewind { to }));
        let evictable = model.evictable().len() as i64;
        ops.extend((0..=evictable + 1).map(|tokens| Op::Evict { tokens }));
        ops.extend((0..=g + 1).map(|tokens| Op::Pin { tokens }));
        ops.push(Op::Reset);
        ops
    }
}

impl Alphabet {
    /// [`Alphabet::ops`] without the ops `capabilities` cannot express
    /// (op kinds, head ranges, recent windows the subject lacks).
    pub fn ops_for(self, model: &Model, capabilities: &Capabilities) -> Vec<Op> {
        let mut ops = self.ops(model);
        ops.retain(|op| capabilities.supports_op(op).is_ok());
        ops
    }
}

impl std::str::FromStr for Alphabet {
    type Err = UnknownAlphabet;

    fn from_str(text: &str) -> Result<Alphabet, UnknownAlphabet> {
        Alphabet::parse(text)
    }
}

/// All heads, every valid `[first, count]`, and one invalid range.
fn head_options(config: &Config) -> Vec<Option<[i64; 2]>> {
    let h = config.heads as i64;
    let mut options = vec![None];
    for first in 0..h {
        for count in 1..=h - first {
            options.push(Some([first, count]));
        }
    }
    options.push(Some([0, h + 1]));
    options
}
