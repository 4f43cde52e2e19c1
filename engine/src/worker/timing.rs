//! [`Timing`]: what a worker's clock measures per action.

/// What a worker's clock measures per action, and so the action times, the measured bubble,
/// the `tracing` spans (`--profile`) and tune's calibration.
///
/// On a CPU both are the same: an action's work is done when its call returns. A GPU runs
/// asynchronously: the host enqueues kernels and moves on, so a host clock times the enqueueing
/// and the first action that waits (often the optimizer step) absorbs the queue.
///
/// The default is [`Timing::Host`]: a step then waits for its device once, at its end.
/// [`Timing::Device`] is for a profile (`pipetrain train --profile` asks for it) or when asked.
///
/// ```
/// use pipetrain_engine::Timing;
/// assert_eq!(Timing::default(), Timing::Host);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Timing {
    /// Synchronise the worker's device after each compute action and before reading the clock,
    /// so each action's time is its device work (plus launch overhead). The cost, on a GPU: the
    /// device idles while the host enqueues the next action, and nothing of one action overlaps
    /// the next on that worker. On a CPU the synchronisation is a no-op.
    Device,
    /// Read the clock when the host returns from an action, without synchronising: the fastest
    /// run on a GPU, whose action times are then enqueue times. Each worker still synchronises
    /// once a step, after its last compute action (whose time then includes the device's
    /// queue), so that the weights are written when the step returns. The default.
    #[default]
    Host,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Timing::Device => "device",
            Timing::Host => "host",
        })
    }
}

impl std::str::FromStr for Timing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "device" => Ok(Timing::Device),
            "host" => Ok(Timing::Host),
            other => Err(format!("timing `{other}`: expected device or host")),
        }
    }
}
