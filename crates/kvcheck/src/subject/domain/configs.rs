//! Which configurations a domain opens ([`ConfigLimits`], [`Domain::opens`]).

use kvmodel::Config;
use serde::{Deserialize, Serialize};

use super::{Chunks, Domain};

/// Which configurations a subject opens: each limit left out admits every
/// value. Besides these, a domain whose chunks never fit beside the sink
/// (`oversized: false` with no declared length at most `C − S`) opens no
/// configuration with that little room, since it admits no write there
/// ([`Domain::opens`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigLimits {
    /// The least room beside the sink, `C − S`: a pipeline whose chunk
    /// is fixed opens no cache too small for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_room: Option<u64>,
    /// The least window beside the sink, `W − S` (`W = C` without a
    /// window): a chunk wider than it is never read whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_window: Option<u64>,
    /// The batch sizes it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<Vec<usize>>,
    /// The head counts it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads: Option<Vec<usize>>,
    /// The head dimensions it opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<Vec<usize>>,
    /// The most sink tokens `S` (0: a cache with no sink, which evicts
    /// from position 0 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sink: Option<usize>,
    /// `true`: only configurations that grow (a cache that never drops a
    /// row, growing where another would evict); `false`: none that do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<bool>,
}

impl ConfigLimits {
    /// What both limits admit: the larger least value, the common listed values.
    pub(super) fn intersect(&self, other: &ConfigLimits) -> ConfigLimits {
        fn most(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            a.max(b)
        }
        fn common(a: &Option<Vec<usize>>, b: &Option<Vec<usize>>) -> Option<Vec<usize>> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.iter().copied().filter(|x| b.contains(x)).collect()),
                (a, b) => a.clone().or_else(|| b.clone()),
            }
        }
        let growth = match (self.growth, other.growth) {
            (Some(a), Some(b)) if a != b => {
                // Nothing opens both: a limit no configuration meets.
                return ConfigLimits {
                    batch: Some(Vec::new()),
                    ..self.clone()
                };
            }
            (a, b) => a.or(b),
        };
        ConfigLimits {
            max_sink: match (self.max_sink, other.max_sink) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            growth,
            min_room: most(self.min_room, other.min_room),
            min_window: most(self.min_window, other.min_window),
            batch: common(&self.batch, &other.batch),
            heads: common(&self.heads, &other.heads),
            head_dim: common(&self.head_dim, &other.head_dim),
        }
    }
}

/// Why a domain opens no cache of a configuration: the declaration it
/// breaks, as the JSON a subject declares.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unopened {
    /// Too little room beside the sink.
    #[error("C − S = {room}, below \"configs\": {{\"min_room\": {least}}}")]
    Room {
        /// `C − S`.
        room: u64,
        /// The declared least.
        least: u64,
    },
    /// Too narrow a window beside the sink.
    #[error("W − S = {window}, below \"configs\": {{\"min_window\": {least}}}")]
    Window {
        /// `W − S`.
        window: u64,
        /// The declared least.
        least: u64,
    },
    /// A batch, head count or head dimension not listed.
    #[error("{field} {value}, not in \"configs\": {{\"{field}\": {allowed:?}}}")]
    NotListed {
        /// `batch`, `heads` or `head_dim`.
        field: &'static str,
        /// The configuration's value.
        value: usize,
        /// The values listed.
        allowed: Vec<usize>,
    },
    /// More sink tokens than declared.
    #[error("S = {sink}, above \"configs\": {{\"max_sink\": {most}}}")]
    Sink {
        /// The configuration's sink.
        sink: usize,
        /// The declared most.
        most: usize,
    },
    /// Growth where none is opened, or none where only growth is.
    #[error("growth: {growth}, against \"configs\": {{\"growth\": {declared}}}")]
    Growth {
        /// The configuration's growth.
        growth: bool,
        /// The declared growth.
        declared: bool,
    },
    /// No declared chunk fits beside the sink and oversized ones are left out.
    #[error("C − S = {room} holds no declared chunk (\"oversized\": false)")]
    NoChunkFits {
        /// `C − S`.
        room: u64,
    },
}

impl Domain {
    /// `Ok` when this domain opens `config`: its [`ConfigLimits`], and
    /// room beside the sink for some declared chunk where writes longer
    /// than that room are left out (otherwise no write of the config would
    /// be admitted); else why not, in words.
    pub fn opens(&self, config: &Config) -> Result<(), Unopened> {
        let mode = self.in_mode(config.trim);
        if !std::ptr::eq(mode, self) {
            return mode.opens(config);
        }
        let room = config.capacity.saturating_sub(config.sink) as u64;
        let window = config.effective_window().saturating_sub(config.sink) as u64;
        let limits = &self.configs;
        if let Some(least) = limits.min_room.filter(|&least| room < least) {
            return Err(Unopened::Room { room, least });
        }
        if let Some(least) = limits.min_window.filter(|&least| window < least) {
            return Err(Unopened::Window { window, least });
        }
        if let Some(most) = limits.max_sink.filter(|&most| config.sink > most) {
            return Err(Unopened::Sink {
                sink: config.sink,
                most,
            });
        }
        if let Some(declared) = limits.growth.filter(|&g| g != config.growth) {
            return Err(Unopened::Growth {
                growth: config.growth,
                declared,
            });
        }
        let listed = [
            ("batch", &limits.batch, config.batch),
            ("heads", &limits.heads, config.heads),
            ("head_dim", &limits.head_dim, config.head_dim),
        ];
        for (field, allowed, value) in listed {
            if let Some(allowed) = allowed.as_ref().filter(|a| !a.contains(&value)) {
                return Err(Unopened::NotListed {
                    field,
                    value,
                    allowed: allowed.clone(),
                });
            }
        }
        if !self.oversized {
            let fits = match &self.chunks {
                Chunks::Any => room >= 1,
                Chunks::Lengths(lengths) => lengths.iter().any(|&n| n <= room),
                Chunks::Multiple(k) => *k <= room,
            };
            if !fits {
                return Err(Unopened::NoChunkFits { room });
            }
        }
        Ok(())
    }
}
