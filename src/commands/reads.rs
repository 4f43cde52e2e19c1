//! One rule for every subcommand that takes a training run's settings (issue 47, class 3): a
//! setting given that the subcommand would not read changes nothing, so it is refused as a usage
//! error naming it, never accepted in silence. `train` reads them all; [`Reader`] lists the
//! others, `eval` and `tune`, and [`why_unread`] says what each does with a setting.
//!
//! Settings are named by their key: the long name of the command line's flag with `_` for
//! `-`, which is also the `--config` file's key (`hidden_layers`, `lr`, `no_shuffle`).
//!
//! | setting | `eval` | `tune` | `tune --apply FILE` |
//! | --- | --- | --- | --- |
//! | the model and its sizes, `batch`, `seed`, `device`, `matmul_precision`, `config` | read | read | read, and written to FILE |
//! | `data` and the data settings | read | refused | written to FILE |
//! | `init`, `resume`, `rename` | read | refused | refused |
//! | the optimizer, its settings, `precision`, `remat`, `memory_budget` | refused | read | read, and written to FILE (but `memory_budget`) |
//! | the learning-rate schedule, clipping, `skip_nonfinite`, `steps` | refused | refused | written to FILE |
//! | the layout tune searches (`stages`, `balance`, `replicas`, `micro_batches`, `schedule`, `virtual_stages`, `threads`) | refused | refused (chosen) | refused (chosen) |
//! | everything else (outputs, checkpoints, verification, MPI, ...) | refused | refused | refused |

use crate::Error;
use crate::error::CommandError;

/// A subcommand that takes the settings of a training run but reads only some of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `eval`: the model, its weights and the held-out data.
    Eval,
    /// `tune`: the model and optimizer it times; with `apply`, the settings its applied file
    /// carries to the training run too.
    Tune {
        /// Whether an applied file (the winner as a config file) is asked for.
        apply: bool,
    },
}

impl Reader {
    /// The subcommand's name.
    pub fn command(self) -> &'static str {
        match self {
            Reader::Eval => "eval",
            Reader::Tune { .. } => "tune",
        }
    }
}

/// Why a setting given to a [`Reader`] would change nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Only a training run reads it (an output, a checkpoint, the layout, verification, ...).
    TrainOnly,
    /// `tune` chooses it: every value is searched, and the winner's is what it applies.
    Chosen,
    /// `tune` only writes it into its applied file, and no applied file is asked for.
    ApplyOnly,
}

/// The model: which one and its sizes. Every reader builds it.
const MODEL: [&str; 17] = [
    "model",
    "width",
    "hidden_layers",
    "classes",
    "channels",
    "blocks",
    "image",
    "depth",
    "vocab",
    "context",
    "context_range",
    "d_model",
    "heads",
    "kv_heads",
    "intermediate",
    "layers",
    "tie_embeddings",
];

/// Read by every reader beside the model.
const COMMON: [&str; 5] = ["config", "batch", "seed", "device", "matmul_precision"];

/// The data settings: `eval` reads them (the held-out split); `tune` times synthetic batches
/// and only carries them to its applied file.
const DATA: [&str; 6] = [
    "data",
    "tokenizer",
    "held_out",
    "allow_nonfinite_inputs",
    "keep_last",
    "no_shuffle",
];

/// What `eval` reads beside the model and [`COMMON`]: the weights and the held-out data (the
/// training order, `keep_last` and `no_shuffle`, it never draws).
const EVAL: [&str; 7] = [
    "data",
    "tokenizer",
    "held_out",
    "allow_nonfinite_inputs",
    "init",
    "resume",
    "rename",
];

/// What `tune`'s trial runs read beside the model and [`COMMON`].
const TUNE: [&str; 11] = [
    "optimizer",
    "lr",
    "momentum",
    "dampening",
    "nesterov",
    "betas",
    "eps",
    "weight_decay",
    "precision",
    "remat",
    "memory_budget",
];

/// What `tune` only writes into its applied file beside [`DATA`]: the rest of the training run.
const TUNE_APPLIED: [&str; 8] = [
    "lr_schedule",
    "warmup_steps",
    "min_lr",
    "lr_step_size",
    "lr_gamma",
    "clip_grad_norm",
    "skip_nonfinite",
    "steps",
];

/// The layout `tune` searches.
const TUNE_CHOSEN: [&str; 7] = [
    "stages",
    "balance",
    "replicas",
    "micro_batches",
    "schedule",
    "virtual_stages",
    "threads",
];

/// Why `key`, given to `reader`, would change nothing; `None` when it reads it.
pub fn why_unread(reader: Reader, key: &str) -> Option<Unread> {
    let within = |list: &[&str]| list.contains(&key);
    if within(&MODEL) || within(&COMMON) {
        return None;
    }
    match reader {
        Reader::Eval if within(&EVAL) => None,
        Reader::Eval => Some(Unread::TrainOnly),
        Reader::Tune { .. } if within(&TUNE) => None,
        Reader::Tune { .. } if within(&TUNE_CHOSEN) => Some(Unread::Chosen),
        Reader::Tune { apply } if within(&DATA) || within(&TUNE_APPLIED) => {
            (!apply).then_some(Unread::ApplyOnly)
        }
        Reader::Tune { .. } => Some(Unread::TrainOnly),
    }
}

/// Whether `tune`'s applied file carries `key` to the training run when it was given: every
/// setting it reads or carries but the search space's (`memory_budget`, `remat`: the winner's
/// own knobs say them) and the config file itself.
pub fn tune_applies(key: &str) -> bool {
    let carried = [&MODEL[..], &COMMON, &DATA, &TUNE, &TUNE_APPLIED].concat();
    carried.contains(&key) && !matches!(key, "config" | "memory_budget" | "remat")
}

/// Every setting given to `reader` is one it reads. `given` holds each setting given as its
/// key and as its user knows it (`("steps", "--steps 5")`); the error repeats the latter.
///
/// # Errors
/// [`CommandError::Unread`], for the first setting given that `reader` would not read.
pub fn check(reader: Reader, given: &[(&str, &str)]) -> Result<(), Error> {
    match given
        .iter()
        .find_map(|(key, shown)| Some((shown, why_unread(reader, key)?)))
    {
        Some((shown, why)) => Err(Error::Command(CommandError::Unread {
            setting: (*shown).to_string(),
            command: reader.command(),
            why,
        })),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_reads_its_settings_and_refuses_the_rest() {
        let apply = Reader::Tune { apply: true };
        let bare = Reader::Tune { apply: false };
        for key in ["width", "seed", "batch", "config"] {
            for reader in [Reader::Eval, apply, bare] {
                assert_eq!(why_unread(reader, key), None, "{key}");
            }
        }
        assert_eq!(why_unread(Reader::Eval, "init"), None);
        assert_eq!(why_unread(Reader::Eval, "steps"), Some(Unread::TrainOnly));
        assert_eq!(
            why_unread(Reader::Eval, "precision"),
            Some(Unread::TrainOnly)
        );
        assert_eq!(why_unread(bare, "stages"), Some(Unread::Chosen));
        assert_eq!(why_unread(bare, "data"), Some(Unread::ApplyOnly));
        assert_eq!(why_unread(apply, "data"), None);
        assert_eq!(why_unread(apply, "init"), Some(Unread::TrainOnly));
        assert_eq!(why_unread(apply, "checkpoint"), Some(Unread::TrainOnly));
        assert!(tune_applies("momentum") && tune_applies("data") && tune_applies("seed"));
        assert!(!tune_applies("remat") && !tune_applies("stages") && !tune_applies("init"));
        let e = check(
            Reader::Eval,
            &[("seed", "--seed 1"), ("steps", "--steps 5")],
        );
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("--steps 5") && e.contains("`pipetrain eval`"),
            "{e}"
        );
    }
}
