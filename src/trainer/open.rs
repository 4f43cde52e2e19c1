//! Opening a run's [`Data`]: a loaded data set is read (refused first when memory cannot hold
//! it), checked against the model before anything is built from it (int labels and token ids in
//! the model's range, targets a cross-entropy loss takes, floats finite), split into a training
//! and a held-out part, and batched by a loader seeded with the run's seed. Each refusal is an
//! [`RunError::Data`](crate::RunError::Data) with a [`DataProblem`]: typed facts and a typed remedy, which the facade
//! words as builder calls and the `pipetrain` binary as flags.

use crate::RunError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pipetrain_data::{
    DataError, DataSpec, Dataset, InMemory, LoaderConfig, Values, check_finite, check_ints, split,
};

use crate::Error;
use crate::remedy::{Plain, Remedied, Remedy, Setting, Style, Value};
use crate::trainer::footprint::{DATA_FACTOR, exceeds, gib};
use crate::trainer::{Data, Shapes};

/// What the model trains on, which a loaded data set's values must fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Task {
    /// A classifier of float inputs: int class labels `[N]` in `0..classes`.
    Classify {
        /// The model's name, as a run names it (`mlp`).
        model: String,
        /// Its classes.
        classes: usize,
    },
    /// A language model of int token ids: next-token targets `[N, T]` in `0..vocab`.
    NextToken {
        /// The model's name, as a run names it (`gpt`).
        model: String,
        /// Its vocabulary size.
        vocab: usize,
    },
}

impl Task {
    /// The model's name.
    fn model(&self) -> &str {
        match self {
            Task::Classify { model, .. } | Task::NextToken { model, .. } => model,
        }
    }

    /// The setting that bounds the int values, and its value.
    fn limit(&self) -> (Setting, usize) {
        match self {
            Task::Classify { classes, .. } => (Setting::Classes, *classes),
            Task::NextToken { vocab, .. } => (Setting::Vocab, *vocab),
        }
    }

    /// The model setting in `style`'s words: `--model mlp`, `model mlp`.
    fn named(&self, style: &dyn Style) -> String {
        style.set(
            Setting::Model,
            &Value::Mode(self.model().to_string().into()),
        )
    }
}

/// How a run's data is checked, split and batched.
#[derive(Clone, Debug)]
pub struct DataSettings {
    /// The model the data must fit.
    pub task: Task,
    /// Rows per batch.
    pub batch: usize,
    /// The seed of the loader's shuffle (and of synthetic batches).
    pub seed: u64,
    /// The fraction of a loaded data set held out; `None` for the default: 10% of a loaded
    /// data set, one batch of synthetic data.
    pub held_out: Option<f64>,
    /// Tokens per window of `text:` data.
    pub context: usize,
    /// A Hugging Face `tokenizer.json` that tokenizes `text:` data (else its bytes are the
    /// tokens).
    pub tokenizer: Option<std::path::PathBuf>,
    /// Keep each epoch's short last batch.
    pub keep_last: bool,
    /// Visit each epoch in a shuffled order (else the file's).
    pub shuffle: bool,
    /// Train on NaN or infinite inputs rather than refuse them.
    pub allow_nonfinite: bool,
    /// Replicas × micro-batches: the fewest rows a (short) batch can be cut into.
    pub parts: usize,
    /// Data-parallel replicas, each taking a share of every batch.
    pub replicas: usize,
}

/// Why a run's data cannot be used: a fact of [`RunError::Data`](crate::RunError::Data).
#[derive(Debug)]
#[non_exhaustive]
pub enum DataProblem {
    /// A setting of loaded data (a held-out fraction, keeping the short last batch, the file
    /// order) given for synthetic data, which it would not change.
    LoadedOnly {
        /// The setting.
        setting: Setting,
        /// Its value.
        value: Value,
    },
    /// The file or directory does not exist.
    Missing {
        /// Its path.
        path: PathBuf,
    },
    /// Loaded, the data would need more memory than this machine has.
    TooLarge {
        /// The files' size.
        size: String,
        /// The memory loading them needs.
        needed: String,
        /// How much is available, and why.
        why: String,
    },
    /// The files cannot be read, or do not hold a data set.
    Load(DataError),
    /// Int inputs (token windows) for a model of float inputs.
    IntInputs {
        /// One example's input shape.
        shape: Vec<usize>,
        /// The model.
        task: Task,
    },
    /// Targets a cross-entropy loss does not take: floats, or another rank.
    Targets {
        /// Whether they are floats.
        float: bool,
        /// One example's target shape.
        shape: Vec<usize>,
        /// The model.
        task: Task,
    },
    /// An int value (a class label, a token id) outside the model's range.
    OutOfRange {
        /// `input` or `target`.
        part: &'static str,
        /// The example holding it.
        row: usize,
        /// The value.
        value: i64,
        /// The model.
        task: Task,
    },
    /// A NaN or infinite float value.
    NonFinite {
        /// `input` or `target`.
        part: &'static str,
        /// The example holding it.
        row: usize,
        /// The value.
        value: f32,
    },
    /// The held-out fraction cannot split the data set.
    Split(DataError),
    /// The loader cannot batch the training part.
    Batching {
        /// Why.
        error: DataError,
        /// Replicas × micro-batches: the fewest rows a batch is cut into.
        parts: usize,
        /// Data-parallel replicas.
        replicas: usize,
    },
    /// A tokenizer whose vocabulary is larger than the model's.
    TokenizerVocab {
        /// The tokenizer file.
        tokenizer: PathBuf,
        /// Its vocabulary size (added tokens included).
        vocab: usize,
        /// The model.
        task: Task,
    },
    /// A tokenizer given for data that is not `text:`.
    TokenizerWithoutText {
        /// The tokenizer file.
        tokenizer: PathBuf,
    },
    /// The short last batch kept has fewer rows than the pipeline cuts it into.
    ShortLastBatch {
        /// Its rows.
        rows: usize,
        /// Replicas × micro-batches.
        parts: usize,
        /// Rows of the training split.
        train: usize,
        /// Rows per batch.
        batch: usize,
    },
}

impl DataProblem {
    /// The facts (naming settings in `style`'s words), then the remedy.
    pub fn explain(&self, style: &dyn Style) -> String {
        let facts = self.facts(style);
        match self.remedy() {
            Some(remedy) => format!("{facts}; {}", remedy.render(style)),
            None => facts,
        }
    }

    /// The facts, naming settings in `style`'s words.
    fn facts(&self, style: &dyn Style) -> String {
        match self {
            DataProblem::LoadedOnly { setting, value } => {
                let given = style.set(*setting, value);
                match setting {
                    Setting::HeldOut => format!(
                        "{given} applies to loaded data; synthetic data holds out one batch of \
                         {} rows ({}: none)",
                        style.label(Setting::Batch),
                        style.set(Setting::HeldOut, &Value::Number(0.0))
                    ),
                    Setting::FileOrder => format!(
                        "{given} keeps the order of a loaded data set; synthetic data has no \
                         order to keep"
                    ),
                    Setting::AllowNonFinite => format!(
                        "{given} accepts NaN or infinite values in loaded data; synthetic data \
                         holds none"
                    ),
                    _ => format!("{given} applies to loaded data (synthetic data has no epochs)"),
                }
            }
            DataProblem::IntInputs { shape, task } => format!(
                "the inputs are int ids of shape {shape:?} (token windows), but {} takes float \
                 inputs",
                task.named(style)
            ),
            DataProblem::Targets { float, shape, task } => {
                let mut dims = vec!["N".to_string()];
                dims.extend(shape.iter().map(usize::to_string));
                let want = match task {
                    Task::NextToken { .. } => "next-token ids of shape [N, T]",
                    Task::Classify { .. } => "class labels of shape [N]",
                };
                format!(
                    "the targets are {} of shape [{}], but {} trains with cross-entropy on int \
                     {want}",
                    if *float { "float" } else { "int" },
                    dims.join(", "),
                    task.named(style)
                )
            }
            DataProblem::OutOfRange {
                part,
                row,
                value,
                task,
            } => {
                let (setting, limit) = task.limit();
                let what = if *part == "input" {
                    "token id"
                } else {
                    "label"
                };
                format!(
                    "{part} row {row}: {what} {value} is not in 0..{limit} ({})",
                    style.set(setting, &Value::Count(limit))
                )
            }
            DataProblem::Load(e)
            | DataProblem::Split(e)
            | DataProblem::Batching { error: e, .. } => e.to_string(),
            DataProblem::Missing { path } => format!("{} does not exist", path.display()),
            DataProblem::TokenizerVocab {
                tokenizer,
                vocab,
                task,
            } => {
                let (setting, limit) = task.limit();
                format!(
                    "the tokenizer {} has {vocab} tokens, more than the {} model's {} of \
                     {limit}: it can emit ids the model has no row for",
                    tokenizer.display(),
                    task.model(),
                    style.label(setting)
                )
            }
            DataProblem::TokenizerWithoutText { tokenizer } => format!(
                "the tokenizer {} tokenizes text: data, and this data is not text",
                tokenizer.display()
            ),
            DataProblem::TooLarge { size, needed, why } => {
                format!("{size} of data need about {needed} once loaded, {why}")
            }
            DataProblem::NonFinite { part, row, value } => {
                format!("{part} row {row} holds {value}; every value must be finite")
            }
            DataProblem::ShortLastBatch { rows, parts, .. } => format!(
                "the last batch of each epoch has {rows} rows, fewer than the {parts} \
                 replicas × micro-batches it is cut into"
            ),
        }
    }

    /// What would fix it, if anything is known.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            DataProblem::Batching {
                error: DataError::BatchTooLarge { shard, .. },
                parts,
                replicas,
            } => Some(smaller_batch(*shard, *replicas, *parts)),
            DataProblem::Load(e)
            | DataProblem::Split(e)
            | DataProblem::Batching { error: e, .. } => e.remedy(),
            DataProblem::Missing { .. } => None,
            DataProblem::TokenizerVocab { vocab, task, .. } => Some(Remedy::one_of([
                Remedy::set(task.limit().0, Value::Count(*vocab)),
                Remedy::sentence("give the tokenizer that belongs to the model"),
            ])),
            DataProblem::TokenizerWithoutText { .. } => Some(Remedy::one_of([
                Remedy::Drop(Setting::Tokenizer),
                Remedy::set(Setting::Data, Value::Any),
            ])),
            DataProblem::LoadedOnly { setting, .. } => Some(Remedy::one_of([
                Remedy::Drop(*setting),
                Remedy::set(Setting::Data, Value::Any),
            ])),
            DataProblem::TooLarge { .. } => {
                Some(Remedy::sentence("use a smaller data set, or a part of it"))
            }
            DataProblem::IntInputs { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Model, Value::mode("gpt")),
                Remedy::sentence("save x as float32"),
            ])),
            DataProblem::Targets { float, shape, task } => Some(targets(*float, shape, task)),
            DataProblem::OutOfRange { value, task, .. } => {
                let fix = Remedy::sentence("fix the data");
                // A model that wide would not fit in memory: the value is corrupt, not a class.
                Some(match usize::try_from(*value) {
                    Ok(v) if v < 1 << 24 => {
                        Remedy::one_of([fix, Remedy::set(task.limit().0, Value::Count(v + 1))])
                    }
                    _ => fix,
                })
            }
            DataProblem::NonFinite { .. } => Some(Remedy::one_of([
                Remedy::sentence("clean the data (replace or drop that row)"),
                Remedy::set(Setting::AllowNonFinite, Value::On),
            ])),
            DataProblem::ShortLastBatch {
                parts,
                train,
                batch,
                ..
            } => {
                let fits = whole_last_batch(*train, *batch, *parts)
                    .map(|b| Remedy::set(Setting::Batch, Value::Count(b)));
                Some(Remedy::one_of(
                    [Remedy::Drop(Setting::KeepLast)].into_iter().chain(fits),
                ))
            }
        }
    }

    /// Whether the command line is at fault (a spec, a file or a setting that does not fit),
    /// rather than files that cannot be read or are corrupt.
    pub fn is_usage(&self) -> bool {
        match self {
            DataProblem::Load(e) => matches!(
                e,
                DataError::NoFiles { .. } | DataError::TooShort { .. } | DataError::NotAFile { .. }
            ),
            _ => true,
        }
    }
}

/// A batch that fits the `shard` examples of the training split and still splits into the
/// `parts` (`replicas` × micro-batches) of a step: the shard, with fewer micro-batches where it has fewer
/// rows than parts (`--batch 1` alone was refused next for its micro-batches, whose remedy,
/// `--batch 8`, was refused for the data again); else fewer replicas or more data.
fn smaller_batch(shard: usize, replicas: usize, parts: usize) -> Remedy {
    let batch = Remedy::set(Setting::Batch, Value::Count(shard));
    let fewer_replicas = Remedy::set(Setting::Replicas, Value::Smaller);
    let per_replica = shard / replicas.max(1);
    match (shard >= parts, per_replica) {
        (true, _) => Remedy::one_of([batch, fewer_replicas]),
        (false, 0) => Remedy::one_of([fewer_replicas, Remedy::sentence("give a larger data set")]),
        (false, m) => Remedy::one_of([
            Remedy::all_of([batch, Remedy::set(Setting::MicroBatches, Value::Count(m))]),
            fewer_replicas,
        ]),
    }
}

/// The batch nearest `batch` (below it first) whose last batch of `train` rows is whole or has
/// at least `parts` rows, and which splits into `parts` itself: a `--batch N` to follow.
fn whole_last_batch(train: usize, batch: usize, parts: usize) -> Option<usize> {
    let fits = |b: usize| b >= parts && b <= train && (train % b == 0 || train % b >= parts);
    let below = (parts..batch).rev().find(|&b| fits(b));
    below.or_else(|| (batch + 1..=train).find(|&b| fits(b)))
}

/// How to save targets a cross-entropy loss takes, from floats or another rank: the dtype, the
/// shape or both, whichever is wrong (an int64 `y` of shape [N, 1] is int64 already).
fn targets(float: bool, shape: &[usize], task: &Task) -> Remedy {
    let (want, rank, reshape) = match task {
        Task::Classify { .. } => ("[N]", 0, Some("y.reshape(-1)")),
        Task::NextToken { .. } => ("[N, T]", 1, None),
    };
    let numpy = |fix: String| format!(" (numpy: {fix})");
    let as_int64 = ".astype(\"int64\")";
    Remedy::sentence(match (float, shape.len() == rank) {
        (true, true) => format!("save y as int64{}", numpy(format!("y{as_int64}"))),
        (false, _) => format!(
            "save y with shape {want}{}",
            reshape.map(|r| numpy(r.into())).unwrap_or_default()
        ),
        (true, false) => format!(
            "save y as int64 of shape {want}{}",
            reshape
                .map(|r| numpy(format!("{r}{as_int64}")))
                .unwrap_or_default()
        ),
    })
}

impl fmt::Display for DataProblem {
    /// The facts alone, the settings they name in plain words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.facts(&Plain))
    }
}

impl Data {
    /// The data `spec` names, for a run of `settings`: synthetic batches, or the loaded data
    /// set, checked, split and batched.
    ///
    /// # Errors
    /// [`RunError::Data`](crate::RunError::Data): a file that does not exist, is too large for memory, cannot be read or
    /// holds no data set; a value outside the model's range, targets of another type or rank,
    /// a non-finite value (unless allowed); a held-out fraction or batch the data cannot
    /// satisfy.
    pub fn open(spec: &DataSpec, settings: &DataSettings) -> Result<Data, Error> {
        let refuse = |problem| {
            Error::Run(RunError::Data {
                spec: spec.to_string(),
                problem,
            })
        };
        let Some(path) = spec.path() else {
            if let Some(tokenizer) = &settings.tokenizer {
                let tokenizer = tokenizer.clone();
                return Err(refuse(DataProblem::TokenizerWithoutText { tokenizer }));
            }
            let loaded_only = [
                (settings.held_out.filter(|h| *h != 0.0))
                    .map(|h| (Setting::HeldOut, Value::Number(h))),
                settings.keep_last.then_some((Setting::KeepLast, Value::On)),
                (!settings.shuffle).then_some((Setting::FileOrder, Value::On)),
                // Synthetic inputs are always finite: accepting non-finite ones changes nothing.
                settings
                    .allow_nonfinite
                    .then_some((Setting::AllowNonFinite, Value::On)),
            ];
            if let Some((setting, value)) = loaded_only.into_iter().flatten().next() {
                return Err(refuse(DataProblem::LoadedOnly { setting, value }));
            }
            let held_out = settings.held_out.is_none();
            let seed = settings.seed;
            return Ok(Data::Synthetic { seed, held_out });
        };
        if !path.exists() {
            let path = path.to_path_buf();
            return Err(refuse(DataProblem::Missing { path }));
        }
        // Read whole, then converted: refused before reading when memory cannot hold it.
        let size = u128::from(files_size(path));
        let needed = size * u128::from(DATA_FACTOR);
        if let Some(why) = exceeds(needed) {
            let (size, needed) = (gib(size), gib(needed));
            return Err(refuse(DataProblem::TooLarge { size, needed, why }));
        }
        let data = match (&settings.tokenizer, spec) {
            (None, _) => spec
                .load(settings.context)
                .map_err(|e| refuse(DataProblem::Load(e)))?,
            (Some(tokenizer), DataSpec::Text(file)) => {
                let (data, vocab) =
                    pipetrain_data::tokenized::load(file, settings.context, tokenizer)
                        .map_err(|e| refuse(DataProblem::Load(e)))?;
                if let Task::NextToken { vocab: ours, .. } = &settings.task
                    && vocab > *ours
                {
                    return Err(refuse(DataProblem::TokenizerVocab {
                        tokenizer: tokenizer.clone(),
                        vocab,
                        task: settings.task.clone(),
                    }));
                }
                data
            }
            (Some(tokenizer), _) => {
                return Err(refuse(DataProblem::TokenizerWithoutText {
                    tokenizer: tokenizer.clone(),
                }));
            }
        };
        check(&data, settings).map_err(refuse)?;
        let shapes = Shapes {
            input: data.input_shape().to_vec(),
            float_inputs: data.inputs().is_float(),
        };
        let (train, held_out) = split(Arc::new(data), settings.held_out.unwrap_or(0.1))
            .map_err(|e| refuse(DataProblem::Split(e)))?;
        let (rows, parts) = (train.len() % settings.batch, settings.parts);
        if settings.keep_last && rows > 0 && rows < parts {
            let (train, batch) = (train.len(), settings.batch);
            return Err(refuse(DataProblem::ShortLastBatch {
                rows,
                parts,
                train,
                batch,
            }));
        }
        let loader = LoaderConfig {
            seed: settings.seed,
            drop_last: !settings.keep_last,
            shuffle: settings.shuffle,
            ..LoaderConfig::new(settings.batch)
        }
        .build(train)
        .map_err(|error| {
            let replicas = settings.replicas;
            refuse(DataProblem::Batching {
                error,
                parts,
                replicas,
            })
        })?;
        Ok(Data::Loaded {
            spec: spec.clone(),
            train: Box::new(loader),
            held_out,
            shapes,
        })
    }
}

/// Checks `data`'s values against the model, before anything is built from them: int inputs
/// only for a language model; int targets of the rank its loss takes; int values in its range,
/// never widening it; floats finite unless allowed.
fn check(data: &InMemory, settings: &DataSettings) -> Result<(), DataProblem> {
    let task = &settings.task;
    let tokens = matches!(task, Task::NextToken { .. });
    if !tokens && matches!(data.inputs(), Values::Int(_)) {
        let shape = data.input_shape().to_vec();
        let task = task.clone();
        return Err(DataProblem::IntInputs { shape, task });
    }
    let float = matches!(data.targets(), Values::Float(_));
    if float || data.target_shape().len() != usize::from(tokens) {
        let shape = data.target_shape().to_vec();
        let task = task.clone();
        return Err(DataProblem::Targets { float, shape, task });
    }
    match check_ints(data, task.limit().1, "data") {
        Err(DataError::OutOfRange {
            part, row, value, ..
        }) => {
            let task = task.clone();
            return Err(DataProblem::OutOfRange {
                part,
                row,
                value,
                task,
            });
        }
        Err(other) => return Err(DataProblem::Load(other)),
        Ok(()) => {}
    }
    if settings.allow_nonfinite {
        return Ok(());
    }
    match check_finite(data, "data") {
        Err(DataError::NonFinite {
            part, row, value, ..
        }) => Err(DataProblem::NonFinite { part, row, value }),
        other => other.map_err(DataProblem::Load),
    }
}

/// Bytes in the regular file `path`, or in the regular files of directory `path` (0 for
/// anything else, which the loaders refuse).
fn files_size(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| if m.is_file() { m.len() } else { 0 });
    match std::fs::read_dir(path) {
        Ok(entries) => entries.flatten().map(|e| size(&e.path())).sum(),
        Err(_) => size(path),
    }
}
