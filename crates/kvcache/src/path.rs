//! Which implementation of the mutating ops a cache runs.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

/// The implementation of a cache's mutating paths (write, evict-shift,
/// rewind, growth, zeroing, quantize / dequantize, view assembly).
///
/// Both paths produce the same bytes: the property suites replay every
/// profile on each and compare them bit for bit with the reference model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Path {
    /// CPU custom ops working on the storage directly (`memmove`s, strided
    /// copies, scalar quantization kernels). CPU only: on another device
    /// the first mutating op fails with a backend error.
    #[default]
    InPlace,
    /// Only candle's public tensor ops, which every backend implements
    /// (`slice_set`, `narrow`, `copy`, `cat`, `zeros`, elementwise and
    /// reduction ops, `to_dtype`): runs on any device.
    Generic,
}

impl Path {
    /// Every path, in a fixed order (for suites that run each).
    pub const ALL: [Path; 2] = [Path::InPlace, Path::Generic];

    /// The path a cache on `device` uses unless told otherwise: in-place on
    /// the CPU, generic everywhere else.
    pub fn default_for(device: &Device) -> Path {
        if device.is_cpu() {
            Path::InPlace
        } else {
            Path::Generic
        }
    }

    /// The name used in reports and subject specs: `in-place` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            Path::InPlace => "in-place",
            Path::Generic => "generic",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cache path name that is neither `in-place` nor `generic`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache path {text:?}: expected \"in-place\" or \"generic\"")]
pub struct UnknownPath {
    /// The text parsed.
    pub text: String,
}

impl FromStr for Path {
    type Err = UnknownPath;

    /// Parses `in-place` or `generic`; the error names the accepted values.
    fn from_str(s: &str) -> Result<Path, UnknownPath> {
        match s {
            "in-place" => Ok(Path::InPlace),
            "generic" => Ok(Path::Generic),
            other => Err(UnknownPath {
                text: other.to_string(),
            }),
        }
    }
}
