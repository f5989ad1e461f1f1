//! The engines: the ways op sequences are generated and driven through
//! [`crate::check`]. Every drawn case is a [`strategy::Case`], run by the
//! one runner of [`case`]: the property suites ([`suite`]), the random
//! campaign of `kvcheck run` ([`scale`]) and [`power`]. The exhaustive
//! explorer ([`explore`]) and the fuzz targets' bodies (`fuzzcase`,
//! feature `arbitrary`) build their ops their own way; then comes what is
//! done with a failure: [`minimize`], [`replay`], [`explain`], [`triage`].
//! [`power`] measures the engines on the zoo of faults. What a step is
//! compared with is the [`oracle`]: the model, the [`relation`]s of
//! docs/contract.md §9 and the [`invariant`]s of one run, or another
//! subject.
//! [`prefix`] is the prefix-cache family (docs/contract.md Part II): its
//! lockstep on a `kvcache::PrefixCache`, replay and minimizer.

pub mod case;
pub mod check;
pub mod explain;
pub mod explore;
#[cfg(feature = "arbitrary")]
pub mod fuzzcase;
pub mod invariant;
pub mod minimize;
pub mod oracle;
pub mod power;
pub mod prefix;
pub mod relation;
pub mod replay;
pub mod run;
pub mod scale;
pub mod strategy;
pub mod suite;
pub mod triage;
