//! State fingerprints: what the explorer deduplicates on.
//!
//! A fingerprint hashes the model's state *abstractly* and the cache's
//! storage layout *concretely*:
//!
//! - model: `G`, `C`, `W`, the pin, every resident position, the chunks
//!   (start, length, cold) and the current chunk, and the writers of each
//!   resident (position, head) as an **equality pattern**: writer ids are
//!   renumbered by first appearance in (position, head) order. Op indices
//!   never matter for the future, only which rows share a writer (that
//!   decides which values a later view must show), so two paths that differ
//!   only in *when* something was written are one state.
//! - cache: [`KvCache::layout`], slot by slot, and a ring's head, tail and
//!   wrap point ([`KvCache::ring`]), so that two states equal in the model
//!   but laid out differently inside the cache (a ring rotated differently,
//!   a chunk cold in another slot) are explored separately.
//!
//! The hash is 64-bit SipHash (std's `DefaultHasher`, fixed keys), like
//! stateright's fingerprints: a collision could merge two states, at odds
//! of about n²/2⁶⁵ for n states.
//!
//! [`KvCache::layout`]: kvcache::KvCache::layout
//! [`KvCache::ring`]: kvcache::KvCache::ring

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use kvcache::KvCache;
use kvmodel::Model;

/// The fingerprint of a state: the model abstractly, the layout exactly.
pub fn fingerprint(model: &Model, cache: &dyn KvCache) -> u64 {
    let mut h = DefaultHasher::new();
    hash_model(model, &mut h);
    cache.internals().map(|i| i.layout()).hash(&mut h);
    cache.ring().hash(&mut h);
    h.finish()
}

/// Hashes the model state with writer ids replaced by their equality pattern.
pub fn hash_model(model: &Model, h: &mut impl Hasher) {
    model.global_end().hash(h);
    model.capacity().hash(h);
    model.window().hash(h);
    model.pin_range().hash(h);
    model.chunks().hash(h);
    model.current_chunk().hash(h);
    let mut renumber: HashMap<u64, u64> = HashMap::new();
    for position in model.resident() {
        position.hash(h);
        for writer in model.writers(position).unwrap_or(&[]) {
            let canonical = writer.map(|id| {
                let next = renumber.len() as u64;
                *renumber.entry(id).or_insert(next)
            });
            canonical.hash(h);
        }
    }
}
