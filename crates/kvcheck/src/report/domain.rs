//! How much of what a campaign drew lay outside the subject's domain:
//! the tally `run` prints after its totals and the reports carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::subject::domain::{declared_field, narrowest};

/// How much of what a campaign drew lay outside the subject's domain.
///
/// A case that leaves the subject's domain is judged up to the op that
/// left it and cut there; the ops from there on were drawn for nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainTally {
    /// Ops drawn (judged or not).
    pub drawn: u64,
    /// Drawn ops not judged because their case left the subject's domain.
    pub outside: u64,
    /// Cases cut where they left the subject's domain.
    pub cuts: u64,
    /// Judged ops the subject served with state: writes of at least one
    /// position that the contract accepts (appends and rewrites). The
    /// judged floor (`--min-judged`) counts these: refusals, probes and
    /// resets are judged too, but a subject outside at every write would
    /// pass on them alone.
    #[serde(default)]
    pub served: u64,
    /// For the cut cases: the declaration that would have kept the cut op
    /// from being drawn, and how many cuts it names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub declarations: BTreeMap<String, u64>,
}

/// Above this share of drawn ops outside the subject's domain, a run warns
/// and names the declaration that would keep its draws inside.
pub const OUTSIDE_WARNING: f64 = 0.20;

impl DomainTally {
    /// Whether nothing was drawn.
    pub fn is_empty(&self) -> bool {
        self.drawn == 0
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &DomainTally) {
        self.drawn += other.drawn;
        self.outside += other.outside;
        self.cuts += other.cuts;
        self.served += other.served;
        for (declaration, n) in &other.declarations {
            *self.declarations.entry(declaration.clone()).or_default() += n;
        }
    }

    /// Counts one case: `drawn` ops, `served` of them served with state,
    /// cut at `cut` (with the declaration that would have kept the cut op
    /// out) or judged whole.
    pub fn count(&mut self, drawn: usize, served: usize, cut: Option<(usize, Option<&str>)>) {
        self.drawn += drawn as u64;
        self.served += served as u64;
        if let Some((step, declaration)) = cut {
            self.cuts += 1;
            self.outside += drawn.saturating_sub(step) as u64;
            if let Some(declaration) = declaration {
                *self
                    .declarations
                    .entry(declaration.to_string())
                    .or_default() += 1;
            }
        }
    }

    /// The share of drawn ops outside the domain (0 when nothing was drawn).
    pub fn share(&self) -> f64 {
        self.outside as f64 / self.drawn.max(1) as f64
    }

    /// The line a run prints: how many drawn ops lay outside, and above
    /// [`OUTSIDE_WARNING`] the [`DomainTally::warning`] on a line of its
    /// own. `None` when no case was cut.
    pub fn summary(&self) -> Option<String> {
        if self.cuts == 0 {
            return None;
        }
        let mut line = format!(
            "outside the subject's domain: {} of {} drawn ops ({:.1}%), {} cases cut there",
            self.outside,
            self.drawn,
            100.0 * self.share(),
            self.cuts
        );
        if let Some(warning) = self.warning() {
            line.push_str(&format!("\nwarning: {warning}"));
        }
        Some(line)
    }

    /// Above [`OUTSIDE_WARNING`] of the drawn ops outside, the warning
    /// (without its `warning: ` prefix), naming the declarations that would
    /// have kept most of the cut cases from being drawn; the reports carry
    /// it as `warnings`.
    pub fn warning(&self) -> Option<String> {
        if self.cuts == 0 || self.share() <= OUTSIDE_WARNING {
            return None;
        }
        let mut line = format!(
            "more than {:.0}% of the drawn ops were outside the subject's domain",
            100.0 * OUTSIDE_WARNING
        );
        // Per field, the narrowest declaration any cut asked for, with the
        // cuts of every declaration of that field: a wider one would admit
        // requests the subject answered outside, a domain violation once
        // declared. Then the fields that would have kept the most cut
        // cases inside, most first: together they are the domain to
        // declare.
        let mut fields: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
        for (declaration, n) in &self.declarations {
            let entry = fields
                .entry(declared_field(declaration))
                .or_insert((declaration, 0));
            entry.0 = narrowest(entry.0, declaration);
            entry.1 += n;
        }
        let mut ranked: Vec<(&str, u64)> = fields.into_values().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        if ranked.is_empty() {
            line.push_str("; declare its domain (docs/subject-protocol.md, domain)");
        } else {
            let named: Vec<String> = ranked
                .iter()
                .map(|(declaration, n)| format!("{declaration} ({n})"))
                .collect();
            line.push_str(&format!(
                "; declaring in its domain {} would keep that many of the {} cut cases inside (docs/subject-protocol.md, domain)",
                named.join(", "),
                self.cuts
            ));
        }
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_per_field_the_narrowest_declaration_any_cut_needed() {
        let mut tally = DomainTally::default();
        tally.count(10, 0, Some((1, Some("\"rewrites\": \"latest\""))));
        tally.count(10, 0, Some((1, Some("\"rewrites\": \"none\""))));
        tally.count(10, 0, Some((0, Some("\"gaps\": false"))));
        tally.count(10, 4, Some((0, Some("\"configs\""))));
        let warning = tally.warning().unwrap();
        assert!(
            warning.contains("\"rewrites\": \"none\" (2), \"configs\" (1), \"gaps\": false (1)"),
            "{warning}"
        );
        assert!(!warning.contains("\"latest\""), "{warning}");
        assert_eq!(tally.served, 4);
        let mut total = DomainTally::default();
        total.add(&tally);
        assert_eq!((total.served, total.cuts), (4, 4));
    }
}
