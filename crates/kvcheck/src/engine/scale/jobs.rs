//! How many worker threads a campaign uses.

/// A `--jobs` value that is not a positive whole number.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--jobs takes a positive number of workers, got {text:?}")]
pub struct InvalidJobs {
    /// The text parsed.
    pub text: String,
}

/// Parses a `--jobs` value: a positive number of workers; anything else is
/// an [`InvalidJobs`] quoting the text.
pub fn parse_jobs(text: &str) -> Result<usize, InvalidJobs> {
    match text.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(InvalidJobs {
            text: text.to_string(),
        }),
        Ok(n) => Ok(n),
    }
}

/// The seed of case `index` of profile `profile` in a campaign seeded with
/// `seed`: a SplitMix64 mix of the three, so that a case's ops depend on
/// nothing else (not on the number of workers nor on which worker drew
/// it), and one case replays alone from its seed.
pub fn case_seed(seed: u64, profile: usize, index: u64) -> u64 {
    let mut z = seed
        ^ (profile as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
