//! What the subcommands' library side (`crate::commands`: bench, tune, plan, export) refuses
//! or fails on: [`CommandError`]. Facts only; the binary names its flags.

use pipetrain_tune::TuneError;

use super::ErrorClass;
use crate::remedy::{Remedy, Setting, Value};

/// A subcommand's failure ([`Error::Command`](super::Error::Command)).
#[derive(Debug)]
#[non_exhaustive]
pub enum CommandError {
    /// A bench setting that every row needs at least 1 of is 0.
    BenchZero {
        /// The [`BenchSettings`](crate::commands::bench::BenchSettings) field.
        setting: &'static str,
    },
    /// The batch does not split evenly over a row's replicas × micro-batches.
    BenchBatchSplit {
        /// Rows per step.
        batch: usize,
        /// The row's replicas.
        replicas: usize,
        /// The row's micro-batches.
        micro_batches: usize,
        /// The row's label.
        row: String,
    },
    /// The row filter matches no row.
    BenchNoRow {
        /// The filter.
        only: String,
        /// Every row there is.
        rows: Vec<String>,
    },
    /// One of our bench rows failed.
    BenchRow {
        /// The row's label.
        row: String,
        /// What failed.
        reason: String,
    },
    #[cfg(feature = "commands")]
    /// The folder given for the PyTorch peer scripts does not hold them.
    PeersNoScripts {
        /// The folder.
        dir: std::path::PathBuf,
    },
    #[cfg(feature = "commands")]
    /// No folder was given for the PyTorch peer scripts and none was found.
    PeersNotFound,
    #[cfg(feature = "commands")]
    /// The Python given for the PyTorch peers cannot import torch.
    PeersNoTorch {
        /// The Python.
        python: std::path::PathBuf,
    },
    #[cfg(feature = "commands")]
    /// The Python given for the PyTorch peers did not answer the probe (`import torch, numpy`)
    /// in time, and was stopped.
    PeersNoAnswer {
        /// The Python.
        python: std::path::PathBuf,
        /// How long it was given.
        seconds: f64,
    },
    /// No configuration of the tune search fits (its memory budget, its workers).
    TuneNothingFits {
        /// `  knobs: why` for the first configurations left out.
        left_out: Vec<String>,
    },
    #[cfg(feature = "commands")]
    /// The tune cache holds a cost table that no measurement gives.
    TuneCache {
        /// The cache file.
        path: std::path::PathBuf,
        /// What is wrong with its table.
        problem: TuneError,
    },
    /// A plan cost that is negative, not finite, or a weight gradient above the backward.
    PlanCost {
        /// Which cost: `forward`, `backward`, `weight` or `transfer`.
        cost: &'static str,
        /// The value given.
        value: f64,
        /// What is wrong and what to give instead.
        reason: String,
    },
    #[cfg(feature = "trainer")]
    /// A plan whose report this machine cannot hold, or whose simulation would take minutes
    /// ([`crate::commands::plan::limits`]).
    PlanTooLarge {
        /// Its shape.
        shape: crate::commands::plan::limits::Shape,
        /// Why it is refused.
        refused: crate::commands::plan::limits::TooLarge,
        /// The largest sizes that fit, or another output.
        fix: Remedy,
    },
    #[cfg(feature = "trainer")]
    /// A model this machine cannot train ([`crate::trainer::footprint::check_training`]).
    TooLargeToTrain {
        /// The model, described.
        model: String,
        /// The bytes training it needs.
        needed: u128,
        /// Its parameters.
        params: u128,
        /// Its activations per example.
        activations_per_example: u128,
        /// Examples per step.
        batch: usize,
        /// Copies of the model this process holds.
        copies: f64,
        /// What is available, and what limits it.
        why: String,
        /// The settings that size the model, in the front end's words (`--width, --batch`).
        sizes: String,
    },
    /// The checkpoint's model has no PyTorch module to export to.
    ExportModel {
        /// The model the checkpoint records, if it records one.
        model: Option<String>,
    },
    /// The checkpoint's model is not a Llama-family decoder, which `--format hf` writes.
    ExportHfModel {
        /// The model the checkpoint records, if it records one.
        model: Option<String>,
    },
    /// The directory `--format hf` would write into holds files already.
    ExportHfDirectory {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// A checkpoint tensor that is not F32.
    ExportTensor {
        /// The tensor's name.
        tensor: String,
        /// Its element type.
        dtype: String,
    },
    /// The doctor was asked for a section it does not have.
    DoctorNoSection {
        /// The name asked for.
        name: String,
        /// Every section there is.
        sections: Vec<&'static str>,
    },
    /// The doctor's scratch folder (its checkpoints) cannot be made.
    DoctorScratch {
        /// The folder.
        path: std::path::PathBuf,
        /// What failed.
        reason: String,
    },
    /// A checkpoint that cannot be read as safetensors, or an export that cannot be encoded.
    ExportFile {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// What failed.
        reason: String,
    },
    /// A setting given to a subcommand that would not read it
    /// ([`crate::commands::reads`]).
    Unread {
        /// The setting as its user gave it (`--steps 5`).
        setting: String,
        /// The subcommand (`eval`, `tune`).
        command: &'static str,
        /// Why it would change nothing.
        why: crate::commands::reads::Unread,
    },
}

impl CommandError {
    /// The facts.
    pub(super) fn facts(&self) -> String {
        match self {
            #[cfg(feature = "trainer")]
            CommandError::PlanTooLarge { shape, refused, .. } => refused.facts(*shape),
            #[cfg(feature = "trainer")]
            CommandError::TooLargeToTrain {
                model,
                needed,
                params,
                activations_per_example,
                batch,
                copies,
                why,
                ..
            } => format!(
                "{model}: training it needs about {} ({params} parameters with their gradients \
                 and optimizer state, and {activations_per_example} activations per example at \
                 --batch {batch}, for {} of the model: the replicas and --verify's reference \
                 this process holds), {why}",
                crate::trainer::footprint::gib(*needed),
                match copies {
                    1.0 => "1 copy".to_string(),
                    c if c.fract() == 0.0 => format!("{c} copies"),
                    c => format!("{c:.2} copies"),
                }
            ),
            CommandError::BenchZero { setting } => {
                format!("bench setting `{setting}` is 0: every row needs at least 1")
            }
            CommandError::BenchBatchSplit {
                batch,
                replicas,
                micro_batches,
                row,
            } => format!(
                "batch {batch} does not split into {replicas} replica(s) × {micro_batches} \
                 micro-batches (row `{row}`)"
            ),
            CommandError::BenchNoRow { only, rows } => {
                format!("{only:?} matches no row; rows are: {}", rows.join("; "))
            }
            CommandError::BenchRow { row, reason } => format!("{row}: {reason}"),
            #[cfg(feature = "commands")]
            CommandError::PeersNoScripts { dir } => format!(
                "{}: no common.py there; the peers folder holds bench_single.py, bench_ddp.py, \
                 bench_pipe.py and common.py",
                dir.display()
            ),
            #[cfg(feature = "commands")]
            CommandError::PeersNotFound => "no PyTorch peer scripts found (looked for \
                                     shared/peers/common.py in every folder above the program \
                                     and the source tree)"
                .into(),
            #[cfg(feature = "commands")]
            CommandError::PeersNoTorch { python } => format!(
                "{} cannot import torch and numpy, so no PyTorch column",
                python.display()
            ),
            #[cfg(feature = "commands")]
            CommandError::PeersNoAnswer { python, seconds } => format!(
                "{} did not answer `import torch, numpy` within {seconds} s and was stopped, so \
                 no PyTorch column",
                python.display()
            ),
            #[cfg(feature = "commands")]
            CommandError::TuneCache { path, problem } => {
                format!("tune cache {}: {problem}", path.display())
            }
            CommandError::TuneNothingFits { left_out } => format!(
                "no configuration fits; the first left out:\n{}",
                left_out.join("\n")
            ),
            CommandError::PlanCost {
                cost,
                value,
                reason,
            } => format!(
                "{cost} cost {}: {reason}",
                crate::commands::plan::short(*value)
            ),
            CommandError::ExportModel { model } => format!(
                "the model {} has no documented PyTorch module (MLP and GPT have)",
                model.as_deref().unwrap_or("(not recorded)")
            ),
            CommandError::ExportHfModel { model } => format!(
                "the model {} is not a Llama-family decoder (--format hf writes those: --model \
                 llama, or --init hf:DIR)",
                model.as_deref().unwrap_or("(not recorded)")
            ),
            CommandError::ExportHfDirectory { path } => format!(
                "{} exists and is not empty: a Hugging Face checkpoint is a directory of its own, \
                 and export replaces no file it did not write",
                path.display()
            ),
            CommandError::ExportTensor { tensor, dtype } => {
                format!("tensor `{tensor}` is {dtype}; checkpoints hold F32 weights")
            }
            CommandError::ExportFile { path, reason } => format!("{}: {reason}", path.display()),
            CommandError::DoctorNoSection { name, sections } => format!(
                "the doctor has no section {name:?}; its sections: {}",
                sections.join(", ")
            ),
            CommandError::DoctorScratch { path, reason } => format!(
                "the doctor's scratch folder {} cannot be made: {reason}",
                path.display()
            ),
            CommandError::Unread {
                setting,
                command,
                why,
            } => {
                use crate::commands::reads::Unread;
                let why = match why {
                    Unread::TrainOnly if *command == "eval" => {
                        "eval trains nothing and writes nothing: only `pipetrain train` reads it"
                    }
                    Unread::TrainOnly => {
                        "tune's trial runs do not read it and its applied file does not carry \
                         it: only `pipetrain train` reads it"
                    }
                    Unread::Chosen => {
                        "tune chooses it: it searches every value, and the applied file holds \
                         the winner's"
                    }
                    Unread::ApplyOnly => {
                        "tune times synthetic batches and only writes it into the applied file, \
                         but no applied file is asked for"
                    }
                };
                format!("{setting} would change nothing in `pipetrain {command}`: {why}")
            }
        }
    }

    /// What fixes it.
    pub(super) fn remedy(&self) -> Option<Remedy> {
        match self {
            #[cfg(feature = "trainer")]
            CommandError::PlanTooLarge { fix, .. } => Some(fix.clone()),
            #[cfg(feature = "trainer")]
            CommandError::TooLargeToTrain { sizes, .. } => {
                Some(Remedy::sentence(format!("use a smaller {sizes}")))
            }
            CommandError::BenchBatchSplit {
                replicas,
                micro_batches,
                ..
            } => Some(Remedy::one_of([
                Remedy::sentence(format!(
                    "give a batch that is a multiple of {}",
                    replicas * micro_batches
                )),
                Remedy::sentence(format!(
                    "leave {micro_batches} out of the micro-batch counts"
                )),
            ])),
            #[cfg(feature = "commands")]
            CommandError::PeersNoTorch { .. } | CommandError::PeersNoAnswer { .. } => {
                Some(Remedy::sentence(crate::commands::bench::HOW_TO_GET_TORCH))
            }
            #[cfg(feature = "commands")]
            CommandError::PeersNoScripts { .. } | CommandError::PeersNotFound => Some(
                Remedy::sentence("give the folder that holds the peer scripts (shared/peers)"),
            ),
            #[cfg(feature = "commands")]
            CommandError::TuneCache { .. } => Some(Remedy::set(Setting::Remeasure, Value::On)),
            CommandError::TuneNothingFits { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::MemoryBudget, Value::Larger),
                Remedy::set(Setting::Remat, Value::mode("always")),
                Remedy::set(Setting::Workers, Value::Larger),
            ])),
            CommandError::ExportModel { .. } => Some(Remedy::sentence(
                "load the checkpoint with pipetrain instead",
            )),
            CommandError::ExportHfModel { .. } => Some(Remedy::sentence(
                "export it with --format pytorch, or load it with pipetrain",
            )),
            CommandError::ExportHfDirectory { .. } => {
                Some(Remedy::sentence("give -o a new or empty directory"))
            }
            CommandError::DoctorNoSection { .. } => Some(Remedy::sentence(
                "name one of the sections listed, or leave the sections out to run them all",
            )),
            CommandError::DoctorScratch { .. } => Some(Remedy::sentence(
                "set TMPDIR to a folder that can be written",
            )),
            CommandError::Unread { setting, why, .. } => {
                use crate::commands::reads::Unread;
                let flag = setting.split(' ').next().unwrap_or(setting);
                Some(Remedy::sentence(match why {
                    Unread::TrainOnly => format!("drop {flag}, or give it to `pipetrain train`"),
                    Unread::Chosen => format!("drop {flag}: tune searches it"),
                    Unread::ApplyOnly => format!(
                        "drop {flag}, or ask for the applied file (`pipetrain tune --apply FILE`)"
                    ),
                }))
            }
            CommandError::BenchZero { .. }
            | CommandError::BenchNoRow { .. }
            | CommandError::BenchRow { .. }
            | CommandError::PlanCost { .. }
            | CommandError::ExportTensor { .. }
            | CommandError::ExportFile { .. } => None,
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Usage or runtime ([`Error::class`](super::Error::class)): settings that give no row,
    /// no fitting configuration, a refused cache, a plan cost or a model the checkpoint does
    /// not name are the request's; a bench row, the PyTorch peers or a file that fails are the
    /// run's.
    pub(super) fn class(&self) -> ErrorClass {
        match self {
            CommandError::BenchZero { .. }
            | CommandError::BenchBatchSplit { .. }
            | CommandError::BenchNoRow { .. }
            | CommandError::TuneNothingFits { .. }
            | CommandError::PlanCost { .. }
            | CommandError::DoctorNoSection { .. }
            | CommandError::ExportModel { .. }
            | CommandError::Unread { .. } => ErrorClass::Usage,
            #[cfg(feature = "commands")]
            CommandError::TuneCache { .. } => ErrorClass::Usage,
            #[cfg(feature = "trainer")]
            CommandError::PlanTooLarge { .. } | CommandError::TooLargeToTrain { .. } => {
                ErrorClass::Usage
            }
            _ => ErrorClass::Runtime,
        }
    }
}
