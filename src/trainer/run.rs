//! [`Trainer`]: the run loop. Steps the pipeline over a [`Source`]'s batches, with checkpoints,
//! metrics, a graceful stop on signals, resume, the gradient guard's verdicts and the per-step
//! verification, reporting what happens to a callback.
//!
//! One optimizer step, as the loop runs it:
//!
//! ```text
//! hold (test hook) → batches i·k .. i·k+k-1 → lr of the schedule → k × train_step
//!   → [loss summed over the processes] → [drift (test hook)] → verify against the single-device copy
//!   → Event::Step, metrics row → checkpoint if due or a signal arrived → stop or go on
//! ```
//!
//! A step that fails before any stage applied it (a non-finite gradient) leaves the weights of
//! the last good step: the checkpoint is written for that step, and the error says so
//! ([`RunError::AfterLastGood`](crate::RunError::AfterLastGood)).

use crate::RunError;
use std::time::{Duration, Instant};

use crate::trainer::checkpoints::{self, Resumed};
use crate::trainer::verify::{after_gathered, after_step};
use crate::trainer::{
    Drift, Event, Metrics, Mode, Outcome, Processes, Reference, Row, RunIdentity, Source,
    StepRecord, StepTotals, Stop, TrainerSettings,
};
use crate::{Batch, Error, LastGood, Layer, Pipeline, StepReport};

/// The run loop over a pipeline. A library user's whole training run:
///
/// ```no_run
/// # use pipetrain::{Batch, Pipeline, Layer};
/// # fn run<L: Layer>(pipeline: &mut Pipeline<L>, batch: impl Fn(u64) -> pipetrain::Result<Batch>) -> pipetrain::Result<()> {
/// use pipetrain::trainer::{Trainer, TrainerSettings};
///
/// let settings = TrainerSettings {
///     checkpoint: Some("run.safetensors".into()),
///     checkpoint_every: 10,
///     metrics: Some("run.csv".into()),
///     ..TrainerSettings::new(100)
/// };
/// let outcome = Trainer::new(pipeline, &batch, settings).run()?;
/// println!("{} steps, median {:.0} samples/s", outcome.step, outcome.median_samples_per_sec);
/// # Ok(()) }
/// ```
pub struct Trainer<'a, L: Layer> {
    pipeline: &'a mut Pipeline<L>,
    source: &'a dyn Source,
    settings: TrainerSettings,
    identity: RunIdentity,
    stop: Option<Stop>,
    processes: Option<&'a dyn Processes<L>>,
    verify: Option<(Mode, Option<Reference<L>>)>,
    drift: Option<Drift>,
    on_event: OnEvent<'a, L>,
}

/// The callback of [`Trainer::on_event`].
type OnEvent<'a, L> = Box<dyn FnMut(Event<'_, L>) + 'a>;

impl<'a, L: Layer> Trainer<'a, L> {
    /// A run of `pipeline` over `source`'s batches as `settings` say. Each optimizer step takes
    /// the pipeline's accumulation of batches.
    pub fn new(
        pipeline: &'a mut Pipeline<L>,
        source: &'a dyn Source,
        settings: TrainerSettings,
    ) -> Self {
        Self {
            pipeline,
            source,
            settings,
            identity: RunIdentity::new(),
            stop: None,
            processes: None,
            verify: None,
            drift: None,
            on_event: Box::new(|_| {}),
        }
    }

    /// Stores `identity` in every checkpoint, and resumes only a checkpoint of the same.
    pub fn identity(mut self, identity: RunIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// Stops gracefully when `stop` reports a signal: the step finishes, the checkpoint is
    /// written, and the run returns with [`Outcome::stopped`].
    pub fn stop(mut self, stop: Stop) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Runs this process's share of a multi-process run.
    pub fn processes(mut self, processes: &'a dyn Processes<L>) -> Self {
        self.processes = Some(processes);
        self
    }

    /// Verifies the pipeline in `mode` against `reference`, a single-device copy trained on the
    /// same batches (held by the leader only: under [`processes`](Self::processes) every
    /// process takes part in gathering the model it compares).
    pub fn verify(mut self, mode: Mode, reference: Option<Reference<L>>) -> Self {
        self.verify = Some((mode, reference));
        self
    }

    /// The test hook of [`Drift`]: after optimizer step `drift.step`, replica `drift.replica`'s
    /// weights leave the others'. No training run has a use for it.
    #[doc(hidden)]
    pub fn drift(mut self, drift: Drift) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Calls `on_event` with every [`Event`] of the run, as it happens.
    pub fn on_event(mut self, on_event: impl FnMut(Event<'_, L>) + 'a) -> Self {
        self.on_event = Box::new(on_event);
        self
    }

    /// Runs the loop to the last step, or until a signal stops it.
    ///
    /// # Errors
    /// A step fails ([`RunError::Step`](crate::RunError::Step), [`RunError::NonFiniteLoss`](crate::RunError::NonFiniteLoss), [`RunError::AfterLastGood`](crate::RunError::AfterLastGood)); the
    /// checkpoint to resume does not fit this run; a batch, the checkpoint or the metrics file
    /// cannot be read or written. The metrics file keeps every finished step either way.
    pub fn run(mut self) -> Result<Outcome<L>, Error> {
        let leader = self.processes.is_none_or(|p| p.is_leader());
        let mut metrics = match (&self.settings.metrics, leader) {
            (Some(path), true) => Some(Metrics::create(path, self.settings.resume.is_some())?),
            _ => None,
        };
        let result = self.steps(&mut metrics);
        if let Some(warning) = metrics.and_then(Metrics::finish) {
            (self.on_event)(Event::Warning(&warning));
        }
        result
    }

    /// The loop, writing `metrics`.
    fn steps(&mut self, metrics: &mut Option<Metrics>) -> Result<Outcome<L>, Error> {
        let k = self.pipeline.accumulation().max(1) as u64;
        let steps = self.settings.steps;
        let first_step = self.resume()?;
        if let Some(m) = metrics.as_mut() {
            // A resumed run's rows must fit the earlier run's columns: refused before any step.
            m.check_columns(self.pipeline.stages())?;
        }
        let mut tally = Tally::new(first_step);
        for step in first_step..steps {
            if let Some(stop) = &self.stop {
                stop.hold(step + 1, &mut *self.on_event);
            }
            let batches: Vec<Batch> = (0..k)
                .map(|j| self.source.batch(step * k + j))
                .collect::<Result<_, _>>()?;
            let lr = self
                .settings
                .lr_schedule
                .at(self.settings.learning_rate, step);
            self.pipeline.set_learning_rate(lr).map_err(|e| {
                Error::Run(RunError::Step {
                    step: step + 1,
                    source: Box::new(e),
                })
            })?;
            let mut totals = StepTotals::default();
            let mut report = None;
            for batch in &batches {
                let mut r = match step_result(step + 1, self.pipeline.train_step(batch)) {
                    Ok(r) => r,
                    Err((error, true)) => return Err(self.last_good(step, &tally, error)),
                    Err((error, false)) => return Err(error),
                };
                if let Some(p) = self.processes {
                    // Each process has its own last stages' share of the loss.
                    r.loss = p.total_loss(r.loss)?;
                }
                totals.add(&r, k as usize);
                report = Some(r);
            }
            let report = report.expect("at least one batch per step");
            if step == first_step {
                (self.on_event)(Event::FirstStep {
                    pipeline: self.pipeline,
                });
            }
            if let Some(drift) = self.drift.filter(|d| d.step == step + 1) {
                self.pipeline.perturb_replica(drift.replica);
            }
            self.verify_step(batches, lr, step + 1)?;
            let samples_per_sec = totals.samples as f64 / totals.wall.as_secs_f64().max(1e-12);
            tally.skipped += u64::from(totals.skipped);
            let record = StepRecord {
                step: step + 1,
                steps,
                lr,
                totals,
                samples_per_sec,
                skipped: tally.skipped,
                report,
            };
            (self.on_event)(Event::Step(&record));
            if let Some(m) = metrics.as_mut() {
                m.write(&Row::of(&record))?;
                for warning in m.take_warnings() {
                    (self.on_event)(Event::Warning(&warning));
                }
            }
            tally.add(record, steps);
            // A signal stops the run here, after a whole step, saving it first.
            // Under several processes, every one stops after the same step (`agree_stop`).
            let local = self.stop.as_ref().and_then(Stop::requested);
            let stopping = match self.processes {
                Some(p) => p.agree_stop(local)?,
                None => local,
            };
            if self.settings.checkpoint_due(step + 1) || stopping.is_some() {
                self.save(step + 1, k)?;
                tally.saved = Some(step + 1);
                // The rows of the checkpoint survive a crash (the last ones are put in place
                // when the run ends).
                let published = self.settings.checkpoint.is_some() && step + 1 < steps;
                if let Some(m) = metrics.as_mut().filter(|_| published && stopping.is_none()) {
                    m.publish();
                    for warning in m.take_warnings() {
                        (self.on_event)(Event::Warning(&warning));
                    }
                }
            }
            if stopping.is_some() {
                return Ok(tally.outcome(step + 1, stopping, None, self.reference()));
            }
            if let Some(stop) = &self.stop {
                // A step completed: a signal now lets the next one finish and saves it.
                stop.graceful();
            }
        }
        // Under several processes: the whole trained model on the leader.
        let gathered = match self.processes {
            Some(p) => p.gather_model(self.pipeline)?,
            None => None,
        };
        Ok(tally.outcome(steps, None, gathered, self.reference()))
    }

    /// Resumes the checkpoint of the settings, if any; returns the step to start from.
    fn resume(&mut self) -> Result<u64, Error> {
        let Some(path) = self.settings.resume.clone() else {
            return Ok(0);
        };
        let read = self
            .processes
            .map(|p| p.read_checkpoint(&path))
            .transpose()?;
        let steps = self.settings.steps;
        let Resumed { step, position } =
            checkpoints::resume(self.pipeline, &path, read, &self.identity, steps)?;
        (self.on_event)(Event::Resumed {
            path: &path,
            step,
            steps,
            position: position.as_deref(),
        });
        let k = self.pipeline.accumulation().max(1) as u64;
        let expected = self.source.position(step * k);
        match position {
            Some(saved) if saved != expected => Err(Error::Run(RunError::ResumeData {
                path,
                saved,
                expected,
                step,
            })),
            _ => Ok(step),
        }
    }

    /// Writes the checkpoint of the settings (if any) after `step`, `k` batches a step.
    fn save(&mut self, step: u64, k: u64) -> Result<(), Error> {
        let Some(path) = self.settings.checkpoint.clone() else {
            return Ok(());
        };
        let position = self.source.position(step * k);
        checkpoints::save(
            self.pipeline,
            self.processes,
            &path,
            &self.identity,
            position,
        )?;
        (self.on_event)(Event::Checkpoint { path: &path, step });
        Ok(())
    }

    /// `error`, a failure of step `step + 1` that no stage applied, with what became of the
    /// checkpoint: written for `step`, the last good one, in a one-process run.
    fn last_good(&mut self, step: u64, tally: &Tally, error: Error) -> Error {
        let Some(path) = self.settings.checkpoint.clone() else {
            return error;
        };
        let saved = if tally.saved == Some(step) {
            LastGood::Held { path, step }
        } else if step == tally.first_step {
            LastGood::NoStep { path }
        } else if self.processes.is_some() {
            LastGood::MultiProcess { path }
        } else {
            let k = self.pipeline.accumulation().max(1) as u64;
            let position = self.source.position(step * k);
            match checkpoints::save(self.pipeline, None, &path, &self.identity, position) {
                Ok(()) => {
                    (self.on_event)(Event::Checkpoint { path: &path, step });
                    LastGood::Written { path, step }
                }
                Err(e) => LastGood::Failed {
                    path,
                    step,
                    error: e.to_string(),
                },
            }
        };
        Error::Run(RunError::AfterLastGood {
            source: Box::new(error),
            saved,
        })
    }

    /// The per-step verification of `step` (from 1), trained on `batches` at `lr`: the copy
    /// takes the same step and is compared with the pipeline after it. Under several processes
    /// every process takes part in comparing the replicas and in gathering the model (an
    /// end-to-end check of such a run compares the gathered model once, at the end).
    fn verify_step(&mut self, batches: Vec<Batch>, lr: f64, step: u64) -> Result<(), Error> {
        let Some((mode, _)) = &self.verify else {
            return Ok(());
        };
        let replicas = self.pipeline.replicas();
        let (after, apart) = match (mode, self.processes) {
            (Mode::EndToEnd, Some(p)) => (None, p.replicas_apart(self.pipeline)?),
            (Mode::PerStep, Some(p)) => {
                let apart = p.replicas_apart(self.pipeline)?;
                let model = p.gather_model(self.pipeline)?;
                (model.map(|m| after_gathered(m, replicas, apart)), apart)
            }
            (_, None) => (Some(after_step(self.pipeline)), None),
        };
        if let Some((_, Some(reference))) = &mut self.verify {
            // `after` carries `apart` where there is one; an end-to-end check of a multi-process
            // run has none.
            reference.replicas_checked(step, apart);
            reference.step(batches, lr, after, step)?;
        }
        Ok(())
    }

    /// The verification's copy, handed back at the end.
    fn reference(&mut self) -> Option<Reference<L>> {
        self.verify.take().and_then(|(_, r)| r)
    }
}

/// What the loop keeps over the steps.
struct Tally {
    first_step: u64,
    started: Instant,
    throughput: Vec<f64>,
    losses: Vec<f64>,
    rates: Vec<f64>,
    last: Option<StepReport>,
    /// Steps skipped so far.
    skipped: u64,
    /// The step of the last checkpoint written.
    saved: Option<u64>,
    /// Wall time of the run's first step.
    first_wall: Option<Duration>,
}

impl Tally {
    fn new(first_step: u64) -> Self {
        Self {
            first_step,
            started: Instant::now(),
            throughput: Vec::new(),
            losses: Vec::new(),
            rates: Vec::new(),
            last: None,
            skipped: 0,
            saved: None,
            first_wall: None,
        }
    }

    /// Adds a finished step of a run of `steps`.
    fn add(&mut self, record: StepRecord, steps: u64) {
        // The first step warms up (its first allocations; the setup was resolved before it): left
        // out of the median unless it is the only one.
        if record.step > self.first_step + 1 || steps == self.first_step + 1 {
            self.throughput.push(record.samples_per_sec);
        }
        if record.step == self.first_step + 1 {
            self.first_wall = Some(record.totals.wall);
        }
        self.losses.push(record.totals.loss);
        self.rates.push(record.lr);
        self.last = Some(record.report);
    }

    fn outcome<L: Layer>(
        mut self,
        step: u64,
        stopped: Option<crate::trainer::Signal>,
        gathered: Option<Vec<L>>,
        reference: Option<Reference<L>>,
    ) -> Outcome<L> {
        self.throughput.sort_by(f64::total_cmp);
        let median = self
            .throughput
            .get(self.throughput.len() / 2)
            .copied()
            .unwrap_or(0.0);
        Outcome {
            first_step: self.first_step,
            step,
            stopped,
            last: self.last,
            losses: self.losses,
            rates: self.rates,
            median_samples_per_sec: median,
            elapsed: self.started.elapsed(),
            first_step_time: self.first_wall,
            gathered,
            reference,
        }
    }
}

/// A step's result with the step (from 1) named in its error, and whether the weights are
/// those of the last good step (the step stopped before any stage applied it). A step whose
/// loss is NaN or infinite fails too, unless the guard skipped it: no later step or checkpoint
/// sees what it did.
fn step_result(step: u64, result: Result<StepReport, Error>) -> Result<StepReport, (Error, bool)> {
    let report = result.map_err(|e| {
        let intact = weights_intact(&e);
        (
            Error::Run(RunError::Step {
                step,
                source: Box::new(e),
            }),
            intact,
        )
    })?;
    if !report.loss.is_finite() && !report.skipped {
        return Err((
            Error::Run(RunError::NonFiniteLoss {
                step,
                loss: report.loss,
            }),
            false,
        ));
    }
    Ok(report)
}

/// Whether `error` stopped a step before any stage applied it (a non-finite gradient, found
/// before the optimizer step): the weights are still those of the last good step.
pub fn weights_intact(error: &Error) -> bool {
    use crate::engine::EngineError;
    match error {
        Error::Engine(EngineError::StageFailed { source, .. }) => {
            matches!(**source, EngineError::NonFinite { .. })
        }
        _ => false,
    }
}
