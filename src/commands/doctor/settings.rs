//! What the doctor checks and how: [`DoctorSettings`].

use std::path::PathBuf;
use std::time::Duration;

use burn::prelude::Device;

use super::speed::SpeedCheck;
use crate::MatmulPrecision;

/// The settings of a doctor run ([`run`](super::run)).
#[derive(Clone, Debug)]
pub struct DoctorSettings {
    /// The device the sweep runs on (probed already: see
    /// [`engine::device::cuda_with`](crate::engine::device::cuda_with)).
    pub device: Device,
    /// Its name in the report: `cpu`, `cuda:0`.
    pub name: String,
    /// The matmul precision the device was started with.
    pub precision: MatmulPrecision,
    /// The quick sweep: a few cases of each section, small shapes.
    pub quick: bool,
    /// Only these sections, by name ([`SECTIONS`](super::section_names)); `None`: all.
    pub sections: Option<Vec<String>>,
    /// How often the heartbeat says where the sweep stands while a case runs.
    pub heartbeat: Duration,
    /// The folders searched for the CUDA libraries ([`search_path`](super::search_path)).
    pub library_path: Vec<PathBuf>,
    /// The kernel cache folder (`pipetrain_engine::device::kernel_cache_dir`), if known.
    pub cache: Option<PathBuf>,
    /// A folder the cases may write their checkpoints in (made and removed by the run).
    pub scratch: PathBuf,
    /// The speed check beside PyTorch, if wanted.
    pub speed: Option<SpeedCheck>,
    /// A test knob: the cases whose name holds this text compare weights moved by 1.0, so they
    /// fail (the way to see the doctor's failure path and exit code on a healthy machine).
    pub perturb: Option<String>,
}

impl DoctorSettings {
    /// The full sweep on `device`, named `name`, a heartbeat every 5 s, no cache, no speed
    /// check, scratch files under the system's temporary folder.
    pub fn new(device: Device, name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            device,
            precision: MatmulPrecision::default(),
            quick: false,
            sections: None,
            heartbeat: Duration::from_secs(5),
            library_path: super::search_path(None),
            cache: None,
            scratch: std::env::temp_dir().join(format!(
                "pipetrain-doctor-{}-{}",
                std::process::id(),
                name.replace(':', "")
            )),
            speed: None,
            perturb: None,
            name,
        }
    }
}
