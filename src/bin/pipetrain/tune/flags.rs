//! A configuration as `train` flags and as the `--config` TOML: one list of (key, value) pairs
//! behind both, so the printed flags and the file never disagree.

use clap::ValueEnum;
use pipetrain::ScheduleKind;
use pipetrain::commands::tune::{Candidate, Recompute};
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

/// The knobs `candidate` chose, as `train` takes them.
pub fn knobs(candidate: &Candidate) -> Vec<(&'static str, Value)> {
    let k = candidate.knobs;
    let int = |v: usize| Value::Integer(v as i64);
    let schedule = k.schedule.family().to_string();
    let mut out = vec![
        ("replicas", int(k.replicas)),
        ("micro_batches", int(k.micro_batches)),
        ("schedule", Value::String(schedule)),
    ];
    if let ScheduleKind::Interleaved { virtual_stages }
    | ScheduleKind::LoopedBfs { virtual_stages }
    | ScheduleKind::InterleavedZb { virtual_stages } = k.schedule
    {
        out.push(("virtual_stages", int(virtual_stages)));
    }
    let remat = match k.remat {
        Recompute::Never => "never",
        Recompute::ExceptLast => "except_last",
        Recompute::Always => "always",
    };
    out.push(("remat", Value::String(remat.into())));
    let balance = candidate.partition.balance().into_iter().map(int).collect();
    out.push(("balance", Value::Array(balance)));
    out.push(("threads", int(1)));
    out
}

/// The settings given that the applied file carries to the training run
/// ([`pipetrain::commands::reads::tune_applies`]: the data, the optimizer's settings, the
/// learning-rate schedule, the seed, ...) and `pairs` does not hold yet, as given.
pub fn carried(args: &TrainArgs, pairs: &[(&'static str, Value)]) -> Vec<(String, Value)> {
    args.given_flags
        .iter()
        .filter(|f| pipetrain::commands::reads::tune_applies(&f.key))
        .filter(|f| !pairs.iter().any(|(k, _)| *k == f.key))
        .map(|f| {
            let value = match f.values.as_slice() {
                [] => Value::Boolean(true),
                [one] => one
                    .parse::<i64>()
                    .map(Value::Integer)
                    .or_else(|_| {
                        one.parse::<f64>()
                            .ok()
                            .filter(|x| x.is_finite())
                            .map(Value::Float)
                            .ok_or(())
                    })
                    .unwrap_or_else(|()| Value::String(one.clone())),
                many => Value::String(many.join(",")),
            };
            (f.key.clone(), value)
        })
        .collect()
}

/// `--key value ...` (underscores as dashes, arrays comma-joined).
pub fn command_line(pairs: &[(&'static str, Value)]) -> String {
    pairs
        .iter()
        .map(|(key, value)| {
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Array(items) => items
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            format!("--{} {value}", key.replace('_', "-"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The TOML file `train --config` reads.
pub fn to_toml<K: AsRef<str>>(pairs: &[(K, Value)]) -> String {
    let table: toml::Table = pairs
        .iter()
        .map(|(k, v)| (k.as_ref().to_string(), v.clone()))
        .collect();
    toml::to_string(&table).expect("a table of plain values serializes")
}
