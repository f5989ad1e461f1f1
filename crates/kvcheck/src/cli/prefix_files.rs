//! `expect` and `save` of prefix-family traces: `expect` filled by
//! `kvmodel::prefix::PrefixModel`, and a trace stored in the regression
//! corpus after it is minimized on the shipped paged cache when it fails
//! there.

use std::path::Path;

use kvcheck::engine::prefix;
use kvmodel::prefix::PrefixTrace;

use super::CliError;

fn with_model_expect(mut trace: PrefixTrace, file: &Path) -> Result<PrefixTrace, CliError> {
    trace.expect = Some(
        trace
            .model_outcomes()
            .map_err(|e| CliError::PrefixMinimize {
                file: file.to_path_buf(),
                why: e.to_string(),
            })?,
    );
    Ok(trace)
}

fn write(trace: &PrefixTrace, output: Option<&Path>) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(trace).expect("plain JSON values") + "\n";
    match output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => std::fs::write(path, text).map_err(|source| CliError::Write {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `kvcheck expect` of a prefix trace: its `expect` is the model's
/// outcome of every op.
pub fn expect_file(file: &Path, output: Option<&Path>) -> Result<(), CliError> {
    let trace = with_model_expect(prefix::load(file)?, file)?;
    write(&trace, output)
}

/// `kvcheck save` of a prefix trace: minimized on the shipped paged cache
/// when it fails there (its `expect` ignored, so that the corpus keeps
/// the cache's failure, not a wrong expectation), `expect` from the
/// model, written to `path`.
pub fn save_file(file: &Path, path: &Path, max_tests: usize) -> Result<(), CliError> {
    let mut trace = prefix::load(file)?;
    trace.expect = None;
    let failing = prefix::replay_on_paged(&trace)
        .map_err(|e| CliError::PrefixSubject(format!("{}: {e}", file.display())))?
        .divergence;
    if let Some(divergence) = failing {
        let make = |config: &kvmodel::prefix::PrefixConfig| {
            kvcache::PagedCache::new(config, &candle_core::Device::Cpu)
        };
        let m = prefix::minimize::minimize(&trace, &make, max_tests).map_err(|e| {
            CliError::PrefixMinimize {
                file: file.to_path_buf(),
                why: e.to_string(),
            }
        })?;
        println!(
            "it fails on the paged cache ({} at step {}): minimized from {} to {} ops",
            divergence.kind, divergence.step, m.before, m.after
        );
        trace = m.trace;
    } else {
        println!("the trace passes on the paged cache; stored as it is");
    }
    let trace = with_model_expect(trace, file)?;
    write(&trace, Some(path))?;
    println!("saved {}", path.display());
    Ok(())
}
