//! Moving a drawn op inside a domain ([`Domain::shape`]).

use kvmodel::{Model, Op, Write};

use super::{held_prefix, scene_cut, Chunks, Domain, Latest, Moves, Rewinds, Rewrites};

impl Domain {
    /// `op` moved inside this domain where a nearby op is inside: a gap
    /// or a rewrite the domain leaves out becomes an append, a length it
    /// leaves out the nearest one it allows, a probe it leaves out an
    /// append, a malformed request a valid one, an eviction or pin the
    /// scene cut's, a rewind or a count the cache does not hold one it
    /// does. What cannot be moved inside becomes the next chunk (an
    /// append at the global end), which is inside in every configuration
    /// the domain [opens](Domain::opens).
    pub fn shape(&self, model: &Model, latest: Latest, op: Op) -> Op {
        let mode = self.in_mode(model.config().trim);
        if !std::ptr::eq(mode, self) {
            return mode.shape(model, latest, op);
        }
        if self.admits(model, latest, &op).is_ok() {
            return op;
        }
        let g = model.global_end() as i64;
        let room = (model.capacity() - model.config().sink).max(1) as u64;
        let length = |len: u64| -> i64 {
            let len = if self.oversized { len } else { len.min(room) };
            let len = match &self.chunks {
                Chunks::Any => len,
                Chunks::Lengths(lengths) => lengths
                    .iter()
                    .copied()
                    .filter(|&n| self.oversized || n <= room)
                    .min_by_key(|&n| n.abs_diff(len))
                    .unwrap_or(len),
                Chunks::Multiple(k) => {
                    let k = (*k).max(1);
                    let up = len.div_ceil(k).max(1) * k;
                    if !self.oversized && up > room && k <= room {
                        room / k * k
                    } else {
                        up
                    }
                }
            };
            len.max(1) as i64
        };
        let shaped = match op {
            Op::Write(w) => {
                let len = length(w.len.max(1) as u64);
                let write = |start: i64, len: i64| {
                    Op::Write(Write {
                        start,
                        len,
                        heads: w.heads.filter(|[f, c]| *f >= 0 && *c >= 1),
                        recent_window: w.recent_window.filter(|r| *r >= 0),
                    })
                };
                match latest.0 {
                    // A rewrite becomes the pipeline's: the latest chunk again.
                    Some((start, n)) if w.start < g && self.rewrites == Rewrites::Latest => {
                        write(start as i64, n as i64)
                    }
                    _ => write(g, len),
                }
            }
            Op::Evict { .. } if self.evict == Moves::SceneCut => match scene_cut(model, latest) {
                Some((start, _)) => Op::Evict {
                    tokens: model.evictable().iter().filter(|&&p| p < start).count() as i64,
                },
                None => op,
            },
            Op::Pin { .. } if self.pin == Moves::SceneCut => match scene_cut(model, latest) {
                Some((_, len)) => Op::Pin { tokens: len as i64 },
                None => op,
            },
            Op::Rewind { to } if self.rewinds == Rewinds::Held => Op::Rewind {
                to: to.clamp(0, held_prefix(model) as i64),
            },
            Op::Evict { tokens } if self.evict == Moves::Held => Op::Evict {
                tokens: tokens.clamp(1, model.evictable().len().max(1) as i64),
            },
            Op::Pin { tokens } if self.pin == Moves::Held => Op::Pin {
                tokens: tokens.clamp(1, g.max(1)),
            },
            Op::Rewind { to } if to < 0 => Op::Rewind { to: 0 },
            Op::Evict { tokens } if tokens < 0 => Op::Evict { tokens: 0 },
            Op::Pin { tokens } if tokens < 0 => Op::Pin { tokens: 0 },
            other => other,
        };
        if self.admits(model, latest, &shaped).is_ok() {
            return shaped;
        }
        // Nothing nearby is inside (an evict on a cache with nothing
        // evictable, a scene cut before the second chunk): the next chunk
        // is, in every configuration the domain opens, so the draw stays
        // inside and no generator rejects it.
        Op::Write(Write::new(g, length(1)))
    }
}
