//! The subcommands' library side: what `pipetrain bench`, `tune`, `plan`, `export`, `--plot`
//! and `--profile` compute, apart from the pipeline they drive (the builder, the setup, the
//! pipeline and the run loop are the crate's root). The binary adds only its flags and words.
//!
//! - [`plan`]: a plan's report (bubble, memory, cost), compared across schedules;
//! - [`tune`]: the configuration search run on a model (`pipetrain-tune` is the search itself);
//! - `bench` (feature `commands`): the throughput table, beside PyTorch's peers;
//! - `doctor` (feature `commands`): the self-check of a device (libraries, the equivalence
//!   sweep, a speed check beside PyTorch);
//! - `export` (feature `commands`): a checkpoint as a PyTorch state dict;
//! - `plot` and `profile` (feature `trainer`): the loss plot and the chrome-trace profile of a
//!   training run;
//! - [`reads`]: which of a training run's settings `eval` and `tune` read (one rule: a setting
//!   given that changes nothing is refused).

#[cfg(feature = "commands")]
pub mod bench;
#[cfg(feature = "commands")]
pub mod doctor;
#[cfg(feature = "commands")]
pub mod export;
pub mod plan;
#[cfg(feature = "trainer")]
pub mod plot;
#[cfg(feature = "trainer")]
pub mod profile;
pub mod reads;
pub mod tune;
