//! The checks of [`PrefixInvariants`]: the requests' own refusals (§15,
//! in the contract's order), what a refusal or an effect must keep, the
//! hit bounds and the probe of every running request.

use kvmodel::prefix::{BlockCounts, PrefixEffect, PrefixErrorKind, PrefixOp, Token};

use super::{check_rows, Invariant, PrefixInvariants, Shadow};
use crate::subject::prefix::{PrefixFailure, PrefixSubjectCache};

type Broken = (Invariant, String, String);

fn blocks_for(tokens: usize, b: usize) -> usize {
    tokens.div_ceil(b)
}

impl<C: PrefixSubjectCache> PrefixInvariants<C> {
    /// The refusal the contract makes of `op` on the requests alone, in
    /// §15's order: every kind but `no_room` (the cache's room) and, for
    /// `evict`, judged on the cached count before the op.
    pub(super) fn refusal(&self, op: &PrefixOp, before: BlockCounts) -> Option<PrefixErrorKind> {
        use PrefixErrorKind as K;
        let live = |r| match self.requests.get(r) {
            None => Err(K::UnknownRequest),
            Some(s) if s.preempted => Err(K::Preempted),
            Some(s) => Ok(s),
        };
        let result = match op {
            PrefixOp::Start { request, tokens } => {
                if self.requests.contains_key(request) {
                    Err(K::DuplicateRequest)
                } else if tokens.is_empty() {
                    Err(K::EmptyPrompt)
                } else {
                    Ok(())
                }
            }
            PrefixOp::Compute { request, count } | PrefixOp::Rollback { request, count } => {
                let too_far = match op {
                    PrefixOp::Compute { .. } => K::ComputePastEnd,
                    _ => K::RollbackTooFar,
                };
                if *count < 0 {
                    Err(K::InvalidArgument)
                } else {
                    live(request).and_then(|s| {
                        let room = match op {
                            PrefixOp::Compute { .. } => s.tokens.len() - s.computed,
                            _ => s.tokens.len(),
                        };
                        if *count as u64 > room as u64 {
                            Err(too_far)
                        } else {
                            Ok(())
                        }
                    })
                }
            }
            PrefixOp::Extend { request, .. } | PrefixOp::Read { request } => {
                live(request).map(|_| ())
            }
            PrefixOp::Preempt { request } => live(request).map(|_| ()),
            PrefixOp::Fork { request, into } => live(request).and_then(|s| {
                if self.requests.contains_key(into) {
                    Err(K::DuplicateRequest)
                } else if s.computed < s.tokens.len() {
                    Err(K::NotComputed)
                } else {
                    Ok(())
                }
            }),
            PrefixOp::Finish { request } => match self.requests.contains_key(request) {
                true => Ok(()),
                false => Err(K::UnknownRequest),
            },
            PrefixOp::Resume { request } => match self.requests.get(request) {
                None => Err(K::UnknownRequest),
                Some(s) if !s.preempted => Err(K::NotPreempted),
                Some(_) => Ok(()),
            },
            PrefixOp::Evict { blocks } => {
                if *blocks < 0 {
                    Err(K::InvalidArgument)
                } else if *blocks as u64 > before.cached {
                    Err(K::EvictTooMany)
                } else {
                    Ok(())
                }
            }
            PrefixOp::Clear => Ok(()),
        };
        result.err()
    }

    /// The most new blocks `op` can need by the contract (no hit, a copy on
    /// write counted, in every block table of a request), for the ops that
    /// allocate.
    fn most_needed(&self, op: &PrefixOp) -> Option<usize> {
        let b = self.config.block_size;
        let tables = self.groups.total();
        let one = match op {
            PrefixOp::Start { tokens, .. } => Some(blocks_for(tokens.len(), b)),
            PrefixOp::Resume { request } => self
                .requests
                .get(request)
                .map(|s| blocks_for(s.tokens.len(), b)),
            PrefixOp::Extend { request, tokens } => self.requests.get(request).map(|s| {
                let n = s.tokens.len();
                let copy = usize::from(n % b != 0 && !tokens.is_empty());
                blocks_for(n + tokens.len(), b) - blocks_for(n, b) + copy
            }),
            _ => None,
        };
        one.map(|blocks| blocks * tables)
    }

    /// The cached blocks a hit of `hit` tokens can take back: every block
    /// of a full-attention table, a windowed table's from its window's
    /// start (§19).
    fn hit_blocks(&self, hit: usize) -> usize {
        let b = self.config.block_size;
        let start = self.config.window_start(hit);
        self.groups.full * (hit / b) + self.groups.window * (hit / b - start / b)
    }

    /// Judges a refusal of kind `kind`: the contract's own refusal must be
    /// it; otherwise only `no_room` of an allocating op, and only when the
    /// op may need more than is free and cached (P8, P9).
    pub(super) fn judge_refusal(
        &self,
        op: &PrefixOp,
        contract: Option<PrefixErrorKind>,
        kind: PrefixErrorKind,
        before: BlockCounts,
    ) -> Result<(), (Invariant, String)> {
        if let Some(want) = contract {
            return match kind == want || self.waived.contains(&Invariant::Refusals) {
                true => Ok(()),
                false => Err((Invariant::Refusals, format!("err {want}"))),
            };
        }
        let Some(need) = self
            .most_needed(op)
            .filter(|_| kind == PrefixErrorKind::NoRoom)
        else {
            return match self.waived.contains(&Invariant::Refusals) {
                true => Ok(()),
                false => Err((Invariant::Refusals, "an effect (or no_room)".into())),
            };
        };
        let (free, cached) = (before.free as usize, before.cached as usize);
        if need <= free && !self.waived.contains(&Invariant::RoomWhenFree) {
            let want = format!("an effect: it needs at most {need} blocks and {free} are free");
            return Err((Invariant::RoomWhenFree, want));
        }
        if need <= free + cached && !self.waived.contains(&Invariant::NoRoomOnlyWhenFull) {
            let want = format!(
                "an effect: it needs at most {need} blocks, {free} are free and {cached} cached"
            );
            return Err((Invariant::NoRoomOnlyWhenFull, want));
        }
        Ok(())
    }

    /// Judges an accepted op's effect and brings the record up to date.
    pub(super) fn accept(
        &mut self,
        index: u64,
        op: &PrefixOp,
        effect: &PrefixEffect,
        before: BlockCounts,
    ) -> Result<(), Broken> {
        let after = self.cache.counts();
        self.check_accounting(after)?;
        let b = self.config.block_size;
        let mut reused = 0;
        match op {
            PrefixOp::Start { request, tokens } => {
                let hit = self.judge_hit(tokens, effect)?;
                reused = self.hit_blocks(hit);
                self.requests.insert(
                    *request,
                    Shadow {
                        tokens: tokens.clone(),
                        computed: hit,
                        preempted: false,
                    },
                );
                self.note_allocation(index, op, hit, before);
            }
            PrefixOp::Resume { request } => {
                let tokens = self.requests[request].tokens.clone();
                let hit = self.judge_hit(&tokens, effect)?;
                reused = self.hit_blocks(hit);
                let shadow = self.requests.get_mut(request).expect("checked");
                shadow.computed = hit;
                shadow.preempted = false;
                self.note_allocation(index, op, hit, before);
            }
            PrefixOp::Compute { request, count } => {
                let shadow = self.requests.get_mut(request).expect("checked");
                let from = shadow.computed;
                shadow.computed += *count as usize;
                let (tokens, to) = (shadow.tokens.clone(), shadow.computed);
                reused = self.seal(index, &tokens, from, to) * self.groups.total();
                self.behind_window(&tokens, to);
            }
            PrefixOp::Extend { request, tokens } => {
                let shadow = self.requests.get_mut(request).expect("checked");
                shadow.tokens.extend_from_slice(tokens);
                self.note_allocation(index, op, 0, before);
            }
            PrefixOp::Fork { request, into } => {
                let shadow = self.requests[request].clone();
                self.requests.insert(*into, shadow);
            }
            PrefixOp::Rollback { request, count } => {
                let shadow = self.requests.get_mut(request).expect("checked");
                let n = shadow.tokens.len() - *count as usize;
                let dropped: Vec<Token> = shadow.tokens.clone();
                shadow.tokens.truncate(n);
                shadow.computed = shadow.computed.min(n);
                // A library may free a rolled-back draft's blocks instead of
                // caching them: they bound hits (P4) but promise none (P5).
                let mut end = (n / b + 1) * b;
                while end <= dropped.len() {
                    self.doubtful.insert(dropped[..end].to_vec());
                    end += b;
                }
            }
            PrefixOp::Finish { request } => {
                self.requests.remove(request);
            }
            PrefixOp::Preempt { request } => {
                let shadow = self.requests.get_mut(request).expect("checked");
                shadow.computed = 0;
                shadow.preempted = true;
            }
            PrefixOp::Read { .. } => {}
            PrefixOp::Evict { blocks } => {
                if *blocks > 0 {
                    self.last_eviction = Some(index);
                }
            }
            PrefixOp::Clear => {
                if before.cached > 0 {
                    self.last_eviction = Some(index);
                }
                let n = self.config.blocks as u64;
                let empty = self.requests.is_empty();
                self.check(Invariant::NoLeak, !empty || after.free == n, || {
                    (
                        format!("every block free once no request is left: free {n}"),
                        after.to_string(),
                    )
                })?;
            }
        }
        // Cached blocks can leave the cache only by a hit, a merge or an
        // eviction: more gone than this op reused is an eviction.
        if after.cached + (reused as u64) < before.cached {
            self.last_eviction = Some(index);
        }
        self.probe_all()
    }

    /// P4 and P5 on a hit of `tokens`.
    fn judge_hit(&self, tokens: &[Token], effect: &PrefixEffect) -> Result<usize, Broken> {
        let b = self.config.block_size;
        let cap = self.config.hit.cap(tokens.len());
        let hit = effect.hit.unwrap_or(0) as usize;
        let longest = |fresh: bool| {
            let mut h = 0;
            while h + b <= cap.min(tokens.len()) {
                let prefix = &tokens[..h + b];
                let ok = match self.sealed.get(prefix) {
                    None => false,
                    Some(_) if !fresh => true,
                    Some(at) => {
                        !self.doubtful.contains(prefix)
                            && self.last_eviction.is_none_or(|e| *at > e)
                    }
                };
                if !ok {
                    break;
                }
                h += b;
            }
            h
        };
        let (bound, promised) = (longest(false), longest(true));
        self.check(
            Invariant::NoOverHit,
            effect.hit.is_some() && hit % b == 0 && hit <= cap && hit <= bound,
            || {
                (
                    format!("a hit that is a multiple of {b}, at most the cap {cap} and at most {bound}, the longest prefix sealed earlier"),
                    effect.to_string(),
                )
            },
        )?;
        self.check(Invariant::FullHit, hit >= promised, || {
            (
                format!("hit {promised}: the prefix sealed since the last eviction"),
                effect.to_string(),
            )
        })?;
        Ok(hit)
    }

    /// An allocation that needed more blocks than were free had to evict.
    fn note_allocation(&mut self, index: u64, op: &PrefixOp, hit: usize, before: BlockCounts) {
        let b = self.config.block_size;
        let need = match op {
            PrefixOp::Extend { request, tokens } => {
                let n = self.requests[request].tokens.len() - tokens.len();
                (blocks_for(n + tokens.len(), b) - blocks_for(n, b)) * self.groups.total()
            }
            _ => self
                .most_needed(op)
                .map_or(0, |all| all.saturating_sub(hit / b)),
        };
        if need as u64 > before.free {
            self.last_eviction = Some(index);
        }
    }

    /// Records the block prefixes `tokens` seals when its computed count
    /// goes from `from` to `to`; how many (a merge may reuse as many
    /// cached blocks).
    fn seal(&mut self, index: u64, tokens: &[Token], from: usize, to: usize) -> usize {
        let b = self.config.block_size;
        let mut sealed = 0;
        let mut end = (from / b + 1) * b;
        while end <= to {
            self.sealed.insert(tokens[..end].to_vec(), index);
            self.doubtful.remove(&tokens[..end]);
            sealed += 1;
            end += b;
        }
        sealed
    }

    /// A windowed cache may free, rather than cache, the blocks behind a
    /// request's window (§19): they stay a bound for P4 and are no longer a
    /// promise for P5.
    fn behind_window(&mut self, tokens: &[Token], computed: usize) {
        let b = self.config.block_size;
        let start = self.config.window_start(computed);
        for end in (1..=start / b).map(|k| k * b) {
            self.doubtful.insert(tokens[..end].to_vec());
        }
    }

    /// P3 on every running request, and a preempted one refused.
    pub(super) fn probe_all(&mut self) -> Result<(), Broken> {
        let ids: Vec<_> = self.requests.keys().copied().collect();
        for id in ids {
            let shadow = &self.requests[&id];
            let (preempted, computed) =
                (shadow.preempted, shadow.tokens[..shadow.computed].to_vec());
            let start = self.config.window_start(shadow.computed);
            let read = self.cache.probe(id, start);
            let verdict = if preempted {
                match read.as_ref().err().and_then(PrefixFailure::kind) {
                    Some(PrefixErrorKind::Preempted) => Ok(()),
                    _ => Err((
                        format!("a probe of preempted r{id} is refused preempted"),
                        show(&read),
                    )),
                }
            } else {
                read.map_err(|e| e.to_string())
                    .and_then(|rows| {
                        check_rows(&self.config, &computed, start, &rows).map_err(|e| e.to_string())
                    })
                    .map_err(|why| {
                        (
                            format!(
                                "r{id} reads the payload of its {} computed tokens",
                                computed.len()
                            ),
                            format!("r{id}: {why}"),
                        )
                    })
            };
            if let Err((want, got)) = verdict {
                self.check(Invariant::Payload, false, || (want, got))?;
            }
        }
        Ok(())
    }
}

fn show(read: &Result<Vec<f32>, PrefixFailure>) -> String {
    match read {
        Ok(rows) => format!("{} values read", rows.len()),
        Err(failure) => failure.to_string(),
    }
}
