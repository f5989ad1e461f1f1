//! The model's own invariants (docs/contract.md §12, §14, §17), for the
//! property tests: they hold after every op, or the model is wrong.

use super::{Holding, PrefixModel};

impl PrefixModel {
    /// The model's own invariants (docs/contract.md §12 and §17), for the
    /// property tests: a description of the first one broken.
    pub(crate) fn audit(&self) -> Result<(), String> {
        let b = self.config.block_size;
        let counts = self.counts();
        if counts.in_use + counts.cached > self.config.blocks as u64 {
            return Err(format!("{counts} exceeds N = {}", self.config.blocks));
        }
        let held = self.held_sealed();
        for (id, r) in &self.requests {
            if r.computed > r.tokens.len() {
                return Err(format!(
                    "r{id} computed {} of {}",
                    r.computed,
                    r.tokens.len()
                ));
            }
            if r.preempted {
                if !r.blocks.is_empty() || r.computed != 0 {
                    return Err(format!("preempted r{id} holds blocks or computed tokens"));
                }
                continue;
            }
            if r.blocks.len() != self.config.blocks_for(r.tokens.len()) {
                return Err(format!(
                    "r{id} holds {} blocks for {} tokens",
                    r.blocks.len(),
                    r.tokens.len()
                ));
            }
            for (j, holding) in r.blocks.iter().enumerate() {
                let full_computed = (j + 1) * b <= r.computed;
                match holding {
                    Holding::Sealed(p) => {
                        let own = (j + 1) * b;
                        let used = r.tokens.len().min(own);
                        if p.len() != own || p[..used] != r.tokens[..used] || r.computed < used {
                            return Err(format!("r{id} block {j} sealed on another prefix"));
                        }
                    }
                    Holding::Private(_) if full_computed => {
                        return Err(format!(
                            "r{id} block {j} is full and computed but not sealed"
                        ));
                    }
                    Holding::Private(_) => {}
                }
            }
        }
        for prefix in self.cached.keys() {
            if held.contains(prefix.as_slice()) {
                return Err(format!(
                    "prefix of {} tokens both cached and in use",
                    prefix.len()
                ));
            }
        }
        for prefix in self
            .cached
            .keys()
            .map(Vec::as_slice)
            .chain(held.iter().copied())
        {
            if prefix.is_empty() || prefix.len() % b != 0 {
                return Err(format!(
                    "stored prefix of {} tokens is not block-aligned",
                    prefix.len()
                ));
            }
            let parent = &prefix[..prefix.len() - b];
            if !parent.is_empty() && !self.is_stored(parent) {
                return Err(format!(
                    "stored prefix of {} tokens has no stored parent",
                    prefix.len()
                ));
            }
        }
        Ok(())
    }
}
