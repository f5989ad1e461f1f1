//! The fuzz targets by name, and the zoo's cases for `kvcheck power`.

use kvmodel::Variant;

use crate::check::lockstep::ValueCheck;
use crate::check::trace::Trace;
use crate::subject::SubjectSpec;

use super::check::*;
use super::limits::*;
use super::ops::*;

/// Why fuzzer bytes do not make a kvtrace file ([`Target::to_trace`]):
/// only `trace_load` inputs can fail, the other targets decode any bytes.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A `trace_load` input is not UTF-8 text.
    #[error("not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
    /// A `trace_load` input is not a loadable kvtrace/1 document.
    #[error(transparent)]
    Trace(#[from] crate::check::trace::TraceError),
}

/// The fuzz targets, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Structured dense cases through the lockstep driver.
    DenseLockstep,
    /// Structured dense cases through the lockstep driver, on the
    /// `RingCache` (`cache:ring`).
    RingLockstep,
    /// Structured packed cases through the lockstep driver.
    PackedLockstep,
    /// The model alone against docs/contract.md invariants.
    ModelInvariants,
    /// Arbitrary bytes as a kvtrace file.
    TraceLoad,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 5] = [
        Target::DenseLockstep,
        Target::RingLockstep,
        Target::PackedLockstep,
        Target::ModelInvariants,
        Target::TraceLoad,
    ];

    /// The target's name in `fuzz/fuzz_targets/`.
    pub fn name(self) -> &'static str {
        match self {
            Target::DenseLockstep => "dense_lockstep",
            Target::RingLockstep => "ring_lockstep",
            Target::PackedLockstep => "packed_lockstep",
            Target::ModelInvariants => "model_invariants",
            Target::TraceLoad => "trace_load",
        }
    }

    /// Parses a target name.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs the target's body on `data`; `Err` is what the fuzzer reports
    /// as a crash.
    pub fn check(self, data: &[u8]) -> Result<(), FuzzFailure> {
        self.check_with(data, ValueCheck::default())
    }

    /// [`Target::check`] with the lockstep targets comparing views with
    /// `value_check` (the other targets ignore it).
    pub fn check_with(self, data: &[u8], value_check: ValueCheck) -> Result<(), FuzzFailure> {
        let generic = SubjectSpec::CachePath(kvcache::Path::Generic);
        match self {
            Target::DenseLockstep => check_bytes(
                Variant::Dense,
                data,
                &[SubjectSpec::Cache, generic],
                value_check,
            ),
            Target::RingLockstep => {
                check_bytes(Variant::Dense, data, &[SubjectSpec::Ring], value_check)
            }
            Target::PackedLockstep => check_bytes(
                Variant::Packed,
                data,
                &[SubjectSpec::Cache, generic],
                value_check,
            ),
            Target::ModelInvariants => check_model_invariants(&FuzzCase::from_model_bytes(data)),
            Target::TraceLoad => check_trace_load(data),
        }
    }

    /// The input as a kvtrace file: the JSON itself for `trace_load`, the
    /// decoded case with `expect` from the model for the others.
    pub fn to_trace(self, data: &[u8]) -> Result<Trace, DecodeError> {
        match self {
            Target::DenseLockstep | Target::RingLockstep => {
                Ok(FuzzCase::from_bytes(Variant::Dense, data).to_trace())
            }
            Target::PackedLockstep => Ok(FuzzCase::from_bytes(Variant::Packed, data).to_trace()),
            Target::ModelInvariants => Ok(FuzzCase::from_model_bytes(data).to_trace()),
            Target::TraceLoad => {
                let text = std::str::from_utf8(data)?;
                Ok(Trace::from_json(text)?)
            }
        }
    }
}

/// The case `fault_lockstep` runs for `fault`: `data` decoded for the
/// fault's variant within its capabilities.
pub fn fault_case(fault: kvcache::fault::CacheFault, data: &[u8]) -> FuzzCase {
    fault_case_on(fault, kvcache::fault::FaultBase::Shipped, data)
}

/// [`fault_case`] for `fault` injected into `base`: decoded within that
/// subject's capabilities (the ring's, for [`FaultBase::Ring`]).
///
/// [`FaultBase::Ring`]: kvcache::fault::FaultBase::Ring
pub fn fault_case_on(
    fault: kvcache::fault::CacheFault,
    base: kvcache::fault::FaultBase,
    data: &[u8],
) -> FuzzCase {
    let subject = SubjectSpec::cache_fault(fault, base);
    let capabilities = subject
        .capabilities()
        .expect("an in-process subject states its capabilities");
    FuzzCase::decode_for(fault.variant(), data, MAX_OPS, &capabilities)
}

/// The body of `fault_lockstep`: [`fault_case`] through the lockstep driver
/// on the cache with `fault`. `Err` holds the divergence (its message: the
/// report and the kvtrace JSON), as for the other lockstep targets.
pub fn check_fault(fault: kvcache::fault::CacheFault, data: &[u8]) -> Result<(), FuzzFailure> {
    check_fault_on(fault, kvcache::fault::FaultBase::Shipped, data)
}

/// [`check_fault`] with `fault` injected into `base`.
pub fn check_fault_on(
    fault: kvcache::fault::CacheFault,
    base: kvcache::fault::FaultBase,
    data: &[u8],
) -> Result<(), FuzzFailure> {
    check_lockstep_on(
        &fault_case_on(fault, base, data),
        &SubjectSpec::cache_fault(fault, base),
    )
}
