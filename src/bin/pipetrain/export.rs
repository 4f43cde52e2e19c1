//! `pipetrain export CKPT --format pytorch -o FILE`: a checkpoint's weights as the state dict of
//! the PyTorch module that mirrors its model ([`pipetrain::commands::export`]), written to `FILE`;
//! `--format hf -o DIR`: a Llama-family run's checkpoint as a Hugging Face checkpoint directory
//! ([`pipetrain::trainer::hf::export`]) that transformers' `from_pretrained` loads.

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
    /// A Hugging Face checkpoint directory (config.json + model.safetensors) of a Llama-family
    /// run, for transformers' `AutoModelForCausalLM.from_pretrained(DIR)`.
    Hf,
}

/// Arguments of `pipetrain export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A checkpoint written by `pipetrain train --checkpoint`.
    pub checkpoint: PathBuf,
    /// The layout to write.
    #[arg(long, value_enum, default_value_t)]
    pub format: ExportFormat,
    /// The file to write (`--format hf`: a new or empty directory).
    #[arg(short, long, value_name = "FILE|DIR")]
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
    if args.format == ExportFormat::Hf {
        return hf(args);
    }
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

/// `export --format hf`: the checkpoint as a Hugging Face directory.
fn hf(args: &ExportArgs) -> Result<Exit, Failure> {
    crate::paths::distinct(
        Files::new()
            .input("CKPT", Some(&args.checkpoint))
            .output("-o", Some(&args.output)),
    )?;
    let shown = args.checkpoint.display();
    let export = pipetrain::trainer::hf::export(&args.checkpoint, &args.output).map_err(|e| {
        let said = e.render(&Flags);
        match e {
            pipetrain::Error::Command(
                pipetrain::CommandError::ExportHfModel { .. }
                | pipetrain::CommandError::ExportHfDirectory { .. },
            ) => Failure::usage(format!(
                "export {shown} -o {}: {said}",
                args.output.display()
            )),
            pipetrain::Error::Engine(e) if e.is_file() => {
                Failure::usage(format!("export {shown}: {said}"))
            }
            _ => Failure::runtime(format!("export {shown}: {said}")),
        }
    })?;
    println!(
        "export: {} (config.json and model.safetensors, {} tensors, Hugging Face names) from \
         {shown} (step {})",
        args.output.display(),
        export.tensors,
        export.step
    );
    Ok(Exit::Success)
}
