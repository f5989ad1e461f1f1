//! Comparing one step: the outcome against the model's, a failure's kind,
//! the state after it (global end, capacity, resident bytes), the probe
//! after a refusal, and the layout of a segmented view.

use super::Lockstep;
use crate::check::divergence::{describe_outcome, misbehaviour, Divergence, DivergenceKind};
use crate::check::lockstep::check_segmented;
use crate::check::lockstep::SegmentedCheck;
use crate::check::lockstep::ViewFailure;
use crate::check::segments::check_claims;
use crate::subject::SubjectFailure;
use candle_core::Tensor;
use kvcache::Slot;
use kvmodel::{Effect, Op, Outcome, Variant, Write};

impl Lockstep {
    /// Completes a segmented view's check once its borrow of the cache has
    /// ended: aliasing claims against the layout, and the slot of each
    /// wrong row (for subjects that report their layout).
    pub(super) fn check_layout(&self, checked: SegmentedCheck) -> Option<ViewFailure> {
        let layout = self
            .cache
            .internals()
            .filter(|_| self.capabilities.internals)
            .map(|i| i.layout());
        match (checked, layout) {
            (Ok(_), None) => None,
            (Ok((claims, positions)), Some(layout)) => check_claims(&claims, &positions, &layout)
                .err()
                .map(|(kind, actual)| (kind, actual, Vec::new())),
            (Err((kind, actual, mut rows)), layout) => {
                if let Some(layout) = layout {
                    for row in &mut rows {
                        row.slot = layout.slots.iter().position(|s| {
                            *s == Slot::Hot(row.position) || *s == Slot::Cold(row.position)
                        });
                    }
                }
                Some((kind, actual, rows))
            }
        }
    }

    /// Compares a refusal or a non-write success; returns the model's effect
    /// when both succeeded.
    pub(super) fn compare_outcome(
        &self,
        index: usize,
        expected: &Outcome,
        actual: kvcache::Result<u64>,
    ) -> Result<Option<Effect>, Box<Divergence>> {
        let actual = match actual {
            Ok(g) => Ok(g),
            Err(kvcache::Error::Contract(e)) => Err(e),
            Err(other) if SubjectFailure::of(&other).is_some() => {
                let failure = SubjectFailure::of(&other).expect("checked");
                return self.compare_failure(index, expected, failure);
            }
            Err(other) => {
                return Err(self.divergence(
                    index,
                    DivergenceKind::Backend,
                    describe_outcome(expected),
                    format!("error outside the contract: {other}"),
                ))
            }
        };
        match (expected, actual) {
            (Outcome::Ok(effect), Ok(g)) => {
                if effect.global_end != g {
                    return Err(self.divergence(
                        index,
                        DivergenceKind::GlobalEnd,
                        describe_outcome(expected),
                        format!("ok G={g}"),
                    ));
                }
                Ok(Some(effect.clone()))
            }
            (Outcome::Err(kind), Err(e)) if e.kind() == *kind => Ok(None),
            (_, Ok(g)) => Err(self.divergence(
                index,
                DivergenceKind::Outcome,
                describe_outcome(expected),
                format!("ok G={g}"),
            )),
            (_, Err(e)) => Err(self.divergence(
                index,
                DivergenceKind::Outcome,
                describe_outcome(expected),
                format!("err {} ({e})", e.kind()),
            )),
        }
    }

    /// An external subject's answer other than `ok` against the model's
    /// outcome: refusals agree with refusals (kinds compared only with
    /// exact kinds), misbehaviour is a divergence of its own kind.
    pub(super) fn compare_failure(
        &self,
        index: usize,
        expected: &Outcome,
        failure: &SubjectFailure,
    ) -> Result<Option<Effect>, Box<Divergence>> {
        let exact = self.exact_kinds;
        let kind = match (failure, expected) {
            (SubjectFailure::Refused { kind, .. }, Outcome::Err(model)) => {
                if !exact || kind == model {
                    return Ok(None);
                }
                DivergenceKind::Outcome
            }
            (SubjectFailure::Exception { .. }, Outcome::Err(_)) => {
                if !exact {
                    return Ok(None);
                }
                DivergenceKind::Exception
            }
            (SubjectFailure::Refused { .. } | SubjectFailure::Exception { .. }, Outcome::Ok(_)) => {
                DivergenceKind::Outcome
            }
            // Callers take *outside* answers apart first (as
            // `kvcache::Error::Outside`); one that reaches here is judged
            // as under `--strict-domain`.
            (SubjectFailure::Outside { .. }, _) => DivergenceKind::Outside,
            (SubjectFailure::Adapter { .. }, _)
            | (SubjectFailure::Crash { .. }, _)
            | (SubjectFailure::Timeout { .. }, _)
            | (SubjectFailure::Protocol { .. }, _)
            | (SubjectFailure::Panicked { .. }, _) => {
                misbehaviour(failure).unwrap_or(DivergenceKind::Protocol)
            }
        };
        Err(self.divergence(index, kind, describe_outcome(expected), failure.to_string()))
    }

    /// Global end, capacity and resident bytes after every op (the last two
    /// only for subjects that report them, [`Capabilities::reported`]).
    ///
    /// [`Capabilities::reported`]: crate::subject::Capabilities::reported
    pub(super) fn check_state(&self, index: usize) -> Result<(), Box<Divergence>> {
        let (m, c) = (&self.model, self.cache.as_ref());
        if m.global_end() != c.global_end() {
            return Err(self.divergence(
                index,
                DivergenceKind::GlobalEnd,
                format!("global end {}", m.global_end()),
                format!("global end {}", c.global_end()),
            ));
        }
        // Only what the cache reports ([`KvCache::internals`]) and its
        // capabilities say is reported is compared.
        let Some(internals) = c.internals() else {
            return Ok(());
        };
        let reported = self.capabilities.reported();
        let checks = [
            (
                reported.capacity,
                DivergenceKind::Capacity,
                "capacity",
                m.capacity() as u64,
                internals.capacity() as u64,
            ),
            (
                reported.resident_bytes,
                DivergenceKind::ResidentBytes,
                "resident bytes",
                m.resident_bytes(),
                internals.resident_bytes(),
            ),
        ];
        for (compared, kind, what, expected, actual) in checks {
            if compared && expected != actual {
                return Err(self.divergence(
                    index,
                    kind,
                    format!("{what} {expected}"),
                    format!("{what} {actual}"),
                ));
            }
        }
        Ok(())
    }

    /// docs/contract.md §3: after a refused op the cache must be unchanged. Dense
    /// caches are probed with a zero-length write at the global end; the
    /// packed variant refuses that write, so it is probed with `view()`.
    pub(super) fn probe(&mut self, index: usize) -> Result<(), Box<Divergence>> {
        let config = self.model.config().clone();
        let all_heads = 0..config.heads;
        let visible = self.model.view(None);
        let effect = Effect {
            global_end: self.model.global_end(),
            visible: Some(visible),
            writers: None,
        };
        let empty = match Tensor::zeros(
            (config.batch, 0, config.heads, config.head_dim),
            kvcache::candle_dtype(config.dtype),
            &self.device,
        ) {
            Ok(t) => t,
            Err(e) => {
                return Err(self.divergence(
                    index,
                    DivergenceKind::Backend,
                    "a probe".into(),
                    format!("building the probe failed: {e}"),
                ))
            }
        };
        let ring = self.cache.ring().is_some();
        let probe = Write::new(self.model.global_end() as i64, 0);
        if config.variant == Variant::Dense && !self.admits(&Op::Write(probe)) {
            // A probe the subject is never asked: nothing to probe it with.
            return Ok(());
        }
        let viewed = match config.variant {
            Variant::Dense => self.cache.write_segments(&probe, &empty, &empty),
            Variant::Packed if self.capabilities.view => self.cache.view_segments(),
            // Nothing to probe a packed subject with.
            Variant::Packed => return Ok(()),
        };
        let values = self.capabilities.values;
        let failure = match viewed {
            Ok(view) => {
                let checked = check_segmented(
                    &self.model,
                    &self.ops,
                    &self.device,
                    &view,
                    &effect,
                    all_heads,
                    values,
                    ring,
                    self.value_check,
                );
                drop(view);
                self.check_layout(checked)
            }
            Err(kvcache::Error::Outside { reason }) => {
                let declared = self.capabilities.domain.is_some();
                if !(self.strict_domain || declared) {
                    // The subject is never asked for this probe.
                    return Ok(());
                }
                let kind = if self.strict_domain {
                    DivergenceKind::Outside
                } else {
                    DivergenceKind::Domain
                };
                let expected = "an answer to the read-only probe".to_string();
                let actual = format!("outside its domain ({reason})");
                return Err(self.divergence(index, kind, expected, actual));
            }
            Err(e) if SubjectFailure::of(&e).is_some_and(SubjectFailure::is_misbehaviour) => {
                let failure = SubjectFailure::of(&e).expect("checked");
                return self
                    .compare_failure(index, &Outcome::Ok(effect), failure)
                    .map(|_| ());
            }
            Err(e) => Some((
                DivergenceKind::Probe,
                format!("the read-only probe failed: {e}"),
                Vec::new(),
            )),
        };
        match failure {
            None => Ok(()),
            Some((_, actual, rows)) => {
                let expected = format!(
                    "unchanged after the refusal: {}",
                    describe_outcome(&Outcome::Ok(effect))
                );
                let mut d = self.divergence(
                    index,
                    DivergenceKind::Probe,
                    expected,
                    format!("probe shows {actual}"),
                );
                d.rows = rows;
                Err(d)
            }
        }
    }

    pub(super) fn divergence(
        &self,
        index: usize,
        kind: DivergenceKind,
        expected: String,
        actual: String,
    ) -> Box<Divergence> {
        Box::new(Divergence {
            step: index,
            op: self.ops[index],
            kind,
            expected,
            actual,
            rows: Vec::new(),
            trace: self.trace(),
            subject: self.subject.clone(),
            saved: None,
            reproduce: None,
        })
    }
}
