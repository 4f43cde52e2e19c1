//! `--data`: where the batches come from. Synthetic data is generated per batch from the seed;
//! a loaded data set is split into a training part, visited by a seeded
//! [`Loader`](pipetrain_data::Loader) (reshuffled every epoch), and a held-out part
//! (`--held-out`) that is only evaluated.
//!
//! Batch `i` of the run (counting every accumulated batch) is a pure function of the seed and
//! `i`: synthetic batch `i`, or the loader's batch at `Position::from_step(i, ..)`. The pipeline
//! then cuts it into replica shards and micro-batches itself.

use std::sync::Arc;

use burn::prelude::*;
use clap::ValueEnum;
use pipetrain::Batch;
use pipetrain_data::{
    DataError, DataSpec, Dataset, InMemory, Loader, LoaderConfig, Position, Subset, Values,
    check_finite, check_ints, collate, split,
};

use crate::args::{ModelKind, TrainArgs};

use crate::failure::Failure;
use crate::model::Model;

/// Synthetic held-out batches start at this batch index, far beyond any run's training batches.
const HELD_OUT_INDEX: u64 = 1 << 62;

/// Shapes of a loaded data set, which size the model.
#[derive(Clone, Debug)]
pub struct Shapes {
    /// One example's input shape.
    pub input: Vec<usize>,
    /// Whether inputs are float (pixels, features) rather than int (token ids).
    pub float_inputs: bool,
}

/// The run's data.
pub enum Data {
    /// Seeded synthetic batches for the model (`--data synthetic`).
    Synthetic {
        /// The run's seed.
        seed: u64,
        /// Whether one batch is held out (`--held-out 0`: none).
        held_out: bool,
    },
    /// A loaded data set.
    Loaded {
        /// `--data` as given.
        spec: DataSpec,
        /// The training part and its loader (boxed: it is large, `Synthetic` is a seed).
        train: Box<Loader<Subset<InMemory>>>,
        /// The held-out part.
        held_out: Subset<InMemory>,
        /// Its shapes.
        shapes: Shapes,
    },
}

impl Data {
    /// Loads `--data` (nothing for `synthetic`), checks its values (labels and token ids in
    /// `0..--classes` or `0..--vocab`, floats finite unless `--allow-nonfinite-inputs`), holds
    /// out `--held-out` of it, and batches the rest in mini-batches of `batch` examples shuffled
    /// with `--seed`. `--context` is the window length of `text:` data.
    ///
    /// # Errors
    /// Usage: a spec that does not parse, a file or directory that does not exist or holds no
    /// data set, a value outside the model's range, a non-finite value, a `--context`,
    /// `--held-out` or `--batch` the data cannot satisfy. Runtime: the files are unreadable or
    /// corrupt.
    pub fn open(args: &TrainArgs, batch: usize) -> Result<Self, Failure> {
        let (held_out, seed) = (args.held_out(), args.seed);
        let spec: DataSpec = args
            .data
            .parse()
            .map_err(|e| Failure::usage(format!("--data: {e}")))?;
        let path = match &spec {
            DataSpec::Synthetic if args.held_out.is_some_and(|h| h != 0.0) => {
                return Err(Failure::usage(format!(
                    "--held-out {held_out} applies to loaded data; synthetic data holds out one \
                     batch of --batch rows (--held-out 0: none): drop --held-out or give --data"
                )));
            }
            DataSpec::Synthetic if args.keep_last => {
                return Err(Failure::usage(
                    "--keep-last applies to loaded data (synthetic data has no epochs): drop it \
                     or give --data",
                ));
            }
            DataSpec::Synthetic if args.no_shuffle => {
                return Err(Failure::usage(
                    "--no-shuffle keeps the order of a loaded data set; synthetic data has no \
                     order to keep: drop --no-shuffle or give --data",
                ));
            }
            DataSpec::Synthetic => {
                let held_out = args.held_out.is_none();
                return Ok(Data::Synthetic { seed, held_out });
            }
            DataSpec::Mnist(dir) | DataSpec::Cifar10(dir) => dir,
            DataSpec::Text(file) | DataSpec::Tensors(file) => file,
        };
        if !path.exists() {
            return Err(Failure::usage(format!(
                "--data {spec}: {} does not exist",
                path.display()
            )));
        }
        // Read whole, then converted: refused before reading when memory cannot hold it.
        let needed = u128::from(files_size(path)) * u128::from(crate::footprint::DATA_FACTOR);
        if let Some(why) = crate::footprint::exceeds(needed) {
            return Err(Failure::usage(format!(
                "--data {spec}: {} of data need about {} once loaded, {why}; use a smaller data \
                 set, or a part of it",
                crate::footprint::gib(u128::from(files_size(path))),
                crate::footprint::gib(needed)
            )));
        }
        let data = spec.load(args.context).map_err(|e| {
            let message = format!("--data {spec}: {e}");
            match e {
                DataError::NoFiles { .. }
                | DataError::TooShort { .. }
                | DataError::NotAFile { .. } => Failure::usage(message),
                _ => Failure::runtime(message),
            }
        })?;
        check(&data, &spec, args)?;
        let shapes = Shapes {
            input: data.input_shape().to_vec(),
            float_inputs: data.inputs().is_float(),
        };
        let (train, held) = split(Arc::new(data), held_out)
            .map_err(|e| Failure::usage(format!("--data {spec} --held-out {held_out}: {e}")))?;
        let short = train.len() % batch;
        let parts = args.replicas * args.micro_batches;
        if args.keep_last && short > 0 && short < parts {
            return Err(Failure::usage(format!(
                "--keep-last: the last batch of each epoch has {short} rows, fewer than \
                 --replicas × --micro-batches = {parts}; drop --keep-last or change --batch"
            )));
        }
        let loader = LoaderConfig {
            seed,
            drop_last: !args.keep_last,
            shuffle: !args.no_shuffle,
            ..LoaderConfig::new(batch)
        }
        .build(train)
        .map_err(|e| Failure::usage(format!("--data {spec} --batch {batch}: {e}")))?;
        Ok(Data::Loaded {
            spec,
            train: Box::new(loader),
            held_out: held,
            shapes,
        })
    }

    /// The loaded data's shapes (`None` for synthetic data).
    pub fn shapes(&self) -> Option<&Shapes> {
        match self {
            Data::Synthetic { .. } => None,
            Data::Loaded { shapes, .. } => Some(shapes),
        }
    }

    /// A one-line description for the run's banner.
    pub fn describe(&self) -> String {
        match self {
            Data::Synthetic { seed, held_out } => format!(
                "synthetic data (seed {seed}){}",
                if *held_out { "" } else { ", nothing held out" }
            ),
            Data::Loaded {
                spec,
                train,
                held_out,
                ..
            } => {
                format!(
                    "{spec}: {} training examples ({} batches per epoch), {} held out",
                    train.dataset().len(),
                    train.batches_per_epoch(),
                    held_out.len()
                ) + if train.config().shuffle {
                    ""
                } else {
                    ", file order (no shuffle)"
                }
            }
        }
    }

    /// Batch `index` of the run (epochs roll over), shaped for `model`.
    /// Where training batch `index` comes from, as text: `batch 12` (synthetic) or
    /// `epoch 1, batch 3` (a loaded dataset: its shuffled order per epoch).
    pub fn position(&self, index: u64) -> String {
        match self {
            Data::Synthetic { .. } => format!("synthetic batch {index}"),
            Data::Loaded { train, .. } => {
                let p = Position::from_step(index, train.batches_per_epoch());
                format!("epoch {}, batch {}", p.epoch, p.batch)
            }
        }
    }

    pub fn batch(
        &self,
        model: &Model,
        index: u64,
        rows: usize,
        device: &Device,
    ) -> Result<Batch, String> {
        match self {
            Data::Synthetic { seed, .. } => Ok(model.synthetic(*seed, index, rows, device)),
            Data::Loaded { spec, train, .. } => {
                let position = Position::from_step(index, train.batches_per_epoch());
                let batch = train
                    .batch_at(position, device)
                    .map_err(|e| format!("--data {spec}: {e}"))?;
                shaped(model, batch)
            }
        }
    }

    /// The held-out examples in batches of at most `rows`, shaped for `model`. Synthetic data
    /// holds out one batch of `rows` never trained on.
    pub fn held_out(
        &self,
        model: &Model,
        rows: usize,
        device: &Device,
    ) -> Result<Vec<Batch>, String> {
        match self {
            Data::Synthetic { seed, held_out } => Ok(match held_out {
                true => vec![model.synthetic(*seed, HELD_OUT_INDEX, rows, device)],
                false => Vec::new(),
            }),
            Data::Loaded { spec, held_out, .. } => {
                let indices: Vec<usize> = (0..held_out.len()).collect();
                indices
                    .chunks(rows.max(1))
                    .map(|chunk| {
                        let batch = collate(held_out, chunk, device)
                            .map_err(|e| format!("--data {spec}: {e}"))?;
                        shaped(model, batch)
                    })
                    .collect()
            }
        }
    }
}

/// Checks `data`'s values against the flags, before anything is built from them: labels (token
/// ids for `--model gpt`) in `0..--classes` (`0..--vocab`), never widening the model; floats
/// finite unless `--allow-nonfinite-inputs`.
fn check(data: &InMemory, spec: &DataSpec, args: &TrainArgs) -> Result<(), Failure> {
    let (flag, limit) = match args.model {
        ModelKind::Gpt => ("--vocab", args.vocab),
        _ => ("--classes", args.classes),
    };
    let source = format!("--data {spec}");
    if args.model != ModelKind::Gpt && matches!(data.inputs(), Values::Int(_)) {
        return Err(Failure::usage(format!(
            "{source}: the inputs are int ids of shape {:?} (token windows), but --model {} \
             takes float inputs: train them with --model gpt, or save x as float32",
            data.input_shape(),
            args.model
                .to_possible_value()
                .map_or("?".into(), |v| v.get_name().to_string()),
        )));
    }
    check_targets(data, &source, args.model)?;
    if let Err(e) = check_ints(data, limit, &source) {
        let remedy = match &e {
            // A model that wide would not fit in memory: the value is corrupt, not a class.
            DataError::OutOfRange { value, .. } if *value >= 1 << 24 => String::new(),
            DataError::OutOfRange { value, .. } if *value >= 0 => format!(
                "; if the data really has {} values, give {flag} {}",
                value + 1,
                value + 1
            ),
            _ => String::new(),
        };
        return Err(Failure::usage(format!("{e} ({flag} {limit}){remedy}")));
    }
    if !args.allow_nonfinite_inputs {
        check_finite(data, &source).map_err(|e| {
            Failure::usage(format!(
                "{e}, or pass --allow-nonfinite-inputs to train on it anyway"
            ))
        })?;
    }
    Ok(())
}

/// Every built-in model trains with cross-entropy on int targets: class labels `[N]`, or next
/// tokens `[N, T]` for the GPT. Float or wrongly-ranked targets are refused at load, naming the
/// file and the remedy, not at the first step's loss.
fn check_targets(data: &InMemory, source: &str, model: ModelKind) -> Result<(), Failure> {
    let (want, rank) = match model {
        ModelKind::Gpt => ("next-token ids of shape [N, T]", 1),
        _ => ("class labels of shape [N]", 0),
    };
    let float = matches!(data.targets(), Values::Float(_));
    if float || data.target_shape().len() != rank {
        let mut shape = vec!["N".to_string()];
        shape.extend(data.target_shape().iter().map(usize::to_string));
        return Err(Failure::usage(format!(
            "{source}: the targets are {} of shape [{}], but --model {} trains with \
             cross-entropy on int {want}: save y as int64 (numpy: y.astype(\"int64\"))",
            if float { "float" } else { "int" },
            shape.join(", "),
            model
                .to_possible_value()
                .map_or("?".into(), |v| v.get_name().to_string()),
        )));
    }
    Ok(())
}

/// `batch` with its inputs in the model's shape.
fn shaped(model: &Model, batch: Batch) -> Result<Batch, String> {
    Ok(Batch {
        inputs: model
            .shape_inputs(batch.inputs)
            .map_err(|e| format!("--data: {e}"))?,
        targets: batch.targets,
    })
}

/// Bytes in the regular file `path`, or in the regular files of directory `path` (0 for
/// anything else, which the loaders refuse).
fn files_size(path: &std::path::Path) -> u64 {
    let size = |p: &std::path::Path| {
        std::fs::metadata(p).map_or(0, |m| if m.is_file() { m.len() } else { 0 })
    };
    match std::fs::read_dir(path) {
        Ok(entries) => entries.flatten().map(|e| size(&e.path())).sum(),
        Err(_) => size(path),
    }
}
