//! `DataError`: everything that can go wrong building, sampling or loading data, with the facts
//! (file, byte offset, sizes) as its `Display` and what would fix it as a typed [`Remedy`] (its
//! [`Remedied::remedy`]), which each front end words in its own style: the facade as builder
//! calls, the `pipetrain` binary as flags.

use std::fmt;
use std::path::PathBuf;

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};

use crate::problem::{Corruption, ParameterProblem, ShapeProblem};

/// The accepted forms of a [`DataSpec`](crate::DataSpec), quoted in [`DataError::BadSpec`].
pub const ACCEPTED_SPECS: &str = "synthetic, mnist:DIR, cifar10:DIR, text:FILE, tensors:FILE";

/// A shape, shown as `[1, 28, 28]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape(pub Vec<usize>);

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Everything that can go wrong in this crate. File errors name the file and, where the file's
/// bytes are at fault, the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be read at all.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },

    /// Not a regular file (a device such as `/dev/zero`, a FIFO, a directory): a data set is
    /// read whole, and such a file has no size to check against memory first.
    #[error(
        "{} is not a regular file (a device, FIFO or directory), and data is read whole",
        path.display()
    )]
    NotAFile {
        /// The path.
        path: PathBuf,
    },

    /// The file ends before a field or record it declares.
    #[error(
        "{}: truncated at byte offset {offset}: {what} needs {needed} bytes, only {available} \
         left: the file is incomplete",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the missing field or record starts.
        offset: usize,
        /// What was being read, e.g. "image pixels".
        what: String,
        /// Bytes the field or record needs.
        needed: usize,
        /// Bytes the file has from `offset` on.
        available: usize,
    },

    /// The file does not start with the magic number of its format.
    #[error(
        "{}: bad magic number at byte offset {offset}: found {found:#010x}, expected \
         {expected:#010x}{hint}",
        path.display(),
        hint = magic_hint(*found)
    )]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// Where the magic number is (0).
        offset: usize,
        /// The big-endian word found.
        found: u32,
        /// The word the format requires.
        expected: u32,
    },

    /// The bytes are readable but contradict the format (a label out of range, trailing bytes,
    /// sizes that overflow).
    #[error("{}: at byte offset {offset}: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the offending bytes start.
        offset: usize,
        /// What is wrong.
        problem: Corruption,
    },

    /// A class label outside `0..classes`.
    #[error(
        "{}: label {label} at byte offset {offset} is not a class in 0..{classes}; the file is \
         not a {format} file or is corrupt",
        path.display()
    )]
    BadLabel {
        /// The file.
        path: PathBuf,
        /// Where the label byte is.
        offset: usize,
        /// The label found.
        label: u64,
        /// Number of classes of the format.
        classes: u64,
        /// The format, e.g. "CIFAR-10".
        format: &'static str,
    },

    /// An int value (a class label, a token id) outside the model's range `0..limit`: a
    /// negative one would panic a worker, a large one would widen the model.
    #[error(
        "{data}: {part} row {row}: {} {value} is not in 0..{limit}",
        if *part == "input" { "token id" } else { "label" }
    )]
    OutOfRange {
        /// The data (file or spec).
        data: String,
        /// "input" or "target".
        part: &'static str,
        /// The example (row) holding it.
        row: usize,
        /// The value.
        value: i64,
        /// The model's range, exclusive.
        limit: usize,
    },

    /// A NaN or infinite float value, which would make every weight NaN.
    #[error("{data}: {part} row {row} holds {value}; every value must be finite")]
    NonFinite {
        /// The data (file or spec).
        data: String,
        /// "input" or "target".
        part: &'static str,
        /// The example (row) holding it.
        row: usize,
        /// The value.
        value: f32,
    },

    /// The images file and the labels file disagree on the number of examples.
    #[error(
        "{} holds {images} images but {} holds {labels} labels",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        /// The images file.
        images_path: PathBuf,
        /// Images it declares.
        images: usize,
        /// The labels file.
        labels_path: PathBuf,
        /// Labels it declares.
        labels: usize,
    },

    /// A text file too short for one window.
    #[error(
        "{}: {bytes} bytes is too short for one window of context {context} (needs at least \
         {needed} bytes at offset 0)",
        path.display()
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Bytes in the file.
        bytes: usize,
        /// The context length asked for.
        context: usize,
        /// Bytes one window needs (`context + 1`).
        needed: usize,
    },

    /// A Hugging Face `tokenizer.json` that the `tokenizers` crate cannot load, or a text it
    /// cannot encode.
    #[error("{}: {reason}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What the `tokenizers` crate said.
        reason: String,
    },

    /// A text file that tokenizes to fewer tokens than one window of `context + 1`.
    #[error(
        "{}: {tokens} tokens (by {}), fewer than one window of context {context} + 1 = \
         {needed} tokens",
        path.display(),
        tokenizer.display()
    )]
    TooFewTokens {
        /// The text file.
        path: PathBuf,
        /// The tokenizer.
        tokenizer: PathBuf,
        /// Tokens in the file.
        tokens: usize,
        /// The context length asked for.
        context: usize,
        /// Tokens one window needs (`context + 1`).
        needed: usize,
    },

    /// A safetensors file whose header or layout the `safetensors` crate rejects.
    #[error("{}: not a valid safetensors file: {source}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: safetensors::SafeTensorError,
    },

    /// A tensor the format requires is absent.
    #[error(
        "{}: no tensor named `{name}` (found: {found:?})",
        path.display()
    )]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The tensor that is missing.
        name: String,
        /// The tensors the file has.
        found: Vec<String>,
    },

    /// A tensor of a dtype or rank this crate does not load.
    #[error(
        "{}: tensor `{name}` is {dtype} of shape {shape}; accepted: {accepted}",
        path.display()
    )]
    UnsupportedTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype, e.g. "F16".
        dtype: String,
        /// Its shape.
        shape: Shape,
        /// What would be accepted.
        accepted: &'static str,
    },

    /// `x` and `y` disagree on the number of rows.
    #[error(
        "{}: tensor `x` has {x_rows} rows but tensor `y` has {y_rows}; both need one row per \
         example",
        path.display()
    )]
    RowMismatch {
        /// The file.
        path: PathBuf,
        /// Rows (dimension 0) of `x`.
        x_rows: usize,
        /// Rows (dimension 0) of `y`.
        y_rows: usize,
    },

    /// A directory holds none of the files a format expects.
    #[error("{}: none of {expected:?} found", dir.display())]
    NoFiles {
        /// The directory.
        dir: PathBuf,
        /// The file names looked for.
        expected: Vec<String>,
    },

    /// A data spec string that does not parse.
    #[error("bad data spec `{value}`: {reason}; accepted forms: {ACCEPTED_SPECS}")]
    BadSpec {
        /// The string given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `synthetic` data is generated per batch, not loaded.
    #[error("the `synthetic` data spec has no file to load: its batches are generated")]
    SyntheticNotLoadable,

    /// Flat values and a shape that do not fit together, or a shape this crate cannot batch.
    #[error("{what}: {problem}")]
    Shape {
        /// What was being built, e.g. "InMemory inputs".
        what: &'static str,
        /// How the values and shapes disagree.
        problem: ShapeProblem,
    },

    /// A held-out fraction outside `[0, 1)`.
    #[error("held-out fraction {held_out:?} is not in [0, 1)")]
    BadFraction {
        /// The fraction given.
        held_out: f64,
    },

    /// A split that would leave one side empty.
    #[error(
        "holding out {held_out:?} of {len} examples leaves {train} for training and {held} held \
         out; both must be non-empty"
    )]
    EmptySplit {
        /// Examples in the dataset.
        len: usize,
        /// The fraction given.
        held_out: f64,
        /// Examples left for training.
        train: usize,
        /// Examples held out.
        held: usize,
    },

    /// A sampler or loader parameter out of range.
    #[error("{name} = {value} is invalid: {problem}")]
    BadParameter {
        /// The parameter, e.g. "rank".
        name: &'static str,
        /// Its value.
        value: String,
        /// Why it is invalid.
        problem: ParameterProblem,
    },

    /// A batch size larger than the examples one replica sees per epoch.
    #[error(
        "batch size {batch_size} exceeds the {shard} examples replica {rank} of {replicas} sees \
         per epoch"
    )]
    BatchTooLarge {
        /// The batch size.
        batch_size: usize,
        /// Examples per replica per epoch.
        shard: usize,
        /// This replica.
        rank: usize,
        /// Replicas.
        replicas: usize,
    },

    /// A position past the end of its epoch.
    #[error(
        "batch {batch} of epoch {epoch} does not exist: an epoch has {batches_per_epoch} batches \
         (0..{batches_per_epoch})"
    )]
    PositionOutOfRange {
        /// The epoch asked for.
        epoch: u64,
        /// The batch asked for.
        batch: usize,
        /// Batches in an epoch.
        batches_per_epoch: usize,
    },
}

/// One crate-wide result.
pub type Result<T, E = DataError> = std::result::Result<T, E>;

/// Whether a file's first big-endian word is gzip's magic number.
fn gzip(found: u32) -> bool {
    found >> 16 == 0x1f8b
}

fn magic_hint(found: u32) -> &'static str {
    if gzip(found) { " (a gzip file)" } else { "" }
}

/// Held-out fractions that split `len` examples into two non-empty sides, where `held` was
/// held out: with none held, the least fraction that holds one out (rounded up to two digits:
/// `0.016` of 64, not `0.015625`) or none at all (0: train on every example); with none left
/// to train, a half. A single example trains with 0, and no fraction splits none.
fn fitting_split(len: usize, held: usize) -> Remedy {
    let larger = Remedy::sentence("give a larger data set");
    let held_out = |fraction| Remedy::set(Setting::HeldOut, Value::Number(fraction));
    let fractions = match (len, held) {
        (0, _) => vec![],
        (1, _) => vec![held_out(0.0)],
        (_, 0) => vec![held_out(up_to_two_digits(1.0 / len as f64)), held_out(0.0)],
        _ => vec![held_out(0.5)],
    };
    Remedy::one_of(fractions.into_iter().chain([larger]))
}

/// `x` (positive) rounded up to two significant digits.
fn up_to_two_digits(x: f64) -> f64 {
    let scale = 10f64.powi(1 - x.log10().floor() as i32);
    (x * scale).ceil() / scale
}

impl Remedied for DataError {
    fn remedy(&self) -> Option<Remedy> {
        let sentence = |text: &'static str| Some(Remedy::sentence(text));
        match self {
            DataError::NotAFile { .. } => sentence("give a data file"),
            DataError::Truncated { .. } => sentence("re-download or re-extract it"),
            DataError::BadMagic { found, .. } if gzip(*found) => {
                sentence("decompress it first, e.g. `gunzip FILE.gz`")
            }
            DataError::OutOfRange { .. } => sentence("fix the data, or size the model for it"),
            DataError::NonFinite { .. } => sentence("clean the data (replace or drop that row)"),
            DataError::CountMismatch { .. } => sentence(
                "use the labels file that belongs to the images file (train-* with train-*, \
                 t10k-* with t10k-*)",
            ),
            DataError::TooShort { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Context, Value::Smaller),
                Remedy::sentence("give a longer file"),
            ])),
            DataError::Tokenizer { .. } => sentence(
                "give the tokenizer.json that transformers' save_pretrained or tokenizers' \
                 Tokenizer.save wrote, and a UTF-8 text file",
            ),
            DataError::TooFewTokens { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Context, Value::Smaller),
                Remedy::sentence("give a longer file"),
            ])),
            DataError::MissingTensor { .. } => {
                sentence("save the inputs as `x` and the targets as `y`")
            }
            DataError::NoFiles { .. } => sentence("point at the extracted dataset directory"),
            DataError::SyntheticNotLoadable => {
                sentence("generate its batches with pipetrain_models::synthetic")
            }
            DataError::BadFraction { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::HeldOut, Value::Number(0.1)),
                Remedy::set(Setting::HeldOut, Value::Number(0.0)),
            ])),
            DataError::EmptySplit { len, held, .. } => Some(fitting_split(*len, *held)),
            DataError::BatchTooLarge { shard, .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Batch, Value::Count(*shard)),
                Remedy::set(Setting::Replicas, Value::Smaller),
            ])),
            DataError::Corrupt { problem, .. } => problem.remedy(),
            DataError::Shape { problem, .. } => problem.remedy(),
            DataError::BadParameter { problem, .. } => problem.remedy(),
            DataError::Io { .. }
            | DataError::BadMagic { .. }
            | DataError::BadLabel { .. }
            | DataError::Safetensors { .. }
            | DataError::UnsupportedTensor { .. }
            | DataError::RowMismatch { .. }
            | DataError::BadSpec { .. }
            | DataError::PositionOutOfRange { .. } => None,
        }
    }
}
