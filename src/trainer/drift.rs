//! A test hook for the checks that replicas hold equal weights: `PIPETRAIN_TEST_DRIFT=<replica>:<step>`
//! makes replica `<replica>`'s weights leave the others' after optimizer step `<step>`
//! (counted from 1; [`Pipeline::perturb_replica`](crate::Pipeline::perturb_replica)). The
//! per-step verification must then name the replica and the step, and a multi-process
//! checkpoint must refuse the processes' disagreeing parts. No training run has a use for it:
//! the `pipetrain` binary reads the variable, a library run sets it with
//! [`Trainer::drift`](crate::trainer::Trainer::drift).

/// The variable of the test hook (see the module's documentation).
pub const DRIFT_VARIABLE: &str = "PIPETRAIN_TEST_DRIFT";

/// Which replica drifts, and after which optimizer step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drift {
    /// The replica whose weights change.
    pub replica: usize,
    /// The optimizer step (from 1) after which they change.
    pub step: u64,
}

impl Drift {
    /// The hook's value, `<replica>:<step>`, for a run of `replicas` replicas: a replica other
    /// than 0 and below `replicas`, a step of 1 or more.
    ///
    /// # Errors
    /// A malformed value, or a replica the run does not have, with the value and what fits.
    ///
    /// ```
    /// use pipetrain::trainer::Drift;
    /// assert_eq!(Drift::parse("1:2", 2), Ok(Drift { replica: 1, step: 2 }));
    /// assert!(Drift::parse("0:2", 2).unwrap_err().contains("a replica from 1 to 1"));
    /// ```
    pub fn parse(value: &str, replicas: usize) -> Result<Self, String> {
        let bad = || {
            format!(
                "{DRIFT_VARIABLE}={value}: expected <replica>:<step>, a replica from 1 to {} \
                 and a step of 1 or more (a test hook: unset it to train normally)",
                replicas.saturating_sub(1)
            )
        };
        let (replica, step) = value.split_once(':').ok_or_else(bad)?;
        let replica: usize = replica.trim().parse().map_err(|_| bad())?;
        let step: u64 = step.trim().parse().map_err(|_| bad())?;
        if replica == 0 || replica >= replicas || step == 0 {
            return Err(bad());
        }
        Ok(Self { replica, step })
    }
}
