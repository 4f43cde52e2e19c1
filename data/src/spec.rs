//! `DataSpec`: which data a run trains on, as the text a user types (`mnist:data/mnist`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::dataset::InMemory;
use crate::error::{DataError, Result};
use crate::{cifar10, mnist, tensors, text};

/// Where a run's data comes from. The text form (`FromStr` / `Display`) round-trips:
///
/// | text           | data                                                                 |
/// |----------------|----------------------------------------------------------------------|
/// | `synthetic`    | generated per batch (`pipetrain_models::synthetic`), nothing loaded  |
/// | `mnist:DIR`    | `DIR/train-images-idx3-ubyte` + `DIR/train-labels-idx1-ubyte`        |
/// | `cifar10:DIR`  | those of `DIR/data_batch_1.bin` … `data_batch_5.bin` present         |
/// | `text:FILE`    | byte-level next-token windows of a text file                         |
/// | `tensors:FILE` | tensors `x` and `y` of a safetensors file                            |
///
/// ```
/// use pipetrain_data::DataSpec;
/// let spec: DataSpec = "mnist:data/mnist".parse()?;
/// assert_eq!(spec, DataSpec::Mnist("data/mnist".into()));
/// assert_eq!(spec.to_string(), "mnist:data/mnist");
/// let err = "imagenet:/data".parse::<DataSpec>().unwrap_err();
/// assert!(err.to_string().contains("imagenet:/data"));
/// assert!(err.to_string().contains("cifar10:DIR"));
/// # Ok::<(), pipetrain_data::DataError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSpec {
    /// Seeded synthetic batches.
    Synthetic,
    /// MNIST IDX files in a directory.
    Mnist(PathBuf),
    /// CIFAR-10 binary batches in a directory.
    Cifar10(PathBuf),
    /// A text file.
    Text(PathBuf),
    /// A safetensors file.
    Tensors(PathBuf),
}

impl DataSpec {
    /// The file or directory the spec reads; `None` for `synthetic`.
    pub fn path(&self) -> Option<&Path> {
        match self {
            DataSpec::Synthetic => None,
            DataSpec::Mnist(dir) | DataSpec::Cifar10(dir) => Some(dir),
            DataSpec::Text(file) | DataSpec::Tensors(file) => Some(file),
        }
    }

    /// The single file a `text:` or `tensors:` spec reads (not a directory of files).
    pub fn file(&self) -> Option<&Path> {
        match self {
            DataSpec::Text(file) | DataSpec::Tensors(file) => Some(file),
            _ => None,
        }
    }

    /// Every file the spec may read: the `text:` or `tensors:` file, MNIST's two training files,
    /// CIFAR-10's five training batches (whichever exist when it loads); none for
    /// `synthetic`. No output may be one of them.
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            DataSpec::Synthetic => Vec::new(),
            DataSpec::Mnist(dir) => [mnist::TRAIN_IMAGES, mnist::TRAIN_LABELS]
                .iter()
                .map(|name| dir.join(name))
                .collect(),
            DataSpec::Cifar10(dir) => cifar10::TRAIN_FILES
                .iter()
                .map(|name| dir.join(name))
                .collect(),
            DataSpec::Text(file) | DataSpec::Tensors(file) => vec![file.clone()],
        }
    }

    /// Loads the data; `context` is the window length of `text:` specs (ignored otherwise).
    /// `synthetic` has nothing to load and is an error.
    pub fn load(&self, context: usize) -> Result<InMemory> {
        match self {
            DataSpec::Synthetic => Err(DataError::SyntheticNotLoadable),
            DataSpec::Mnist(dir) => mnist::load_dir(dir),
            DataSpec::Cifar10(dir) => cifar10::load_dir(dir),
            DataSpec::Text(file) => text::load(file, context),
            DataSpec::Tensors(file) => tensors::load(file),
        }
    }

    /// Whether this is `synthetic`.
    pub fn is_synthetic(&self) -> bool {
        matches!(self, DataSpec::Synthetic)
    }
}

impl FromStr for DataSpec {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| DataError::BadSpec {
            value: s.to_string(),
            reason: reason.to_string(),
        };
        if s == "synthetic" {
            return Ok(DataSpec::Synthetic);
        }
        let (kind, path) = s
            .split_once(':')
            .ok_or_else(|| bad("expected `synthetic` or KIND:PATH"))?;
        if path.is_empty() {
            return Err(bad(&format!("`{kind}:` needs a path after the colon")));
        }
        let path = PathBuf::from(path);
        Ok(match kind {
            "mnist" => DataSpec::Mnist(path),
            "cifar10" => DataSpec::Cifar10(path),
            "text" => DataSpec::Text(path),
            "tensors" => DataSpec::Tensors(path),
            other => return Err(bad(&format!("unknown kind `{other}`"))),
        })
    }
}

impl fmt::Display for DataSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, path) = match self {
            DataSpec::Synthetic => return f.write_str("synthetic"),
            DataSpec::Mnist(p) => ("mnist", p),
            DataSpec::Cifar10(p) => ("cifar10", p),
            DataSpec::Text(p) => ("text", p),
            DataSpec::Tensors(p) => ("tensors", p),
        };
        write!(f, "{kind}:{}", path.display())
    }
}
