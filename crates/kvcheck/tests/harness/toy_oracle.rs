//! A toy oracle, as another crate would write one: the model, but judging
//! only what a caller decides by (refused or not, the global end), never
//! view bytes. One file: the judge and nothing else.

use kvcheck::check::divergence::{Divergence, DivergenceKind};
use kvcheck::check::trace::OracleTag;
use kvcheck::engine::oracle::{Judge, Oracle};
use kvcheck::engine::oracle::{NotChecked, Work};
use kvcheck::subject::SubjectSpec;
use kvcheck::{Config, Op};

/// Outcomes and global ends against the model; values ignored.
#[derive(Debug)]
pub struct OutcomesOnly;

impl Judge for OutcomesOnly {
    fn name(&self) -> String {
        "outcomes-only".to_string()
    }

    fn describe(&self) -> String {
        "refusals and global ends against the model, no view bytes".to_string()
    }

    fn tag(&self) -> Option<OracleTag> {
        None
    }

    fn check(
        &self,
        config: &Config,
        ops: &[Op],
        subject: &SubjectSpec,
        work: &mut Work,
    ) -> Result<Option<Box<Divergence>>, NotChecked> {
        // Whole traces: a later op may still diverge on outcomes after an
        // op whose values differ, so the model's check runs on prefixes
        // that end before each value divergence.
        let mut ops = ops.to_vec();
        loop {
            let found = Oracle::model().check_counted(config, &ops, subject, work)?;
            match found {
                Some(d) if matches!(d.kind, DivergenceKind::Values) => ops.truncate(d.step),
                other => return Ok(other),
            }
        }
    }
}
