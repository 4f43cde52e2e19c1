//! `pipetrain export CKPT --format pytorch -o FILE`: a checkpoint's weights as the state dict of
//! the PyTorch module that mirrors its model ([`pipetrain::commands::export`]), written to `FILE`.

use std::path::PathBuf;

use clap::ValueEnum;
use pipetrain::trainer::paths::Files;

use crate::exit::Exit;
use crate::failure::Failure;
use crate::style::Flags;

/// Layouts `export` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// The PyTorch module's state dict (safetensors, `format: pt`).
    #[default]
    Pytorch,
}

/// Arguments of `pipetrain export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A checkpoint written by `pipetrain train --checkpoint`.
    pub checkpoint: PathBuf,
    /// The layout to write.
    #[arg(long, value_enum, default_value_t)]
    pub format: ExportFormat,
    /// The file to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// Runs `pipetrain export`.
///
/// # Errors
/// Usage: not a pipetrain checkpoint, a model without a PyTorch mirror (ResNet), an output
/// directory that does not exist. Runtime: unreadable input, unwritable output.
pub fn run(args: &ExportArgs) -> Result<Exit, Failure> {
    crate::paths::inputs_exist(&[("CKPT", &Some(args.checkpoint.clone()))])
        .map_err(Failure::usage)?;
    crate::paths::distinct(
        Files::new()
            .input("CKPT", Some(&args.checkpoint))
            .output("-o", Some(&args.output)),
    )?;
    crate::paths::outputs_writable(&[("-o", &Some(args.output.clone()))])
        .map_err(Failure::usage)?;
    let shown = args.checkpoint.display();
    // In the command line's words: a weights file is told `--init`, not the library's call.
    let export = pipetrain::commands::export::to_pytorch(&args.checkpoint).map_err(|e| {
        let said = e.render(&Flags);
        match e {
            pipetrain::Error::Command(pipetrain::CommandError::ExportModel { .. }) => {
                Failure::usage(format!("export {shown}: {said}"))
            }
            pipetrain::Error::Engine(e) if e.is_file() => {
                Failure::usage(format!("export {shown}: {said}"))
            }
            // It names the file itself.
            pipetrain::Error::Command(pipetrain::CommandError::ExportFile { .. }) => {
                Failure::runtime(format!("export {said}"))
            }
            _ => Failure::runtime(format!("export {shown}: {said}")),
        }
    })?;
    // Atomically: a failed write (a full disk) leaves the file that was there.
    pipetrain::engine::output::write_atomically(&args.output, &export.bytes)
        .map_err(|e| format!("export -o {}: {e}", args.output.display()))?;
    println!(
        "export: {} ({} tensors, PyTorch names and [out, in] Linear weights) from {shown} (step {})",
        args.output.display(),
        export.tensors,
        export.step
    );
    Ok(Exit::Success)
}
