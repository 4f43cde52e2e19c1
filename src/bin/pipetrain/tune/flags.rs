//! A configuration as `train` flags and as the `--config` TOML: the model's flags here, the
//! rest in the library ([`pipetrain::commands::tune::applied`]).

use clap::ValueEnum;
pub use pipetrain::commands::tune::applied::{self, command_line, knobs, to_toml};
use toml::Value;

use crate::args::{ModelKind, TrainArgs};

/// The model, batch and optimizer flags of `args` (what the search did not choose).
pub fn model(args: &TrainArgs) -> Vec<(&'static str, Value)> {
    let int = |v: usize| Value::Integer(v as i64);
    let name = |v: &dyn Fn() -> Option<clap::builder::PossibleValue>| {
        Value::String(v().map_or_else(String::new, |p| p.get_name().to_string()))
    };
    let mut out = vec![("model", name(&|| args.model.to_possible_value()))];
    out.extend(match args.model {
        ModelKind::Mlp => vec![
            ("width", int(args.width)),
            ("hidden_layers", int(args.hidden_layers)),
            ("classes", int(args.classes)),
        ],
        ModelKind::Resnet => vec![
            ("channels", int(args.channels)),
            ("blocks", int(args.blocks)),
            ("image", int(args.image)),
            ("classes", int(args.classes)),
        ],
        ModelKind::Unet => vec![
            ("channels", int(args.channels)),
            ("depth", int(args.depth)),
            ("image", int(args.image)),
            ("classes", int(args.classes)),
        ],
        ModelKind::Gpt => vec![
            ("vocab", int(args.vocab)),
            ("context", int(args.context)),
            ("d_model", int(args.d_model)),
            ("heads", int(args.heads)),
            ("layers", int(args.layers)),
        ],
        ModelKind::Llama => {
            let mut flags = vec![
                ("vocab", int(args.vocab)),
                ("context", int(args.context)),
                ("d_model", int(args.d_model)),
                ("heads", int(args.heads)),
                ("layers", int(args.layers)),
            ];
            flags.extend(args.kv_heads.map(|k| ("kv_heads", int(k))));
            flags.extend(args.intermediate.map(|i| ("intermediate", int(i))));
            flags
        }
    });
    out.push(("batch", int(args.batch)));
    out.push(("optimizer", name(&|| args.optimizer.to_possible_value())));
    out.push(("lr", Value::Float(args.lr())));
    out
}

/// The settings given that the applied file carries to the training run
/// ([`applied::carried`]), as given.
pub fn carried(args: &TrainArgs, pairs: &[(&'static str, Value)]) -> Vec<(String, Value)> {
    let given = args
        .given_flags
        .iter()
        .map(|f| (f.key.as_str(), f.values.as_slice()));
    applied::carried(given, pairs)
}
