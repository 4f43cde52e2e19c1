//! The layout's products, in one place: how many workers a `replicas × stages` pipeline runs,
//! how many micro-batches a step cuts its batch into, and how many rows each gets. The facade's
//! setup, the `pipetrain` binary and `bench` read them from here rather than multiplying the
//! counts themselves, and the batch rule ([`Layout::check_batch`]) lives here too.

use crate::error::{EngineError, Result};

/// `replicas × stages` workers streaming `micro_batches` micro-batches each: the counts a
/// pipeline is laid out by, and what follows from them.
///
/// ```
/// use pipetrain_engine::Layout;
/// let layout = Layout::new(3, 2, 8);
/// assert_eq!(layout.workers(), 6); // 3 replicas × 2 stages
/// assert_eq!(layout.parts(), 24); // 3 replicas × 8 micro-batches
/// assert_eq!(layout.rows_per_part(96), 4);
/// assert!(layout.check_batch(24).is_ok());
/// assert!(layout.check_batch(16).is_err()); // 16 rows for 24 micro-batches
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    replicas: usize,
    stages: usize,
    micro_batches: usize,
}

impl Layout {
    /// `replicas` data-parallel copies of a `stages`-stage pipeline, each step's batch cut into
    /// `micro_batches` micro-batches per replica. Any counts: [`check_batch`](Self::check_batch)
    /// and the builder refuse the ones that cannot run.
    pub fn new(replicas: usize, stages: usize, micro_batches: usize) -> Self {
        Self {
            replicas,
            stages,
            micro_batches,
        }
    }

    /// Data-parallel replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Stages per replica (pipeline ranks: with several chunks per rank, model stages are more).
    pub fn stages(&self) -> usize {
        self.stages
    }

    /// Micro-batches per replica per step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// Workers of the whole world: `replicas × stages`.
    pub fn workers(&self) -> usize {
        self.replicas * self.stages
    }

    /// Micro-batches a step cuts its batch into, over every replica: `replicas ×
    /// micro_batches`.
    pub fn parts(&self) -> usize {
        self.replicas * self.micro_batches
    }

    /// Rows of the smallest micro-batch of a `rows`-row batch (the cut's row counts differ by
    /// at most one, the first ones longer); 0 when there are no parts.
    pub fn rows_per_part(&self, rows: usize) -> usize {
        rows.checked_div(self.parts()).unwrap_or(0)
    }

    /// The layout a batch of `rows` rows can fill: this one when every micro-batch gets a row,
    /// else replica 0's micro-batches alone, else one micro-batch on replica 0. Inference cuts a
    /// small batch so, and a build measures its sample micro-batch on it.
    ///
    /// ```
    /// use pipetrain_engine::Layout;
    /// let layout = Layout::new(2, 3, 4);
    /// assert_eq!(layout.fitting(8), layout);
    /// assert_eq!(layout.fitting(5), Layout::new(1, 3, 4));
    /// assert_eq!(layout.fitting(3), Layout::new(1, 3, 1));
    /// ```
    pub fn fitting(&self, rows: usize) -> Layout {
        let one = |micro_batches| Layout::new(1, self.stages, micro_batches);
        [*self, one(self.micro_batches)]
            .into_iter()
            .find(|layout| layout.check_batch(rows).is_ok())
            .unwrap_or(one(1))
    }

    /// Whether a batch of `rows` rows splits into [`parts`](Self::parts) micro-batches of at
    /// least one row: the one batch rule, which [`Batch::shard`](crate::Batch::shard) applies
    /// at each step and a front end may ask before it starts (the `pipetrain` binary checks
    /// `--batch` with it).
    ///
    /// # Errors
    /// [`EngineError::BatchSplit`], whose remedy is the least batch that splits, or as many
    /// micro-batches as the batch has rows per replica.
    pub fn check_batch(&self, rows: usize) -> Result<()> {
        if self.parts() == 0 || rows < self.parts() {
            return Err(EngineError::BatchSplit {
                rows,
                replicas: self.replicas,
                micro_batches: self.micro_batches,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

    use super::Layout;

    /// The remedy is computed from the values (issue 38), here and so in every front end: the
    /// least batch, or as many micro-batches as each replica has rows.
    #[test]
    fn a_batch_that_does_not_split_names_the_batch_and_the_micro_batches_that_would() {
        let refused = Layout::new(3, 1, 8).check_batch(16).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::one_of([
                Remedy::set(Setting::Batch, Value::Count(24)),
                Remedy::set(Setting::MicroBatches, Value::Count(5)),
            ]))
        );
        // Fewer rows than replicas: no micro-batch count fits, only a larger batch.
        let refused = Layout::new(3, 1, 1).check_batch(2).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::set(Setting::Batch, Value::Count(3)))
        );
        assert!(Layout::new(3, 1, 8).check_batch(24).is_ok());
        // No micro-batch at all: at least one, not a batch of 0 rows.
        let refused = Layout::new(1, 1, 0).check_batch(16).unwrap_err();
        assert_eq!(
            refused.remedy(),
            Some(Remedy::set(Setting::MicroBatches, Value::Count(1)))
        );
    }

    #[test]
    fn the_products_follow_from_the_counts() {
        let layout = Layout::new(2, 3, 4);
        assert_eq!((layout.workers(), layout.parts()), (6, 8));
        assert_eq!(layout.rows_per_part(17), 2);
        assert_eq!(Layout::new(2, 3, 0).rows_per_part(17), 0);
    }
}
