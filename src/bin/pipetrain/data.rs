//! `--data`: where the batches come from (the library's [`Data`]), opened and checked against
//! the flags: synthetic data is generated per batch from the seed; a loaded data set is checked
//! (labels against `--classes` or `--vocab`, finite floats), split by `--held-out` and batched
//! by a loader seeded with `--seed`.

use std::sync::Arc;

use clap::ValueEnum;
pub use pipetrain::trainer::{Data, Shapes};
use pipetrain_data::{
    DataError, DataSpec, Dataset, InMemory, LoaderConfig, Values, check_finite, check_ints, split,
};

use crate::args::{ModelKind, TrainArgs};
use crate::failure::Failure;

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
pub fn open(args: &TrainArgs, batch: usize) -> Result<Data, Failure> {
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
            DataError::NoFiles { .. } | DataError::TooShort { .. } | DataError::NotAFile { .. } => {
                Failure::usage(message)
            }
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

/// A batch error of `data` with the flag that names it: `--data SPEC: …`.
pub fn failed(data: &Data, error: pipetrain::Error) -> pipetrain::Error {
    match (error, data.spec()) {
        (pipetrain::Error::Batch { index, reason }, Some(spec)) => pipetrain::Error::Batch {
            index,
            reason: format!("--data {spec}: {reason}"),
        },
        (other, _) => other,
    }
}
