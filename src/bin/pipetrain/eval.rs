//! `pipetrain eval`: the held-out evaluation of a model built from the flags (the library's
//! [`pipetrain::trainer::eval`]), with the weights of `--init` or `--resume`.

use pipetrain::trainer::eval::evaluate_layers;
use pipetrain::{Layer, RunFile};

use crate::args::TrainArgs;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::model::ReferenceModel;
use crate::paths;

/// The weights to evaluate: `--init FILE` (a checkpoint or a state dict) or `--resume FILE` (a
/// checkpoint's weights), else the fresh init.
fn weights<L: Layer>(
    args: &TrainArgs,
    model: &ReferenceModel,
    layers: Vec<L>,
) -> Result<Vec<L>, Failure> {
    match (&args.init, &args.resume) {
        (Some(path), _) => crate::checkpoints::init(path, layers, args, model),
        (None, Some(path)) => {
            crate::checkpoints::weights_of(RunFile::Resume, path, layers, args, model)
        }
        (None, None) => Ok(layers),
    }
}

/// `pipetrain eval`: builds the model from `--seed`, loads `--init FILE` or `--resume FILE` if
/// given (e.g. a checkpoint of a trained run), evaluates it on the held-out split of `--data`,
/// and prints the result.
///
/// # Errors
/// Bad flags, or data or weights that do not fit them (usage); unreadable data or weights, or
/// a forward error (runtime).
pub fn run(args: &TrainArgs) -> Result<Exit, Failure> {
    crate::conflicts::eval(args)?;
    if args.batch == 0 {
        // It reported 0 % on 0 examples, with rc 0.
        return Err(Failure::usage(
            "--batch 0: eval runs the held-out examples in batches of --batch rows; give at \
             least 1",
        ));
    }
    paths::inputs_exist(&[("--init", &args.init), ("--resume", &args.resume)])
        .map_err(Failure::usage)?;
    let device = args
        .device
        .first()
        .device(args.matmul_precision)
        .map_err(Failure::usage)?;
    device.seed(args.seed);
    // Nothing trains: the training loader is built with batches of 1, so that a --batch larger
    // than the training split is no error here (it only sizes the held-out chunks).
    let data = crate::data::open(args, 1)?;
    let model = crate::model::from_args(args, data.shapes()).map_err(Failure::usage)?;
    crate::model::check_fits(&model, args.batch, 0, 1.0).map_err(Failure::usage)?;
    let held_out = data.held_out(&model, args.batch, &device);
    let held_out = held_out.map_err(crate::run_failure::of_run)?;
    let lm = model.is_language_model();
    let m = &model;
    let evaluation = match model {
        ReferenceModel::Mlp(c) => {
            evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm)
        }
        ReferenceModel::ResNet(c) => {
            evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm)
        }
        ReferenceModel::UNet(c) => {
            evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm)
        }
        ReferenceModel::Gpt(c) => {
            evaluate_layers(&weights(args, m, c.init(&device))?, held_out, lm)
        }
        ReferenceModel::Llama { config, .. } => {
            let init = args.init.as_deref();
            let layers = pipetrain::trainer::hf::llama_layers(&config, init, &device)
                .map_err(|e| Failure::runtime(e.to_string()))?;
            let layers = match init.filter(|p| pipetrain::trainer::hf::is_checkpoint_dir(p)) {
                Some(_) => layers,
                None => weights(args, m, layers)?,
            };
            evaluate_layers(&layers, held_out, lm)
        }
    }?;
    if let Some(path) = args.init.as_ref().or(args.resume.as_ref()) {
        println!("weights: {}", path.display());
    }
    println!("eval: {} on {}", model.describe(), data.describe());
    println!("held-out {evaluation}");
    Ok(Exit::Success)
}
