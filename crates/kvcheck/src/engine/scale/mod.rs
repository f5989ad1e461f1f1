//! Scaling a checking campaign: every core of one machine (`--jobs`),
//! many machines (`--shard K/N`, JSON reports and their merge).
//!
//! See `docs/scale.md` for how these fit with fuzzing at scale.

pub mod campaign;
pub mod jobs;

pub use campaign::{Campaign, CampaignError, CampaignOutcome, Found, ProfileTally};
pub use jobs::{case_seed, parse_jobs, InvalidJobs};
