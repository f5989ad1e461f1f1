//! The kvtrace/1 document of the prefix-cache family (docs/kvtrace.md
//! "Prefix caches"): the same top-level shape as a streaming trace, with a
//! config whose `variant` is `"prefix"`.
//!
//! The type only holds and checks the document; reading the JSON text is
//! the reader's (serde_json in kvcheck and the tests).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::prefix::config::PrefixConfig;
use crate::prefix::error::PrefixError;
use crate::prefix::model::PrefixModel;
use crate::prefix::op::PrefixOp;
use crate::prefix::outcome::PrefixOutcome;

/// The format tag every kvtrace/1 document carries.
pub const FORMAT: &str = "kvtrace/1";

/// A prefix-cache trace: a config, the ops in order and, optionally, the
/// outcome each op must have. Deserializing one already refuses unknown
/// fields, unknown ops and a config that breaks docs/contract.md §11;
/// [`PrefixTrace::validate`] checks the rest of docs/kvtrace.md's loading
/// steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixTrace {
    /// Always `"kvtrace/1"`.
    pub format: String,
    /// Free text: where the trace comes from, what it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The cache configuration.
    pub config: PrefixConfig,
    /// The ops; op `i` (counted from 0) stamps the blocks it releases with
    /// `i` (docs/contract.md §14).
    pub ops: Vec<PrefixOp>,
    /// One outcome per op, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Vec<PrefixOutcome>>,
}

/// Why a prefix trace is refused, or where it disagrees with the model.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PrefixTraceError {
    /// `format` is not `"kvtrace/1"`.
    #[error("format is {found:?}, expected \"kvtrace/1\"")]
    Format {
        /// The format given.
        found: String,
    },
    /// The config breaks a rule (only reachable for a trace built in code:
    /// deserialization refuses such a config already).
    #[error("config.{0}")]
    Config(PrefixError),
    /// `expect` does not have one outcome per op.
    #[error("expect has {expect} outcomes but there are {ops} ops")]
    ExpectLength {
        /// Number of ops.
        ops: usize,
        /// Number of outcomes.
        expect: usize,
    },
    /// The model's outcome of an op is not the expected one.
    #[error("step {step} ({op}): expected {expected}, the model says {actual}")]
    Mismatch {
        /// The op's index.
        step: usize,
        /// The op, in its compact form.
        op: String,
        /// The outcome of `expect` (boxed, like `actual`, to keep the
        /// error small on the happy path).
        expected: Box<PrefixOutcome>,
        /// The model's outcome.
        actual: Box<PrefixOutcome>,
    },
}

impl PrefixTrace {
    /// A trace of `ops` on `config` without expectations.
    pub fn new(config: PrefixConfig, ops: Vec<PrefixOp>) -> PrefixTrace {
        PrefixTrace {
            format: FORMAT.to_string(),
            note: None,
            config,
            ops,
            expect: None,
        }
    }

    /// docs/kvtrace.md's loading steps after the JSON itself: the format,
    /// the config, the length of `expect`.
    pub fn validate(&self) -> Result<(), PrefixTraceError> {
        if self.format != FORMAT {
            return Err(PrefixTraceError::Format {
                found: self.format.clone(),
            });
        }
        self.config.validate().map_err(PrefixTraceError::Config)?;
        match &self.expect {
            Some(expect) if expect.len() != self.ops.len() => Err(PrefixTraceError::ExpectLength {
                ops: self.ops.len(),
                expect: expect.len(),
            }),
            _ => Ok(()),
        }
    }

    /// The model's outcome of every op, in order.
    pub fn model_outcomes(&self) -> Result<Vec<PrefixOutcome>, PrefixTraceError> {
        let mut model = PrefixModel::new(&self.config).map_err(PrefixTraceError::Config)?;
        Ok(self
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| model.apply(i as u64, op).into())
            .collect())
    }

    /// The trace with `expect` filled in by the model.
    pub fn with_model_outcomes(mut self) -> Result<PrefixTrace, PrefixTraceError> {
        self.expect = Some(self.model_outcomes()?);
        Ok(self)
    }

    /// Validates the trace and replays it on the model: the first op whose
    /// outcome differs from `expect` is a [`PrefixTraceError::Mismatch`].
    /// A trace without `expect` only has to validate.
    pub fn check_on_model(&self) -> Result<(), PrefixTraceError> {
        self.validate()?;
        let Some(expect) = &self.expect else {
            return Ok(());
        };
        for (step, (actual, expected)) in self.model_outcomes()?.into_iter().zip(expect).enumerate()
        {
            if &actual != expected {
                return Err(PrefixTraceError::Mismatch {
                    step,
                    op: self.ops[step].to_string(),
                    expected: Box::new(expected.clone()),
                    actual: Box::new(actual),
                });
            }
        }
        Ok(())
    }
}
