//! The pure search of oom-bisect: from one configuration and a memory ceiling, find by experiment which
//! dimension pushes a training run over, where along each dimension the boundary lies, which modules
//! carry the memory, and the smallest configuration that still fails.
//!
//! Nothing here spawns, prints, sleeps or reads the clock. Trials are asked of an [`Oracle`]; time is
//! asked of a [`Clock`]; progress is told through [`Event`]s. A candidate is a set of `key=value`
//! overrides of the original configuration, and every word about what an axis or a module means
//! comes from the caller, so the search knows nothing about models, backends or flags.

mod bisect;
mod certificates;
mod culprits;
mod ddmin;
mod diagnosis;
mod driver;
mod minimal;
mod predict;
mod searcher;
mod vocabulary;

pub use bisect::{bisect_axis, bisect_axis_finely, AxisSearch, AxisVerdict, Probe, Sides};
pub use certificates::{to_certify, ToCertify};
pub use ddmin::{ddmin, Reduced};
pub use diagnosis::{
    Diagnosis, Fix, FixResult, Minimal, ModuleCost, ModuleItem, Modules, ModulesVerdict, Neighbour,
    SearchOptions, Space,
};
pub use driver::{diagnose, expected_trials};
pub use predict::predict_boundary;
pub use searcher::{Budget, Clock, Searcher, TrialRecord};
pub use vocabulary::*;
