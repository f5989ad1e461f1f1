//! The wire types of kvcheck-subject/1 and the byte codec of tensors.

use crate::subject::capabilities::{Capabilities, Feature, OpKind, Reports};
use crate::subject::domain::Domain;
use candle_core::{DType, Device, Tensor};
use half::{bf16, f16};
use kvmodel::{Dtype, Trim, Variant};
use serde::Deserialize;
use std::time::Duration;

/// The `hello` answer: the subject's name and capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The name it gives itself.
    pub name: String,
    /// What it can express (`internals` is always false) and what its `ok`
    /// responses report for comparison (`reports`, revision 2).
    pub capabilities: Capabilities,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Report {
    Capacity,
    ResidentBytes,
}

#[derive(Deserialize)]
pub(super) struct RawHello {
    pub(super) protocol: String,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) capabilities: Option<RawCapabilities>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapabilities {
    #[serde(default)]
    pub(super) variants: Option<Vec<Variant>>,
    #[serde(default)]
    pub(super) dtypes: Option<Vec<Dtype>>,
    #[serde(default)]
    pub(super) ops: Option<Vec<OpKind>>,
    #[serde(default)]
    pub(super) features: Vec<Feature>,
    #[serde(default)]
    pub(super) values: bool,
    #[serde(default)]
    pub(super) view: bool,
    #[serde(default)]
    pub(super) reports: Vec<Report>,
    #[serde(default)]
    pub(super) domain: Option<Domain>,
    /// Revision 4: the trim modes it opens; absent means `before_read`
    /// alone, so a subject written before the field is never given a
    /// config that trims after the read.
    #[serde(default)]
    pub(super) trims: Option<Vec<Trim>>,
}

impl RawCapabilities {
    pub(super) fn reports(&self) -> Reports {
        let mut reports = Reports::default();
        for report in &self.reports {
            match report {
                Report::Capacity => reports.capacity = true,
                Report::ResidentBytes => reports.resident_bytes = true,
            }
        }
        reports
    }

    pub(super) fn into_capabilities(self) -> Capabilities {
        let reports = self.reports();
        let full = Capabilities::full();
        let mut ops = self.ops.unwrap_or(full.ops);
        if !ops.contains(&OpKind::Write) {
            ops.insert(0, OpKind::Write);
        }
        Capabilities {
            variants: self.variants.unwrap_or(full.variants),
            dtypes: self.dtypes.unwrap_or(full.dtypes),
            ops,
            features: self.features,
            values: self.values,
            view: self.view,
            internals: false,
            reports,
            domain: self.domain,
            trims: self.trims.unwrap_or(full.trims),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Response {
    Ok(OkBody),
    Err(ErrBody),
    Exception(ExceptionBody),
    Outside(OutsideBody),
}

/// Revision 3: the request lies outside the subject's domain.
#[derive(Deserialize)]
pub(super) struct OutsideBody {
    #[serde(default)]
    pub(super) reason: String,
}

#[derive(Deserialize)]
pub(super) struct OkBody {
    #[serde(default)]
    pub(super) global_end: Option<u64>,
    #[serde(default)]
    pub(super) visible: Option<Vec<u64>>,
    #[serde(default)]
    pub(super) k: Option<String>,
    #[serde(default)]
    pub(super) v: Option<String>,
    #[serde(default)]
    pub(super) capacity: Option<u64>,
    #[serde(default)]
    pub(super) resident_bytes: Option<u64>,
}

#[derive(Deserialize)]
pub(super) struct ErrBody {
    pub(super) kind: String,
    #[serde(default)]
    pub(super) message: String,
}

#[derive(Deserialize)]
pub(super) struct ExceptionBody {
    #[serde(rename = "type", default)]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) message: String,
    #[serde(default)]
    pub(super) adapter: bool,
}

/// A tensor's elements as little-endian bytes, row-major.
pub fn tensor_bytes(tensor: &Tensor) -> candle_core::Result<Vec<u8>> {
    let flat = tensor.flatten_all()?;
    Ok(match flat.dtype() {
        DType::F16 => flat
            .to_vec1::<f16>()?
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => flat
            .to_vec1::<bf16>()?
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        _ => flat
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?
            .into_iter()
            .flat_map(f32::to_le_bytes)
            .collect(),
    })
}

/// The tensor of `shape` in `dtype` whose little-endian bytes are `bytes`
/// (whose length the caller checked).
pub fn tensor_from_bytes(
    bytes: &[u8],
    shape: [usize; 4],
    dtype: Dtype,
    device: &Device,
) -> candle_core::Result<Tensor> {
    match dtype {
        Dtype::F32 => {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
        Dtype::F16 => {
            let values: Vec<f16> = bytes
                .chunks_exact(2)
                .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
        Dtype::Bf16 => {
            let values: Vec<bf16> = bytes
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            Tensor::from_vec(values, &shape, device)
        }
    }
}

/// The protocol version said in `hello`.
pub const PROTOCOL: &str = "kvcheck-subject/1";

/// The revision of [`PROTOCOL`] this harness speaks, sent in its `hello`.
/// Revision 2 adds `reports` (capacity and resident bytes in responses) and
/// `adapter` exceptions, revision 3 the `outside` answer and the `domain`
/// capability, revision 4 the `trims` capability (the trim modes a subject
/// opens); a subject written for an older revision ignores the field
/// and keeps working.
pub const REVISION: u64 = 4;

/// The least time a new process has for its `hello` and its first `open`:
/// starting an interpreter and importing a framework (an adapter may answer
/// `hello` at once and import in the background until `open`) can take far
/// longer than answering one op.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of the subject's stderr kept for reports.
pub const STDERR_LINES: usize = 20;

/// A `--subject-timeout` that is not a positive, finite number of seconds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a positive number of seconds")]
pub struct InvalidTimeout {
    /// The text parsed.
    pub text: String,
}

/// Parses a timeout in seconds (`10`, `0.5`); anything but a positive,
/// finite number is an [`InvalidTimeout`] quoting the text.
pub fn parse_timeout(text: &str) -> Result<Duration, InvalidTimeout> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(InvalidTimeout {
            text: text.to_string(),
        }),
    }
}
