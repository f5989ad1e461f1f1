//! Sliding windows (docs/contract.md §19): which layers read only the last
//! positions, and which rows a read of such a layer returns.

use serde::{Deserialize, Serialize};

use crate::prefix::config::PrefixConfig;
use crate::prefix::error::PrefixError;

/// A sliding window over some layers of a prefix cache (docs/contract.md
/// §19): a query at position `p` of a windowed layer attends the keys of
/// positions `[p − size + 1, p]`, so a read of that layer returns only the
/// rows the next query attends.
///
/// A deserialized window has `layers` filled in and sorted, checked
/// against the config's layers by [`PrefixConfig::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawWindow", into = "RawWindow")]
pub struct Window {
    /// `W`: the keys one query attends, itself included (at least 1).
    pub size: usize,
    /// The windowed layers, sorted and distinct; the others read every
    /// position. Empty only before deserialization fills it in (every
    /// layer).
    pub layers: Vec<usize>,
}

impl Window {
    /// A window of `size` keys over every one of `layers` layers.
    pub fn all_layers(size: usize, layers: usize) -> Window {
        Window {
            size,
            layers: (0..layers).collect(),
        }
    }

    /// The rule of §19 it breaks in a config of `layers` layers, if any.
    pub(crate) fn check(&self, layers: usize) -> Result<(), PrefixError> {
        let invalid = |reason: String| PrefixError::InvalidConfig {
            field: "window",
            reason,
        };
        if self.size < 1 {
            return Err(invalid(format!(
                "size must be at least 1, got {}",
                self.size
            )));
        }
        if self.layers.is_empty() {
            return Err(invalid("layers must name at least one layer".into()));
        }
        if self.layers.windows(2).any(|w| w[0] >= w[1]) {
            return Err(invalid(format!(
                "layers must be distinct and sorted, got {:?}",
                self.layers
            )));
        }
        match self.layers.iter().find(|&&l| l >= layers) {
            Some(l) => Err(invalid(format!("layer {l} is not below layers = {layers}"))),
            None => Ok(()),
        }
    }
}

/// The window as a trace writes it: signed, `layers` optional (every
/// layer), so that a bad value is named rather than a type error.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layers: Option<Vec<i64>>,
}

impl TryFrom<RawWindow> for Window {
    type Error = PrefixError;

    fn try_from(raw: RawWindow) -> Result<Window, PrefixError> {
        let invalid = |reason: String| PrefixError::InvalidConfig {
            field: "window",
            reason,
        };
        let size = usize::try_from(raw.size)
            .ok()
            .filter(|&s| s >= 1)
            .ok_or_else(|| invalid(format!("size must be at least 1, got {}", raw.size)))?;
        if raw.layers.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid("layers must name at least one layer".into()));
        }
        let mut layers = Vec::new();
        for l in raw.layers.unwrap_or_default() {
            layers.push(usize::try_from(l).map_err(|_| invalid(format!("layer {l} is negative")))?);
        }
        let distinct = layers.len();
        layers.sort_unstable();
        layers.dedup();
        if layers.len() != distinct {
            return Err(invalid("layers must be distinct".into()));
        }
        Ok(Window { size, layers })
    }
}

impl From<Window> for RawWindow {
    fn from(window: Window) -> RawWindow {
        let signed = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        RawWindow {
            size: signed(window.size),
            layers: Some(window.layers.into_iter().map(signed).collect()),
        }
    }
}

impl PrefixConfig {
    /// Whether layer `layer` reads through a window (docs/contract.md §19).
    pub fn windowed(&self, layer: usize) -> bool {
        self.window
            .as_ref()
            .is_some_and(|w| w.layers.binary_search(&layer).is_ok())
    }

    /// Where a read of a windowed layer starts for a request with
    /// `computed` tokens computed: `max(0, c − W + 1)`, the first key the
    /// query at position `c` attends; 0 without a window.
    pub fn window_start(&self, computed: usize) -> usize {
        match &self.window {
            None => 0,
            Some(w) => (computed + 1).saturating_sub(w.size).min(computed),
        }
    }

    /// The positions a read returns on `layer` (§19): `[start, computed)`
    /// on a windowed layer, `[0, computed)` on the others.
    pub fn read_range(
        &self,
        layer: usize,
        computed: usize,
        start: usize,
    ) -> std::ops::Range<usize> {
        match self.windowed(layer) {
            true => start.min(computed)..computed,
            false => 0..computed,
        }
    }

    /// The rows a read returns, from `all`, the rows of every computed
    /// position laid out `[layer][position][dim]`: each layer's
    /// [`PrefixConfig::read_range`], in layer order.
    pub fn window_rows(&self, all: &[f32], computed: usize, start: usize) -> Vec<f32> {
        let width = self.row_width;
        (0..self.layers)
            .flat_map(|layer| {
                let range = self.read_range(layer, computed, start);
                let base = layer * computed * width;
                all[base + range.start * width..base + range.end * width].iter()
            })
            .copied()
            .collect()
    }
}
