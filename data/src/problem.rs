//! The typed facts of three [`DataError`](crate::DataError) variants: what is wrong with a
//! file's bytes ([`Corruption`]), with values and their shape ([`ShapeProblem`]), and with a
//! parameter ([`ParameterProblem`]). Each one's `Display` states facts only; what would fix it is
//! its `remedy`, a typed [`Remedy`] that the front ends word in their own style.

use std::fmt;

use pipetrain_schedules::remedy::{Remedy, Setting, Value};

use crate::error::Shape;

/// What is wrong with bytes that can be read but contradict their format
/// ([`DataError::Corrupt`](crate::DataError::Corrupt)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// Bytes left over after the data the header declares.
    TrailingBytes {
        /// Bytes left over.
        bytes: usize,
        /// The format, e.g. "IDX images".
        format: &'static str,
    },
    /// Declared sizes whose product does not fit in memory's address space.
    Overflow {
        /// Images declared.
        count: usize,
        /// Rows per image.
        rows: usize,
        /// Columns per image.
        cols: usize,
    },
    /// Images declared with no pixels (a zero row or column count).
    NoPixels {
        /// Rows per image.
        rows: usize,
        /// Columns per image.
        cols: usize,
    },
    /// Files that hold no record at all.
    NoRecords {
        /// The format, e.g. "CIFAR-10".
        format: &'static str,
    },
    /// Tensors whose values and shapes do not form a data set.
    Layout {
        /// What was being built, e.g. "InMemory inputs".
        what: &'static str,
        /// How the values and shapes disagree.
        problem: ShapeProblem,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::TrailingBytes { bytes, format } => write!(
                f,
                "{bytes} trailing bytes after the data its header declares; not a valid {format} \
                 file"
            ),
            Corruption::Overflow { count, rows, cols } => {
                write!(
                    f,
                    "{count} images of {rows} × {cols} pixels overflow memory"
                )
            }
            Corruption::NoPixels { rows, cols } => {
                write!(f, "images of {rows} × {cols} pixels hold no pixels")
            }
            Corruption::NoRecords { format } => write!(f, "no {format} records"),
            Corruption::Layout { what, problem } => write!(f, "{what}: {problem}"),
        }
    }
}

impl Corruption {
    /// What would fix it, if anything is known.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Corruption::TrailingBytes { .. } => {
                Some(Remedy::sentence("re-download or re-extract it"))
            }
            Corruption::NoRecords { .. } => {
                Some(Remedy::sentence("give at least one non-empty batch file"))
            }
            Corruption::Layout { problem, .. } => problem.remedy(),
            Corruption::Overflow { .. } | Corruption::NoPixels { .. } => None,
        }
    }
}

/// Flat values and a shape that do not fit together, or a shape this crate cannot batch
/// ([`DataError::Shape`](crate::DataError::Shape)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShapeProblem {
    /// Inputs and targets disagree on the number of examples.
    Counts {
        /// Examples the inputs hold.
        inputs: usize,
        /// One input's shape.
        input_shape: Shape,
        /// Examples the targets hold.
        targets: usize,
        /// One target's shape.
        target_shape: Shape,
    },
    /// Examples of a rank above what a batch of their kind can hold.
    Rank {
        /// "float" or "int".
        kind: &'static str,
        /// One example's shape.
        shape: Shape,
        /// The highest rank that can be batched (without the batch dimension).
        max: usize,
    },
    /// A shape with a zero dimension.
    ZeroDimension {
        /// The shape.
        shape: Shape,
    },
    /// Values that are not a whole number of examples.
    Ragged {
        /// Values given.
        values: usize,
        /// One example's shape.
        shape: Shape,
        /// Values one example holds.
        size: usize,
    },
    /// A batch asked for with no example indices.
    NoIndices,
    /// An example whose values do not fill its shape.
    ExampleSize {
        /// The example.
        index: usize,
        /// "input" or "target".
        part: &'static str,
        /// Values it has.
        values: usize,
        /// Values its shape needs.
        needed: usize,
    },
    /// An example of another value kind (float, int) than the ones before it.
    MixedKinds {
        /// The example.
        index: usize,
        /// "input" or "target".
        part: &'static str,
        /// Its kind.
        kind: &'static str,
        /// The kind of the examples before it.
        earlier: &'static str,
    },
}

impl fmt::Display for ShapeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeProblem::Counts {
                inputs,
                input_shape,
                targets,
                target_shape,
            } => write!(
                f,
                "{inputs} inputs of shape {input_shape} but {targets} targets of shape \
                 {target_shape}"
            ),
            ShapeProblem::Rank { kind, shape, max } => write!(
                f,
                "{kind} examples of shape {shape} have rank {}, at most {max} can be batched",
                shape.0.len()
            ),
            ShapeProblem::ZeroDimension { shape } => write!(
                f,
                "shape {shape} has a zero dimension; every dimension must be ≥ 1"
            ),
            ShapeProblem::Ragged {
                values,
                shape,
                size,
            } => write!(
                f,
                "{values} values are not a whole number of examples of shape {shape} ({size} \
                 values each)"
            ),
            ShapeProblem::NoIndices => {
                f.write_str("no indices: a batch needs at least one example")
            }
            ShapeProblem::ExampleSize {
                index,
                part,
                values,
                needed,
            } => write!(
                f,
                "example {index}'s {part} has {values} values, its shape needs {needed}"
            ),
            ShapeProblem::MixedKinds {
                index,
                part,
                kind,
                earlier,
            } => write!(
                f,
                "example {index}'s {part} is {kind} but earlier examples are {earlier}"
            ),
        }
    }
}

impl ShapeProblem {
    /// What would fix it, if anything is known.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            ShapeProblem::Counts { .. } => Some(Remedy::sentence("give one target per input")),
            ShapeProblem::Rank { .. } => Some(Remedy::sentence("flatten trailing dimensions")),
            ShapeProblem::ZeroDimension { .. }
            | ShapeProblem::Ragged { .. }
            | ShapeProblem::NoIndices
            | ShapeProblem::ExampleSize { .. }
            | ShapeProblem::MixedKinds { .. } => None,
        }
    }
}

/// Why a sampler, loader, subset or parse parameter is out of range
/// ([`DataError::BadParameter`](crate::DataError::BadParameter)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParameterProblem {
    /// No replicas.
    NoReplicas,
    /// A rank outside `0..replicas`.
    RankOutOfRange {
        /// Replicas.
        replicas: usize,
    },
    /// A dataset without examples.
    EmptyDataset,
    /// Fewer examples than replicas when a shard's tail is dropped: every shard is empty.
    EmptyShards {
        /// Examples.
        len: usize,
        /// Replicas.
        replicas: usize,
    },
    /// A batch of no examples.
    EmptyBatch,
    /// A context of no input tokens.
    ZeroContext,
    /// Variable lengths asked of a batch that holds no int token sequences `[rows, tokens]`.
    NotTokens {
        /// What it holds, e.g. "rank-2 float".
        found: String,
        /// Its shape.
        shape: Shape,
    },
    /// Sequences shorter than the length they are to be cut to.
    TooShortToCut {
        /// Tokens per sequence.
        tokens: usize,
        /// The length asked for.
        length: usize,
        /// The longest length the range draws.
        longest: usize,
    },
    /// A context range not written `MIN..MAX`.
    RangeForm,
    /// A context range whose bounds are not token counts.
    RangeCounts,
    /// A context range with a zero `MIN` or with `MIN` above `MAX`.
    RangeOrder {
        /// Its `MIN`.
        min: usize,
        /// Its `MAX`.
        max: usize,
    },
    /// A subset range that does not lie within its dataset.
    OutsideDataset {
        /// Examples of the dataset.
        len: usize,
    },
    /// A position not written `EPOCH/BATCH`.
    PositionForm,
    /// A burn dataset whose first item cannot be read.
    Unreadable {
        /// What burn's dataset said.
        said: String,
    },
    /// A declared shape that does not hold the first item's values.
    ItemShape {
        /// "input" or "target".
        part: &'static str,
        /// Values item 0 has.
        values: usize,
        /// "float" or "int".
        kind: &'static str,
        /// Values the shape holds.
        holds: usize,
    },
}

impl fmt::Display for ParameterProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParameterProblem::NoReplicas => f.write_str("at least one replica is needed"),
            ParameterProblem::RankOutOfRange { replicas } => {
                write!(f, "ranks of {replicas} replicas are 0..{replicas}")
            }
            ParameterProblem::EmptyDataset => f.write_str("the dataset is empty"),
            ParameterProblem::EmptyShards { len, replicas } => write!(
                f,
                "with drop_last, {len} examples among {replicas} replicas leave every replica \
                 empty"
            ),
            ParameterProblem::EmptyBatch => f.write_str("a batch needs at least one example"),
            ParameterProblem::ZeroContext => f.write_str("a window needs at least one input token"),
            ParameterProblem::NotTokens { found, shape } => write!(
                f,
                "the batch holds {found} values of shape {shape}, not rank-2 int token sequences"
            ),
            ParameterProblem::TooShortToCut { tokens, length, .. } => {
                write!(f, "sequences of {tokens} tokens cannot be cut to {length}")
            }
            ParameterProblem::RangeForm => {
                f.write_str("a range is MIN..MAX, e.g. 32..128 (both included)")
            }
            ParameterProblem::RangeCounts => {
                f.write_str("MIN and MAX are token counts, e.g. 32..128")
            }
            ParameterProblem::RangeOrder { min, max } => {
                write!(
                    f,
                    "MIN {min} and MAX {max} are not 1 ≤ MIN ≤ MAX, e.g. 32..128"
                )
            }
            ParameterProblem::OutsideDataset { len } => {
                write!(f, "a subset must lie within 0..{len} of its dataset")
            }
            ParameterProblem::PositionForm => f.write_str("a position is EPOCH/BATCH, e.g. 3/17"),
            ParameterProblem::Unreadable { said } => write!(f, "burn's dataset said: {said}"),
            ParameterProblem::ItemShape {
                part,
                values,
                kind,
                holds,
            } => write!(
                f,
                "item 0's {part} has {values} {kind} values, the shape holds {holds}"
            ),
        }
    }
}

impl ParameterProblem {
    /// What would fix it, if anything is known.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            ParameterProblem::NoReplicas => Some(Remedy::set(Setting::Replicas, Value::Count(1))),
            ParameterProblem::EmptyDataset => {
                Some(Remedy::sentence("load a dataset with at least one example"))
            }
            ParameterProblem::EmptyShards { .. } => Some(Remedy::one_of([
                Remedy::sentence("pad the shards instead (drop_last = false)"),
                Remedy::set(Setting::Replicas, Value::Smaller),
            ])),
            ParameterProblem::ZeroContext => Some(Remedy::set(Setting::Context, Value::Larger)),
            ParameterProblem::NotTokens { .. } => {
                Some(Remedy::set(Setting::Model, Value::mode("gpt")))
            }
            ParameterProblem::TooShortToCut { longest, .. } => {
                Some(Remedy::set(Setting::Context, Value::Count(*longest)))
            }
            ParameterProblem::ItemShape { part, .. } => Some(Remedy::sentence(format!(
                "give the shape of one {part} without the batch dimension"
            ))),
            ParameterProblem::RankOutOfRange { .. }
            | ParameterProblem::EmptyBatch
            | ParameterProblem::RangeForm
            | ParameterProblem::RangeCounts
            | ParameterProblem::RangeOrder { .. }
            | ParameterProblem::OutsideDataset { .. }
            | ParameterProblem::PositionForm
            | ParameterProblem::Unreadable { .. } => None,
        }
    }
}
