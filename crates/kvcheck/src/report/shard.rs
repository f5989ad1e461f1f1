//! Deterministic partitions of a campaign across machines.

use std::fmt;
use std::str::FromStr;

/// One part of a partition in `count` parts: shard `index` (1-based, as
/// written on the command line, `K/N`) holds the items `i` with
/// `i % count == index - 1`.
///
/// Every item belongs to exactly one shard, and which one depends only on
/// the item's index, so `N` machines running shards `1/N..N/N` check the
/// same items as one machine running them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// 1-based index of this shard.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

/// Why a `K/N` shard could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// The text is not two numbers separated by `/`.
    #[error("shard {0:?} is not K/N (e.g. 2/8)")]
    Syntax(String),
    /// `N` is zero.
    #[error("shard {0:?} has zero shards; N must be at least 1")]
    NoShards(String),
    /// `K` is zero or larger than `N`.
    #[error("shard {text:?}: K must be between 1 and {count}")]
    OutOfRange {
        /// The text parsed.
        text: String,
        /// The number of shards it named.
        count: usize,
    },
}

impl Shard {
    /// The single shard holding everything (`1/1`).
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// Parses `K/N` with `1 ≤ K ≤ N`.
    pub fn parse(text: &str) -> Result<Shard, ShardError> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| ShardError::Syntax(text.to_string()))?;
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| ShardError::Syntax(text.to_string()))
        };
        let (index, count) = (number(k)?, number(n)?);
        if count == 0 {
            return Err(ShardError::NoShards(text.to_string()));
        }
        if index == 0 || index > count {
            return Err(ShardError::OutOfRange {
                text: text.to_string(),
                count,
            });
        }
        Ok(Shard { index, count })
    }

    /// Whether item `i` (0-based) belongs to this shard.
    pub fn contains(&self, i: usize) -> bool {
        i % self.count == self.index - 1
    }

    /// Whether this is the whole campaign (`1/1`).
    pub fn is_all(&self) -> bool {
        self.count == 1
    }
}

impl Default for Shard {
    fn default() -> Shard {
        Shard::ALL
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        Shard::parse(text)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_partitions() {
        let shards: Vec<Shard> = (1..=3)
            .map(|k| Shard::parse(&format!("{k}/3")).unwrap())
            .collect();
        for i in 0..30 {
            assert_eq!(shards.iter().filter(|s| s.contains(i)).count(), 1);
        }
        assert!(Shard::ALL.contains(7));
        assert_eq!(Shard::parse("2/8").unwrap().to_string(), "2/8");
    }

    #[test]
    fn bad_shards_are_typed_errors() {
        assert!(matches!(Shard::parse("0/0"), Err(ShardError::NoShards(_))));
        assert!(matches!(
            Shard::parse("3/2"),
            Err(ShardError::OutOfRange { count: 2, .. })
        ));
        assert!(matches!(
            Shard::parse("0/2"),
            Err(ShardError::OutOfRange { .. })
        ));
        for garbage in ["", "1", "a/b", "1/2/3", "-1/2"] {
            assert!(
                matches!(Shard::parse(garbage), Err(ShardError::Syntax(_))),
                "{garbage}"
            );
        }
    }
}
