//! What a subject can express: the variants, dtypes, ops and features it
//! implements, and what its responses carry.
//!
//! Every engine asks the subject's [`Capabilities`] before it generates
//! anything: strategies and the explorer alphabet leave out what the
//! subject lacks, the fuzz decoder and the minimizer reject it, and a
//! replayed trace that needs more is reported as [`Unsupported`] (a skip
//! with its reason, never a divergence). The shipped caches and the
//! reference cache's faults have [`Capabilities::full`]; the reference
//! cache itself adds trimming after the read ([`Trim::AfterRead`]).

use kvmodel::{Config, Dtype, Op, Quant, Trim, Variant};
use serde::{Deserialize, Serialize};

use crate::subject::domain::Domain;

/// The kinds of op of docs/contract.md §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `write` (required of every subject).
    Write,
    /// `rewind`.
    Rewind,
    /// `evict`.
    Evict,
    /// `pin`.
    Pin,
    /// `reset`.
    Reset,
}

impl OpKind {
    /// Every op kind.
    pub const ALL: [OpKind; 5] = [
        OpKind::Write,
        OpKind::Rewind,
        OpKind::Evict,
        OpKind::Pin,
        OpKind::Reset,
    ];

    /// The kind of `op`.
    pub fn of(op: &Op) -> OpKind {
        match op {
            Op::Write(_) => OpKind::Write,
            Op::Rewind { .. } => OpKind::Rewind,
            Op::Evict { .. } => OpKind::Evict,
            Op::Pin { .. } => OpKind::Pin,
            Op::Reset => OpKind::Reset,
        }
    }
}

/// Optional parts of the contract a subject may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// Configs with `growth: true`.
    Growth,
    /// Writes with a head range (`heads`).
    HeadRanges,
    /// Writes with a recent window (`recent_window`).
    RecentWindow,
    /// Configs with `window < capacity`.
    Window,
    /// Configs with `global_sink > 0`.
    GlobalSink,
    /// Packed configs whose `quant` is not `none`.
    Quant,
}

impl Feature {
    /// Every feature.
    pub const ALL: [Feature; 6] = [
        Feature::Growth,
        Feature::HeadRanges,
        Feature::RecentWindow,
        Feature::Window,
        Feature::GlobalSink,
        Feature::Quant,
    ];
}

/// A trace, config or op that needs a capability the subject lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsupported by the subject: {what}")]
pub struct Unsupported {
    /// What is missing, in words (`op evict`, `dtype bf16`, …).
    pub what: String,
}

fn unsupported(what: String) -> Result<(), Unsupported> {
    Err(Unsupported { what })
}

/// The state a subject without [`internals`](Capabilities::internals)
/// still reports, to be compared with the model after every op as for
/// in-process caches: capacity (docs/contract.md §3 step 7 growth) and
/// resident bytes (§6, §7). An `exec:` subject declares it in its `hello`
/// capabilities as `reports` (docs/subject-protocol.md) and sends it in
/// every `ok` response to an op or a view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reports {
    /// The current capacity is reported.
    pub capacity: bool,
    /// The resident bytes are reported.
    pub resident_bytes: bool,
}

/// What a subject can express (see the module docs). Compared outcomes
/// depend on it too: without [`values`](Capabilities::values) only the
/// outcome, the global end and the visible positions are compared; without
/// [`internals`](Capabilities::internals) capacity and resident bytes are
/// compared only where [`reports`](Capabilities::reports) names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Config variants it can open.
    pub variants: Vec<Variant>,
    /// Config dtypes it can open.
    pub dtypes: Vec<Dtype>,
    /// Op kinds it implements; `write` is always among them.
    pub ops: Vec<OpKind>,
    /// Optional features it implements.
    pub features: Vec<Feature>,
    /// Whether views carry K/V values (compared bit for bit).
    pub values: bool,
    /// Whether it answers the read-only `view` probe (the packed variant is
    /// probed with it after every refusal; without it that probe is skipped).
    pub view: bool,
    /// Whether capacity, resident bytes and the storage layout are reported
    /// ([`kvcache::KvCache::capacity`], `resident_bytes`, `layout`): true for
    /// in-process caches, false for an external process.
    pub internals: bool,
    /// What a subject without internals reports anyway (an external
    /// process's declared `reports`); with internals both are reported
    /// whatever it says (see [`Capabilities::reported`]). Empty in
    /// [`Capabilities::full`], whose internals report both.
    pub reports: Reports,
    /// The requests it can be asked ([`Domain`]), when it declares them:
    /// engines draw only inside, and an *outside* answer to a request
    /// inside is a domain violation. `None`: it declares nothing and is
    /// asked everything, and an *outside* answer cuts the case.
    pub domain: Option<Domain>,
    /// The trim modes (docs/contract.md §3, trim modes) it opens: engines
    /// draw configs of these modes only. [`Capabilities::full`] has
    /// `before_read` alone, so a subject that says nothing is never given
    /// an `after_read` config; a cache that trims after the read
    /// (StreamingLLM, Hugging Face `SinkCache`) declares `after_read`,
    /// alone or beside `before_read`.
    pub trims: Vec<Trim>,
}

impl Capabilities {
    /// Everything of the contract's default trim mode: the shipped caches
    /// and the reference cache's faults. Trimming after the read is an
    /// alternative contract, not a feature on top of this one, so it is
    /// declared explicitly ([`Capabilities::trims`]).
    pub fn full() -> Capabilities {
        Capabilities {
            variants: vec![Variant::Dense, Variant::Packed],
            dtypes: vec![Dtype::F32, Dtype::F16, Dtype::Bf16],
            ops: OpKind::ALL.to_vec(),
            features: Feature::ALL.to_vec(),
            values: true,
            view: true,
            internals: true,
            reports: Reports::default(),
            domain: None,
            trims: vec![Trim::BeforeRead],
        }
    }

    /// [`Capabilities::full`] opening both trim modes: the reference cache
    /// (`reference`), which implements either.
    pub fn full_with_after_read() -> Capabilities {
        Capabilities {
            trims: Trim::ALL.to_vec(),
            ..Capabilities::full()
        }
    }

    /// Whether the subject opens configs of `trim`.
    pub fn opens_trim(&self, trim: Trim) -> bool {
        self.trims.contains(&trim)
    }

    /// What is compared besides the outcome, the global end and the view:
    /// capacity and resident bytes for a subject with internals, else those
    /// it [`reports`](Capabilities::reports).
    pub fn reported(&self) -> Reports {
        if self.internals {
            Reports {
                capacity: true,
                resident_bytes: true,
            }
        } else {
            self.reports
        }
    }

    /// What both `self` and `other` can express: the cases two subjects
    /// can both run (a differential oracle's draws).
    pub fn shared_with(&self, other: &Capabilities) -> Capabilities {
        fn both<T: PartialEq + Copy>(a: &[T], b: &[T]) -> Vec<T> {
            a.iter().copied().filter(|x| b.contains(x)).collect()
        }
        Capabilities {
            variants: both(&self.variants, &other.variants),
            dtypes: both(&self.dtypes, &other.dtypes),
            ops: both(&self.ops, &other.ops),
            features: both(&self.features, &other.features),
            values: self.values && other.values,
            view: self.view && other.view,
            internals: self.internals && other.internals,
            reports: Reports {
                capacity: self.reports.capacity && other.reports.capacity,
                resident_bytes: self.reports.resident_bytes && other.reports.resident_bytes,
            },
            domain: match (&self.domain, &other.domain) {
                (Some(a), Some(b)) => Some(a.intersect(b)),
                (a, b) => a.clone().or_else(|| b.clone()),
            },
            trims: both(&self.trims, &other.trims),
        }
    }

    /// Whether the op kind is implemented.
    pub fn has_op(&self, kind: OpKind) -> bool {
        kind == OpKind::Write || self.ops.contains(&kind)
    }

    /// Whether the feature is implemented.
    pub fn has(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }

    /// Whether these are exactly [`Capabilities::full`].
    pub fn is_full(&self) -> bool {
        *self == Capabilities::full()
    }

    /// `Ok` when the subject can open `config`: its variant, dtype, trim
    /// mode and features, and a configuration its declared domain opens
    /// ([`Domain::opens`]), so that no engine draws one it would cut.
    pub fn supports_config(&self, config: &Config) -> Result<(), Unsupported> {
        let variant = match config.variant {
            Variant::Dense => "dense",
            Variant::Packed => "packed",
        };
        if !self.variants.contains(&config.variant) {
            return unsupported(format!("variant {variant}"));
        }
        if !self.dtypes.contains(&config.dtype) {
            return unsupported(format!("dtype {}", config.dtype.name()));
        }
        if !self.opens_trim(config.trim) {
            return unsupported(format!("config with trim {}", config.trim.name()));
        }
        let needs = [
            (config.growth, Feature::Growth, "growth: true"),
            (
                config.effective_window() < config.capacity,
                Feature::Window,
                "window below capacity",
            ),
            (
                config.global_sink > 0,
                Feature::GlobalSink,
                "global_sink > 0",
            ),
            (
                config.variant == Variant::Packed && config.packed_policy().quant != Quant::None,
                Feature::Quant,
                "quantized packed chunks",
            ),
        ];
        for (needed, feature, what) in needs {
            if needed && !self.has(feature) {
                return unsupported(format!("config with {what}"));
            }
        }
        if let Some(why) = self.domain.as_ref().and_then(|d| d.opens(config).err()) {
            return unsupported(format!("config outside the declared domain: {why}"));
        }
        Ok(())
    }

    /// `Ok` when the subject can receive `op`.
    pub fn supports_op(&self, op: &Op) -> Result<(), Unsupported> {
        let kind = OpKind::of(op);
        if !self.has_op(kind) {
            return unsupported(format!("op {}", op.name()));
        }
        if let Op::Write(w) = op {
            if w.heads.is_some() && !self.has(Feature::HeadRanges) {
                return unsupported(format!("write with a head range ({op})"));
            }
            if w.recent_window.is_some() && !self.has(Feature::RecentWindow) {
                return unsupported(format!("write with a recent window ({op})"));
            }
        }
        Ok(())
    }

    /// `Ok` when the subject can run `ops` on `config`; otherwise the first
    /// thing it lacks.
    pub fn supports_trace(&self, config: &Config, ops: &[Op]) -> Result<(), Unsupported> {
        self.supports_config(config)?;
        ops.iter().try_for_each(|op| self.supports_op(op))
    }

    /// Whether a labelled coverage event (see [`crate::check::coverage::EVENTS`])
    /// can happen on this subject: events that need a missing op or feature
    /// cannot, so suites do not require them.
    pub fn allows_event(&self, event: &str) -> bool {
        let op = |kind| self.has_op(kind);
        if self.domain.as_ref().is_some_and(|d| !d.allows_event(event)) {
            return false;
        }
        // A cache that only grows drops rows on an `evict` alone (§3 step 7).
        let grows_only = self
            .domain
            .as_ref()
            .is_some_and(|d| d.configs.growth == Some(true));
        let evicting = [
            "eviction",
            "eviction_beside_sink",
            "pin_during_eviction",
            "partly_evicted_chunk",
            "rewind_into_evicted",
            "error:evicted",
        ];
        if grows_only && evicting.contains(&event) && !op(OpKind::Evict) {
            return false;
        }
        match event {
            "pin" | "unpin" | "pin_during_eviction" | "error:pin_range" => op(OpKind::Pin),
            "rewind_into_evicted" | "error:rewind_ahead" => op(OpKind::Rewind),
            "error:evict_too_many" => op(OpKind::Evict),
            "reset" => op(OpKind::Reset),
            "growth" => self.has(Feature::Growth),
            "head_range_write" | "error:head_range" => self.has(Feature::HeadRanges),
            "recent_window" | "error:negative_window" => self.has(Feature::RecentWindow),
            "window_hides_resident" => self.has(Feature::Window),
            // Trimming after the read never refuses a chunk for room or
            // window (docs/contract.md §3, trim modes): only a subject
            // that opens the default mode can reach these.
            "error:window_too_small" => {
                (self.has(Feature::Window) || self.has(Feature::RecentWindow))
                    && self.opens_trim(Trim::BeforeRead)
            }
            "error:chunk_too_large" => self.opens_trim(Trim::BeforeRead),
            _ => true,
        }
    }
}

impl Default for Capabilities {
    /// [`Capabilities::full`].
    fn default() -> Capabilities {
        Capabilities::full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvmodel::Write;

    fn dense_f32_writes_only() -> Capabilities {
        Capabilities {
            variants: vec![Variant::Dense],
            dtypes: vec![Dtype::F32],
            ops: vec![OpKind::Write],
            features: vec![],
            values: false,
            view: false,
            internals: false,
            reports: Reports::default(),
            domain: None,
            trims: vec![Trim::BeforeRead],
        }
    }

    #[test]
    fn internals_report_everything_and_reports_add_to_nothing_else() {
        assert_eq!(
            Capabilities::full().reported(),
            Reports {
                capacity: true,
                resident_bytes: true
            }
        );
        assert_eq!(dense_f32_writes_only().reported(), Reports::default());
        let capacity = Reports {
            capacity: true,
            resident_bytes: false,
        };
        let external = Capabilities {
            reports: capacity,
            ..dense_f32_writes_only()
        };
        assert_eq!(external.reported(), capacity);
    }

    #[test]
    fn full_supports_everything() {
        let full = Capabilities::full();
        let mut config = Config::packed(4);
        config.dtype = Dtype::Bf16;
        config.window = Some(3);
        assert!(full.supports_config(&config).is_ok());
        assert!(full.supports_op(&Op::Pin { tokens: 1 }).is_ok());
        assert!(full.allows_event("pin"));
    }

    #[test]
    fn missing_capabilities_are_named() {
        let caps = dense_f32_writes_only();
        let err = caps.supports_config(&Config::packed(4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported by the subject: variant packed"
        );
        let mut config = Config::dense(4);
        config.dtype = Dtype::F16;
        assert_eq!(caps.supports_config(&config).unwrap_err().what, "dtype f16");
        config.dtype = Dtype::F32;
        config.sink = 1;
        config.window = Some(3);
        assert!(caps
            .supports_config(&config)
            .unwrap_err()
            .what
            .contains("window below capacity"));
        assert_eq!(
            caps.supports_op(&Op::Evict { tokens: 1 }).unwrap_err().what,
            "op evict"
        );
        let ranged = Op::write(0, 1, Some([0, 1]), None);
        assert!(caps
            .supports_op(&ranged)
            .unwrap_err()
            .what
            .contains("head range"));
        let recent = Op::write(0, 1, None, Some(1));
        assert!(caps
            .supports_op(&recent)
            .unwrap_err()
            .what
            .contains("recent window"));
        assert!(caps.supports_op(&Op::Write(Write::new(0, 1))).is_ok());
        let after_read = Config {
            trim: Trim::AfterRead,
            ..Config::dense(4)
        };
        assert_eq!(
            caps.supports_config(&after_read).unwrap_err().what,
            "config with trim after_read"
        );
        assert_eq!(
            Capabilities::full()
                .supports_config(&after_read)
                .unwrap_err()
                .what,
            "config with trim after_read"
        );
        let both = Capabilities::full_with_after_read();
        assert!(both.supports_config(&after_read).is_ok());
        assert!(both.supports_config(&Config::dense(4)).is_ok());
        let only_after = Capabilities {
            trims: vec![Trim::AfterRead],
            ..Capabilities::full()
        };
        assert!(only_after.supports_config(&Config::dense(4)).is_err());
        assert_eq!(
            both.shared_with(&Capabilities::full()).trims,
            vec![Trim::BeforeRead]
        );
        assert!(!caps.allows_event("error:evict_too_many"));
        assert!(caps.allows_event("append"));
    }
}
