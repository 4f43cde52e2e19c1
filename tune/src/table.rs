//! [`CostTable`]: what a model costs on a machine, measured once and cached — per layer and per
//! micro-batch size, and the engine's fixed costs.
//!
//! Kernels are not linear in rows (a micro-batch of 8 rows costs about twice per row what one
//! of 256 does on the CPU), so every layer is timed at every micro-batch size the search may
//! choose ([`RowsCosts`]), never scaled from one.

use serde::{Deserialize, Serialize};

use crate::error::{Result, TuneError};

/// One layer at one micro-batch size: times in seconds, bytes for one micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct LayerTimes {
    /// Forward.
    pub forward: f64,
    /// Whole backward of one micro-batch (`input + weight`; kept for reading the table, the
    /// search uses the halves: see [`backward`](crate::backward)).
    pub backward: f64,
    /// Input-gradient half (`I`); the whole backward for a layer that cannot split.
    pub input: f64,
    /// Weight-gradient half (`W`) of one micro-batch of these rows; 0 for a layer that cannot
    /// split.
    pub weight: f64,
    /// What a stashed micro-batch keeps of the layer for its backward: what its training
    /// forward keeps in the autodiff graph, its output and every value its ops saved
    /// ([`LayerCost::activation_bytes`](pipetrain_partitioner::LayerCost::activation_bytes)).
    pub activation_bytes: u64,
    /// The layer's output for one micro-batch: what the next chunk receives where a cut
    /// follows this layer, and a dense layer's output gradient (its `W` stack). Part of
    /// `activation_bytes`.
    #[serde(default)]
    pub output_bytes: u64,
    /// What the split backward holds from a micro-batch's `I` to its `W` (a dense layer's input
    /// and pre-activation gradient); 0 for a layer that cannot split.
    pub deferred_bytes: u64,
}

/// Every layer's [`LayerTimes`] at micro-batches of `rows` rows.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct RowsCosts {
    /// Rows per micro-batch.
    pub rows: usize,
    /// Per layer, in model order.
    pub layers: Vec<LayerTimes>,
}

/// The longest a cost of a table may be, in seconds: a layer's action on one micro-batch, or a
/// fixed cost, of hours is no measurement (1e308 once predicted 3.2e13 samples/s).
pub const MAX_SECONDS: f64 = 1e4;
/// The shortest a layer's forward, backward or input gradient may be, in seconds: less than a
/// nanosecond is no measurement either (0 once scaled a table's times by 71,025,000).
pub const MIN_SECONDS: f64 = 1e-9;
/// The largest slowdown of workers running at once.
pub const MAX_SLOWDOWN: f64 = 1e3;

/// A model's measured costs on one machine: the input of [`search`](crate::search).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct CostTable {
    /// Parameter bytes per layer.
    pub param_bytes: Vec<u64>,
    /// Optimizer-state bytes per layer, as the optimizer holds them (none given: 0).
    pub optimizer_bytes: Vec<u64>,
    /// Per micro-batch size in play.
    pub rows: Vec<RowsCosts>,
    /// Seconds for a message (activation or gradient) to reach the neighbouring stage.
    pub transfer: f64,
    /// Seconds per parameter byte of one stage's gradient all-reduce across replicas.
    pub all_reduce_per_byte: f64,
    /// Seconds per parameter byte of an optimizer step.
    pub optimizer_per_byte: f64,
    /// Seconds each compute action costs on a worker holding several chunks (interleaved,
    /// ZB-V), for handing the turn between them.
    pub turn: f64,
    /// Seconds a step costs beyond its plan (launch, sharding, collecting the reports).
    pub step: f64,
    /// How much slower each worker computes when `n` workers run at once (entry n − 1; they
    /// share the memory bandwidth and caches): 1.0 for one. Missing entries repeat the last.
    pub slowdown: Vec<f64>,
}

impl CostTable {
    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.param_bytes.len()
    }

    /// The layer times at `rows` rows per micro-batch.
    ///
    /// # Errors
    /// [`TuneError::MissingRows`] when the table was not measured at that size.
    pub fn at(&self, rows: usize) -> Result<&[LayerTimes]> {
        self.rows
            .iter()
            .find(|r| r.rows == rows)
            .map(|r| &r.layers[..])
            .ok_or_else(|| TuneError::MissingRows {
                rows,
                measured: self.rows.iter().map(|r| r.rows).collect(),
            })
    }

    /// Every time in the table multiplied by `factor` (a machine running `factor` times slower
    /// than when the table was measured); bytes unchanged.
    pub fn scale(&mut self, factor: f64) {
        for rows in &mut self.rows {
            for l in &mut rows.layers {
                l.forward *= factor;
                l.backward *= factor;
                l.input *= factor;
                l.weight *= factor;
            }
        }
        self.transfer *= factor;
        self.all_reduce_per_byte *= factor;
        self.optimizer_per_byte *= factor;
        self.turn *= factor;
        self.step *= factor;
    }

    /// The compute slowdown with `workers` running at once.
    pub fn slowdown(&self, workers: usize) -> f64 {
        let i = workers.saturating_sub(1);
        self.slowdown
            .get(i)
            .or(self.slowdown.last())
            .copied()
            .unwrap_or(1.0)
    }

    /// Checks that every row size has one entry per layer and every time is finite and
    /// non-negative.
    ///
    /// # Errors
    /// [`TuneError::BadTable`] naming the first bad entry.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(TuneError::BadTable { what });
        for r in &self.rows {
            if r.layers.len() != self.layers() {
                return bad(format!(
                    "{} layer entries at {} rows, {} parameter entries",
                    r.layers.len(),
                    r.rows,
                    self.layers()
                ));
            }
            for (i, l) in r.layers.iter().enumerate() {
                for (name, t) in [
                    ("forward", l.forward),
                    ("backward", l.backward),
                    ("input", l.input),
                    ("weight", l.weight),
                ] {
                    if !t.is_finite() || t < 0.0 {
                        return bad(format!("layer {i} {name} time {t} at {} rows", r.rows));
                    }
                }
            }
        }
        Ok(())
    }

    /// [`check`](Self::check), and that every value could have been measured: each layer's
    /// forward and backward within [`MIN_SECONDS`]..=[`MAX_SECONDS`], its input and weight
    /// gradients 0 or within that (both are shares of a measured total, and a share can be 0),
    /// the fixed costs finite within 0..=[`MAX_SECONDS`], the slowdowns above 0 and at most
    /// [`MAX_SLOWDOWN`]. A table read back from a file must pass it.
    ///
    /// # Errors
    /// [`TuneError::BadTable`] naming the first value that could not have been measured.
    pub fn check_measured(&self) -> Result<()> {
        self.check()?;
        let bad = |what: String| Err(TuneError::BadTable { what });
        let seconds = |t: f64, zero: bool| {
            (zero && t == 0.0) || (t.is_finite() && (MIN_SECONDS..=MAX_SECONDS).contains(&t))
        };
        for r in &self.rows {
            for (i, l) in r.layers.iter().enumerate() {
                for (name, t, zero) in [
                    ("forward", l.forward, false),
                    ("backward", l.backward, false),
                    // A layer's input gradient is what remains of its profiled backward once its
                    // estimated weight-gradient part is taken out, floored at 0: any layer's may
                    // be 0 (the first computes none; a small one's can round to nothing).
                    ("input-gradient", l.input, true),
                    ("weight-gradient", l.weight, true),
                ] {
                    if !seconds(t, zero) {
                        return bad(format!(
                            "layer {i}'s {name} time at {} rows is {} s, outside the \
                             {MIN_SECONDS:e}..={MAX_SECONDS:e} s a measurement gives",
                            r.rows,
                            short(t)
                        ));
                    }
                }
            }
        }
        for (name, t) in [
            ("transfer time", self.transfer),
            ("all-reduce time per byte", self.all_reduce_per_byte),
            ("optimizer time per byte", self.optimizer_per_byte),
            ("turn time", self.turn),
            ("step overhead", self.step),
        ] {
            if !(t.is_finite() && (0.0..=MAX_SECONDS).contains(&t)) {
                return bad(format!(
                    "the {name} is {} s, outside the 0..={MAX_SECONDS:e} s a measurement \
                     gives",
                    short(t)
                ));
            }
        }
        for (i, &s) in self.slowdown.iter().enumerate() {
            if !(s.is_finite() && s > 0.0 && s <= MAX_SLOWDOWN) {
                return bad(format!(
                    "the slowdown of {} workers at once is {}, outside the \
                     0..={MAX_SLOWDOWN:e} a measurement gives",
                    i + 1,
                    short(s)
                ));
            }
        }
        Ok(())
    }
}

/// `value` short: plain from 1e-3 to 1e6 (and 0), in exponent form beyond (`1e308`, not 309
/// digits).
fn short(value: f64) -> String {
    match value == 0.0 || (1e-3..1e6).contains(&value.abs()) {
        true => format!("{value}"),
        false => format!("{value:e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_multiplies_every_time_and_keeps_the_bytes() {
        let layer = LayerTimes {
            forward: 1.0,
            backward: 2.0,
            input: 1.5,
            weight: 0.5,
            activation_bytes: 7,
            output_bytes: 5,
            deferred_bytes: 9,
        };
        let mut table = CostTable {
            param_bytes: vec![3],
            rows: vec![RowsCosts {
                rows: 4,
                layers: vec![layer],
            }],
            step: 0.25,
            turn: 0.5,
            slowdown: vec![1.0, 1.2],
            ..CostTable::default()
        };
        table.scale(2.0);
        let l = table.at(4).unwrap()[0];
        assert_eq!(
            (l.forward, l.backward, l.input, l.weight),
            (2.0, 4.0, 3.0, 1.0)
        );
        assert_eq!(
            (l.activation_bytes, l.output_bytes, l.deferred_bytes),
            (7, 5, 9)
        );
        assert_eq!((table.step, table.turn), (0.5, 1.0));
        assert_eq!(table.slowdown(2), 1.2, "a ratio, not a time");
        assert!(table.at(8).is_err());
    }

    #[test]
    fn a_table_read_back_must_hold_what_a_measurement_gives() {
        let layer = LayerTimes {
            forward: 1e-3,
            backward: 2e-3,
            input: 1e-3,
            weight: 0.0,
            ..LayerTimes::default()
        };
        let table = |layer: LayerTimes, slowdown: f64| CostTable {
            param_bytes: vec![3],
            optimizer_bytes: vec![0],
            rows: vec![RowsCosts {
                rows: 4,
                layers: vec![layer],
            }],
            slowdown: vec![1.0, slowdown],
            ..CostTable::default()
        };
        assert!(table(layer, 1.2).check_measured().is_ok());
        for (bad, said) in [
            (
                table(
                    LayerTimes {
                        forward: 0.0,
                        ..layer
                    },
                    1.2,
                ),
                "forward time at 4 rows is 0 s",
            ),
            (
                table(
                    LayerTimes {
                        input: 1e308,
                        ..layer
                    },
                    1.2,
                ),
                "input-gradient time at 4 rows is 1e308 s",
            ),
            (
                table(layer, f64::NAN),
                "slowdown of 2 workers at once is NaN",
            ),
        ] {
            let err = bad.check_measured().unwrap_err().to_string();
            assert!(err.contains(said), "{err}");
        }
    }
}
