//! A tune session's results as text: the top of the ranking ([`RankingTable`]), the trial runs
//! measured beside their predictions and the winner ([`TuneReport`]'s `Display`), and how busy
//! other processes kept the machine meanwhile ([`Busy`]).

use std::fmt;

use pipetrain_tune::{Candidate, Ranking};

#[cfg(feature = "commands")]
use super::TuneReport;
use crate::memory::Bytes;

/// The top of a [`Ranking`] as text: how many configurations were ranked, predicted like a
/// ranked one or left out; then rank, predicted samples/s, bubble and peak memory per worker of
/// the first `top`, each with its settings in the caller's words; then the first left out.
pub struct RankingTable<'a> {
    /// The ranking.
    pub ranking: &'a Ranking,
    /// How many candidates to list.
    pub top: usize,
    /// The heading of the settings column.
    pub heading: &'a str,
    /// A candidate's settings, as the caller's user writes them (the binary: its flags).
    pub settings: &'a dyn Fn(&Candidate) -> String,
}

impl fmt::Display for RankingTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.ranking;
        writeln!(
            f,
            "{} configurations: {} ranked, {} predicted like a ranked one, {} left out",
            r.candidates.len() + r.infeasible.len() + r.equivalent.len(),
            r.candidates.len(),
            r.equivalent.len(),
            r.infeasible.len()
        )?;
        if r.candidates.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "{:>4}  {:>12}  {:>7}  {:>16}  {}",
            "rank", "predicted/s", "bubble", "peak mem/worker", self.heading
        )?;
        for (i, c) in r.candidates.iter().take(self.top).enumerate() {
            writeln!(
                f,
                "{:>4}  {:>12.1}  {:>6.1}%  {:>16}  {}",
                i + 1,
                c.samples_per_sec,
                100.0 * c.bubble,
                Bytes(c.peak_memory()).to_string(),
                (self.settings)(c)
            )?;
        }
        for i in r.infeasible.iter().take(3) {
            writeln!(f, "left out: {}: {}", i.knobs, i.reason)?;
        }
        Ok(())
    }
}

/// ` (other processes kept N cores busy meanwhile)`, or nothing where that is not known (no
/// `/proc`).
#[derive(Clone, Copy, Debug)]
pub struct Busy(pub Option<f64>);

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(cores) => write!(f, " (other processes kept {cores:.2} cores busy meanwhile)"),
            None => Ok(()),
        }
    }
}

#[cfg(feature = "commands")]
impl fmt::Display for TuneReport {
    /// Measured beside predicted for every trial run, rank by rank, and the winner; nothing
    /// without trial runs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.trials.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "{:>4}  {:>12}  {:>11}  {:>9}  {:>16}  {:>16}",
            "rank", "predicted/s", "measured/s", "meas/pred", "predicted peak", "measured peak"
        )?;
        let ranked = self.ranking.candidates.iter().zip(&self.trials);
        for (i, (c, t)) in ranked.enumerate() {
            writeln!(
                f,
                "{:>4}  {:>12.1}  {:>11.1}  {:>9.2}  {:>16}  {:>16}",
                i + 1,
                c.samples_per_sec,
                t.samples_per_sec,
                t.samples_per_sec / c.samples_per_sec,
                Bytes(c.peak_memory()).to_string(),
                Bytes(t.peak_memory).to_string()
            )?;
        }
        writeln!(f, "runs done{}", Busy(self.trials_others))?;
        let rate = self.trials[self.winner].samples_per_sec;
        writeln!(
            f,
            "winner: rank {}, {} ({rate:.1} samples/s measured); the top prediction measured \
             {:.1}% of it",
            self.winner + 1,
            self.winner().knobs,
            100.0 * self.trials[0].samples_per_sec / rate
        )
    }
}
