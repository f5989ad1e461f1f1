//! The reference model as an oracle: every op of a trace applied to the
//! model and to the subject in lockstep ([`Lockstep`]), outcomes, global
//! ends, capacity, resident bytes and views compared bit for bit as each
//! op is applied. The default oracle, and the only stepwise one.

use candle_core::Device;
use kvmodel::{Config, Op};

use super::{Judge, Oracle};
use crate::check::divergence::Divergence;
use crate::check::lockstep::{Cut, Lockstep, SetupError};
use crate::check::trace::OracleTag;
use crate::engine::oracle::{NotChecked, OracleError, Walked, Work};
use crate::subject::SubjectSpec;

/// The reference model, op by op (`model`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelJudge;

/// `model` (or nothing at all).
pub fn parse(text: &str) -> Option<Result<Oracle, OracleError>> {
    matches!(text, "model" | "").then(|| Ok(Oracle::model()))
}

impl Judge for ModelJudge {
    fn name(&self) -> String {
        "model".to_string()
    }

    fn describe(&self) -> String {
        "every op against the reference model".to_string()
    }

    fn tag(&self) -> Option<OracleTag> {
        None
    }

    fn stepwise(&self) -> bool {
        true
    }

    fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        let mut lockstep = match Lockstep::open(config, subject, &Device::Cpu) {
            Ok(lockstep) => lockstep,
            Err(SetupError::Outside { reason }) => {
                let reason = format!("the configuration is outside its domain ({reason})");
                work.cut = Some(Cut::at_open(config, ops, reason));
                return Ok(None);
            }
            Err(SetupError::Unsupported(e)) => return Err(NotChecked::Unsupported(e)),
            Err(e) => return Err(NotChecked::Setup(e.to_string())),
        };
        lockstep.capabilities().supports_trace(config, ops)?;
        let mut divergence = None;
        for op in ops {
            if let Err(found) = lockstep.step(op) {
                divergence = Some(found);
                break;
            }
            // Nothing from the cut on is judged, so nothing there can matter.
            if lockstep.cut().is_some() {
                break;
            }
        }
        work.runs += 1;
        work.ops += lockstep.judged();
        work.cut = lockstep.cut().cloned();
        work.walked = Some(Walked {
            judged: lockstep.judged(),
            served: lockstep.served(),
            coverage: lockstep.coverage().clone(),
        });
        Ok(divergence)
    }
}
