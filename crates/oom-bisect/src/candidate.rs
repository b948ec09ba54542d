//! What a candidate is: the original configuration with its overrides applied, and the
//! architecture it builds. One home for that question, asked by the oracle (to run it), the report
//! (to read what it swapped) and the notes (what PyTorch would refuse).

use deeplab::{Architecture, Config, ConfigError};
use oom_search::Candidate;

/// `candidate` on top of `base`: its configuration and architecture, or why it is not valid.
pub fn resolve(
    base: &Config,
    candidate: &Candidate,
) -> Result<(Config, Architecture), ConfigError> {
    let config = base.with_overrides(&candidate.to_sets())?;
    let arch = Architecture::new(&config)?;
    Ok((config, arch))
}
