//! `--compare-pytorch`: a short speed check beside the PyTorch peer on the same device, as
//! `pipetrain bench` runs it (one row: the single-device MLP). A Python that is missing or
//! cannot import torch skips the check with a line that says why; it never fails the doctor.

use std::path::{Path, PathBuf};

use burn::prelude::Device;

use crate::commands::bench::{self, BenchSettings, GpuPeer, Peers, median};

/// The PyTorch peer to compare with.
#[derive(Clone, Debug)]
pub struct SpeedCheck {
    /// The Python that imports torch.
    pub python: PathBuf,
    /// The folder of the peer scripts; `None`: found as `pipetrain bench` finds it.
    pub peers: Option<PathBuf>,
}

/// Runs the check on `device`, and says what it measured (or why it did not), line by line.
pub(super) fn speed(device: &Device, check: &SpeedCheck, tell: &dyn Fn(String)) {
    if !check.python.exists() && !on_path(&check.python) {
        return tell(format!(
            "speed check skipped: {} does not exist; give a Python that imports torch \
             ({})",
            check.python.display(),
            bench::HOW_TO_GET_TORCH
        ));
    }
    let result = match crate::engine::device::is_cpu(device) {
        true => cpu(check, tell),
        false => gpu(device, check, tell),
    };
    if let Err(why) = result {
        tell(format!("speed check skipped: {why}"));
    }
}

/// The CPU's single-device MLP row beside `bench_single.py`.
fn cpu(check: &SpeedCheck, tell: &dyn Fn(String)) -> Result<(), String> {
    let peers = Peers::find(&check.python, check.peers.as_deref()).map_err(|e| e.to_string())?;
    let settings = BenchSettings {
        width: 256,
        hidden_layers: 4,
        batch: 64,
        steps: 4,
        warmup: 1,
        micro_batches: vec![1],
        gpt_width: 0,
        llama_width: 0,
        only: Some("single device".into()),
        peers: Some(peers.clone()),
        ..BenchSettings::default()
    };
    let report = bench::run(&settings, &mut |_| {}).map_err(|e| e.to_string())?;
    for line in &report.lines {
        let ours = median(&line.ours.rates);
        let theirs = match &line.peer {
            Some(Ok(peer)) => format!(
                "PyTorch {} {:.0} samples/s, {:.2}x",
                peers.torch,
                peer.median,
                ours / peer.median
            ),
            Some(Err(why)) => format!("PyTorch: {why}"),
            None => "no PyTorch peer for this row".into(),
        };
        tell(format!(
            "speed: {} (MLP-{}x{}, batch {}): {ours:.0} samples/s; {theirs}",
            line.row.label(),
            settings.hidden_layers,
            settings.width,
            settings.batch
        ));
    }
    Ok(())
}

/// The GPU's MLP-8x1024 batch-256 row beside `torch_gpu.py`.
fn gpu(device: &Device, check: &SpeedCheck, tell: &dyn Fn(String)) -> Result<(), String> {
    let dir = bench::gpu_peers_dir(check.peers.as_deref())
        .filter(|d| d.join("torch_gpu.py").is_file())
        .ok_or_else(|| "no scripts/peers/torch_gpu.py found; give --peers DIR".to_string())?;
    let peer = GpuPeer {
        python: check.python.clone(),
        dir,
    };
    let settings = BenchSettings {
        steps: 5,
        warmup: 2,
        gpt_width: 0,
        llama_width: 0,
        only: Some("MLP-8x1024".into()),
        ..BenchSettings::default()
    };
    let report =
        bench::run_gpu(&settings, device, Some(&peer), &mut |_| {}).map_err(|e| e.to_string())?;
    for line in &report.lines {
        let ours = median(&line.ours);
        let theirs = match line.theirs.is_empty() {
            true => "no PyTorch figure".to_string(),
            false => {
                let t = median(&line.theirs);
                format!("PyTorch {t:.0} samples/s, {:.2}x", ours / t)
            }
        };
        tell(format!(
            "speed: {}: {ours:.0} samples/s (first step {:.2} s); {theirs}",
            line.name,
            line.first_steps.first().copied().unwrap_or(f64::NAN)
        ));
    }
    for failure in &report.peer_failures {
        tell(format!("speed: PyTorch failed: {failure}"));
    }
    Ok(())
}

/// Whether `python` names a program to look up on `PATH` (one component, no folder).
fn on_path(python: &Path) -> bool {
    python.components().count() == 1
}
