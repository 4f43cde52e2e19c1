//! [`Remedy`]: what would fix an error, as data, so that each front end writes it in its own
//! words: the library as a builder call (`.stages(1)`), the command line as a flag
//! (`--stages 1`).
//!
//! ## Design
//!
//! An error of a crate below the front ends states facts only: its `Display` names the values
//! and what is wrong with them, never a flag or a builder call. What would fix it is a
//! [`Remedy`] value, returned by its [`Remedied::remedy`] (an error that wraps another asks the
//! inner one). A front end joins the two in its own [`Style`] with [`Remedied::explain`]:
//! `{facts}; {remedy}`. The facade (`pipetrain::Error`) renders builder calls, and its
//! `Display` is that rendering; the `pipetrain` binary renders flags, with its flag table.
//!
//! ```
//! use pipetrain_schedules::remedy::{Plain, Remedy, Setting, Value};
//!
//! let fix = Remedy::one_of([
//!     Remedy::set(Setting::MicroBatches, Value::Count(4)),
//!     Remedy::set(Setting::MicroBatches, Value::Count(8)),
//! ]);
//! assert_eq!(fix.render(&Plain), "use micro_batches = 4 or micro_batches = 8");
//! ```

use std::borrow::Cow;
use std::fmt;

/// A setting a remedy changes: one of the pipeline's, an optimizer's, a checkpoint load's, a
/// multi-process launch's, or a run's model and data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Setting {
    /// Pipeline stages.
    Stages,
    /// Layers per stage.
    Balance,
    /// Micro-batches per step.
    MicroBatches,
    /// Data-parallel replicas.
    Replicas,
    /// Batches accumulated per optimizer step.
    Accumulation,
    /// The ZeRO stage.
    Zero,
    /// The schedule (GPipe, 1F1B, …).
    Schedule,
    /// Chunks per rank of the interleaved schedule.
    VirtualStages,
    /// The learning rate.
    LearningRate,
    /// Compute threads per worker.
    ThreadsPerWorker,
    /// The memory budget per worker, in bytes.
    MemoryBudget,
    /// The gradient-norm clip.
    ClipGradNorm,
    /// Skipping steps whose gradients are not finite.
    SkipNonFinite,
    /// Re-materialization of activations.
    Remat,
    /// Micro-batches per weight-gradient group of the split backward.
    WeightGroup,
    /// Starting from a weights file (only the weights, no optimizer state).
    InitFrom,
    /// Rules that rename a weights file's tensors before they are matched.
    Rename,
    /// How long a multi-process run waits for a peer, in seconds.
    CommTimeout,
    /// Workers (threads) per process of a multi-process run.
    WorkersPerProcess,
    /// Processes of a multi-process run.
    Processes,
    /// Workers a configuration search may use.
    Workers,
    /// Rows per step (the mini-batch).
    Batch,
    /// Bytes per all-reduce bucket.
    BucketBytes,
    /// The model trained (its name: `mlp`, `gpt`).
    Model,
    /// Classes of a classifier (the width of its head).
    Classes,
    /// Token ids of a language model (its vocabulary size).
    Vocab,
    /// Tokens per window of a language model.
    Context,
    /// The Hugging Face tokenizer that tokenizes text data.
    Tokenizer,
    /// The fraction of a data set held out from training.
    HeldOut,
    /// Training on inputs with NaN or infinite values.
    AllowNonFinite,
    /// Optimizer steps of a run (the total, counting those of a resumed run).
    Steps,
    /// The run's data (its spec: `synthetic`, `text:FILE`, …).
    Data,
    /// The checkpoint a run writes.
    Checkpoint,
    /// The checkpoint a run resumes.
    Resume,
    /// The metrics file of a run.
    Metrics,
    /// The chrome trace of a run.
    Profile,
    /// The loss plot of a run.
    Plot,
    /// The learning-rate schedule of a run (`constant`, `cosine`, …).
    LrSchedule,
    /// Keeping each epoch's short last batch of a data set.
    KeepLast,
    /// Visiting a data set in its file order (no shuffle).
    FileOrder,
    /// What f32 matmuls compute in on a GPU (`fp32`, `tf32`).
    MatmulPrecision,
    /// The dtype the layers compute in (`fp32`, `bf16`).
    Precision,
    /// Measuring a model's costs again, rather than reading the cached ones.
    Remeasure,
}

impl Setting {
    /// Its name in plain words, lower case with underscores: `micro_batches`.
    pub const fn key(self) -> &'static str {
        match self {
            Setting::Stages => "stages",
            Setting::Balance => "balance",
            Setting::MicroBatches => "micro_batches",
            Setting::Replicas => "replicas",
            Setting::Accumulation => "accumulation",
            Setting::Zero => "zero",
            Setting::Schedule => "schedule",
            Setting::VirtualStages => "virtual_stages",
            Setting::LearningRate => "learning_rate",
            Setting::ThreadsPerWorker => "threads_per_worker",
            Setting::MemoryBudget => "memory_budget",
            Setting::ClipGradNorm => "clip_grad_norm",
            Setting::SkipNonFinite => "skip_nonfinite",
            Setting::Remat => "remat",
            Setting::WeightGroup => "weight_group",
            Setting::InitFrom => "init_from",
            Setting::Rename => "rename",
            Setting::CommTimeout => "comm_timeout",
            Setting::WorkersPerProcess => "workers_per_process",
            Setting::Processes => "processes",
            Setting::Workers => "workers",
            Setting::Batch => "batch",
            Setting::BucketBytes => "bucket_bytes",
            Setting::Model => "model",
            Setting::Classes => "classes",
            Setting::Vocab => "vocab",
            Setting::Context => "context",
            Setting::Tokenizer => "tokenizer",
            Setting::HeldOut => "held_out",
            Setting::AllowNonFinite => "allow_nonfinite",
            Setting::Steps => "steps",
            Setting::Data => "data",
            Setting::Checkpoint => "checkpoint",
            Setting::Resume => "resume",
            Setting::Metrics => "metrics",
            Setting::Profile => "profile",
            Setting::Plot => "plot",
            Setting::LrSchedule => "lr_schedule",
            Setting::KeepLast => "keep_last",
            Setting::FileOrder => "file_order",
            Setting::MatmulPrecision => "matmul_precision",
            Setting::Precision => "precision",
            Setting::Remeasure => "remeasure",
        }
    }

    /// Its name in a sentence: `micro-batches`, `learning rate`.
    pub const fn words(self) -> &'static str {
        match self {
            Setting::Stages => "stages",
            Setting::Balance => "balance",
            Setting::MicroBatches => "micro-batches",
            Setting::Replicas => "replicas",
            Setting::Accumulation => "accumulated batches",
            Setting::Zero => "ZeRO stage",
            Setting::Schedule => "schedule",
            Setting::VirtualStages => "virtual stages",
            Setting::LearningRate => "learning rate",
            Setting::ThreadsPerWorker => "threads per worker",
            Setting::MemoryBudget => "memory budget",
            Setting::ClipGradNorm => "gradient-norm clip",
            Setting::SkipNonFinite => "skipping of non-finite steps",
            Setting::Remat => "re-materialization",
            Setting::WeightGroup => "weight group",
            Setting::InitFrom => "initial weights",
            Setting::Rename => "rename rules",
            Setting::CommTimeout => "communication timeout",
            Setting::WorkersPerProcess => "workers per process",
            Setting::Processes => "processes",
            Setting::Workers => "workers",
            Setting::Batch => "batch",
            Setting::BucketBytes => "bucket size",
            Setting::Vocab => "vocabulary size",
            Setting::Context => "context length",
            Setting::Tokenizer => "tokenizer",
            Setting::HeldOut => "held-out fraction",
            Setting::AllowNonFinite => "training on non-finite inputs",
            Setting::LrSchedule => "learning-rate schedule",
            Setting::KeepLast => "keeping the short last batch",
            Setting::FileOrder => "file order",
            Setting::MatmulPrecision => "matmul precision",
            Setting::Precision => "precision",
            Setting::Remeasure => "measuring the costs again",
            Setting::Model
            | Setting::Classes
            | Setting::Steps
            | Setting::Data
            | Setting::Checkpoint
            | Setting::Resume
            | Setting::Metrics
            | Setting::Profile
            | Setting::Plot => self.key(),
        }
    }
}

/// The value a remedy gives its setting.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Value {
    /// A switch turned on: it takes no value (`.skip_nonfinite()`, `--skip-nonfinite`).
    On,
    /// A count: stages, micro-batches, replicas, threads, …
    Count(usize),
    /// A size in bytes.
    Bytes(u64),
    /// A real number: a learning rate, a norm, seconds.
    Number(f64),
    /// Counts in order: layers per stage.
    Counts(Vec<usize>),
    /// One of the setting's named modes, in the lower-case words of a plan or a config file:
    /// `always` (re-materialization), `1f1b` (schedule).
    Mode(Cow<'static, str>),
    /// A value the user chooses: the remedy names the setting only.
    Any,
    /// A larger value than the one given.
    Larger,
    /// A smaller value than the one given.
    Smaller,
}

impl Value {
    /// One of a setting's named modes: `Value::mode("always")`.
    pub const fn mode(name: &'static str) -> Self {
        Value::Mode(Cow::Borrowed(name))
    }
}

impl fmt::Display for Value {
    /// The value alone, in plain words: `4`, `0.5`, `2, 1`, `always`; empty for
    /// [`Value::On`], `…` for [`Value::Any`], `larger` and `smaller`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::On => Ok(()),
            Value::Count(n) => write!(f, "{n}"),
            Value::Bytes(n) => write!(f, "{n}"),
            Value::Number(x) => write!(f, "{x:?}"),
            Value::Counts(counts) => {
                let text: Vec<String> = counts.iter().map(ToString::to_string).collect();
                f.write_str(&text.join(", "))
            }
            Value::Mode(mode) => f.write_str(mode),
            Value::Any => f.write_str("…"),
            Value::Larger => f.write_str("larger"),
            Value::Smaller => f.write_str("smaller"),
        }
    }
}

/// What would fix an error.
///
/// Serializable, so that a process of a multi-process run can tell the others its failure's
/// remedy, for each to word in its own front end's style.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Remedy {
    /// Give `setting` the value `value`.
    Set {
        /// The setting to change.
        setting: Setting,
        /// Its new value.
        value: Value,
    },
    /// Any one of these.
    OneOf(Vec<Remedy>),
    /// All of these together.
    AllOf(Vec<Remedy>),
    /// A fix that no setting expresses, as a sentence without a flag or a builder call.
    Sentence(Cow<'static, str>),
    /// Leave `setting` unset: it was given where it does nothing.
    Drop(Setting),
}

impl Remedy {
    /// Give `setting` the value `value`.
    pub fn set(setting: Setting, value: Value) -> Self {
        Remedy::Set { setting, value }
    }

    /// Any one of `remedies`; a single one stands alone.
    pub fn one_of(remedies: impl IntoIterator<Item = Remedy>) -> Self {
        let mut all: Vec<Remedy> = remedies.into_iter().collect();
        match all.len() {
            1 => all.remove(0),
            _ => Remedy::OneOf(all),
        }
    }

    /// All of `remedies` together.
    pub fn all_of(remedies: impl IntoIterator<Item = Remedy>) -> Self {
        Remedy::AllOf(remedies.into_iter().collect())
    }

    /// A fix that no setting expresses.
    pub fn sentence(text: impl Into<Cow<'static, str>>) -> Self {
        Remedy::Sentence(text.into())
    }

    /// The remedy in `style`'s words, starting with its verb: `use .stages(1)`,
    /// `use --micro-batches 4 or --micro-batches 8`, `raise --comm-timeout`.
    pub fn render(&self, style: &dyn Style) -> String {
        match self {
            Remedy::OneOf(all) if all.iter().all(|r| r.setting().is_some()) => {
                let phrases: Vec<String> = all.iter().map(|r| r.phrase(style)).collect();
                format!("use {}", alternatives(&phrases))
            }
            // Settings next to each other share one verb: `use a or b or give a larger data
            // set`, not `use a, use b or …`.
            Remedy::OneOf(all) => {
                let mut phrases: Vec<String> = Vec::new();
                for run in all.chunk_by(|a, b| a.setting().is_some() && b.setting().is_some()) {
                    phrases.push(match run {
                        [one] => one.render(style),
                        settings => {
                            let each: Vec<String> =
                                settings.iter().map(|r| r.phrase(style)).collect();
                            format!("use {}", each.join(" or "))
                        }
                    });
                }
                alternatives(&phrases)
            }
            Remedy::AllOf(all) if all.iter().all(|r| r.setting().is_some()) => {
                let phrases: Vec<String> = all.iter().map(|r| r.phrase(style)).collect();
                format!("use {}", phrases.join(" and "))
            }
            // Each with its own verb: `drop stages and drop micro_batches`.
            Remedy::AllOf(all) => {
                let phrases: Vec<String> = all.iter().map(|r| r.render(style)).collect();
                phrases.join(" and ")
            }
            Remedy::Set { .. } => format!("use {}", self.phrase(style)),
            Remedy::Sentence(text) => text.to_string(),
            Remedy::Drop(setting) => format!("drop {}", style.label(*setting)),
        }
    }

    /// The setting and value of a [`Remedy::Set`] whose value is concrete.
    fn setting(&self) -> Option<(Setting, &Value)> {
        match self {
            Remedy::Set { setting, value } => Some((*setting, value)),
            _ => None,
        }
    }

    /// A [`Remedy::Set`] without its verb: `.stages(1)`, `a larger --comm-timeout`.
    fn phrase(&self, style: &dyn Style) -> String {
        match self {
            Remedy::Set {
                setting,
                value: Value::Larger,
            } => format!("a larger {}", style.name(*setting)),
            Remedy::Set {
                setting,
                value: Value::Smaller,
            } => format!("a smaller {}", style.name(*setting)),
            Remedy::Set { setting, value } => style.set(*setting, value),
            other => other.render(style),
        }
    }
}

impl fmt::Display for Remedy {
    /// The remedy in [`Plain`] words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Plain))
    }
}

/// `a`, `a or b`, `a, b or c`.
fn alternatives(phrases: &[String]) -> String {
    match phrases {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// How a front end writes settings: the facade as builder calls, the binary as flags.
pub trait Style {
    /// The setting's name alone, as this front end's user writes it: `.stages`, `--stages`.
    fn name(&self, setting: Setting) -> String;

    /// `setting` given `value` (never [`Value::Larger`] or [`Value::Smaller`], which
    /// [`Remedy::render`] words around [`Style::name`]): `.stages(1)`, `--stages 1`.
    fn set(&self, setting: Setting, value: &Value) -> String;

    /// The setting as an error's facts name it, before its value or the file it gives
    /// (`checkpoint run.st: …`, `--checkpoint run.st: …`): its words unless the front end's
    /// user knows it by another name.
    fn label(&self, setting: Setting) -> String {
        setting.words().to_string()
    }

    /// A setting its caller names (the entries of a run's identity: `seed`, `batch`), as this
    /// front end's user knows it: the name as given, unless the front end named it otherwise.
    fn entry(&self, name: &str) -> String {
        name.to_string()
    }
}

/// Plain words, for a reader of neither front end: `micro_batches = 4`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl Style for Plain {
    fn name(&self, setting: Setting) -> String {
        setting.words().to_string()
    }

    fn set(&self, setting: Setting, value: &Value) -> String {
        match value {
            Value::On => format!("{} on", setting.key()),
            Value::Counts(_) => format!("{} = [{value}]", setting.key()),
            _ => format!("{} = {value}", setting.key()),
        }
    }
}

/// An error that may know what would fix it.
pub trait Remedied: std::error::Error {
    /// The fix, if the error knows one; an error that wraps another asks the inner one.
    fn remedy(&self) -> Option<Remedy>;

    /// The facts alone: for the errors below the front ends, their `Display`.
    fn facts(&self) -> String {
        self.to_string()
    }

    /// The facts, then the remedy in `style`'s words: `{facts}; {remedy}`.
    fn explain(&self, style: &dyn Style) -> String {
        match self.remedy() {
            Some(remedy) => format!("{}; {}", self.facts(), remedy.render(style)),
            None => self.facts(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternatives_of_settings_share_one_verb() {
        let fix = Remedy::one_of([
            Remedy::set(Setting::Stages, Value::Count(3)),
            Remedy::set(Setting::Remat, Value::mode("always")),
            Remedy::set(Setting::CommTimeout, Value::Larger),
        ]);
        assert_eq!(
            fix.render(&Plain),
            "use stages = 3, remat = always or a larger communication timeout"
        );
        let mixed = Remedy::one_of([
            Remedy::sentence("lower the learning rate"),
            Remedy::set(Setting::SkipNonFinite, Value::On),
        ]);
        assert_eq!(
            mixed.render(&Plain),
            "lower the learning rate or use skip_nonfinite on"
        );
        let both = Remedy::one_of([
            Remedy::all_of([
                Remedy::set(Setting::Stages, Value::Count(2)),
                Remedy::set(Setting::MicroBatches, Value::Count(4)),
            ]),
            Remedy::sentence("write another plan"),
        ]);
        assert_eq!(
            both.render(&Plain),
            "use stages = 2 and micro_batches = 4 or write another plan"
        );
        let fractions = Remedy::one_of([
            Remedy::set(Setting::HeldOut, Value::Number(0.5)),
            Remedy::set(Setting::HeldOut, Value::Number(0.0)),
            Remedy::sentence("give a larger data set"),
        ]);
        assert_eq!(
            fractions.render(&Plain),
            "use held_out = 0.5 or held_out = 0.0 or give a larger data set"
        );
        let dropped = Remedy::all_of([
            Remedy::Drop(Setting::Stages),
            Remedy::Drop(Setting::MicroBatches),
        ]);
        assert_eq!(dropped.render(&Plain), "drop stages and drop micro-batches");
        assert_eq!(
            Remedy::one_of([Remedy::set(Setting::Balance, Value::Counts(vec![2, 1]))])
                .render(&Plain),
            "use balance = [2, 1]"
        );
    }
}
