//! The tuned configuration as `train` takes it, for `pipetrain tune --apply FILE`: one list of
//! (key, value) pairs behind both the printed flags ([`command_line`]) and the `--config` TOML
//! ([`to_toml`]), so the two never disagree. The binary adds the model's flags.

use toml::Value;

use crate::ScheduleKind;
use crate::commands::tune::{Candidate, Recompute};

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
    if k.zero.shards_optimizer_state() {
        out.push(("zero", int(usize::from(k.zero.level()))));
    }
    let balance = candidate.partition.balance().into_iter().map(int).collect();
    out.push(("balance", Value::Array(balance)));
    out.push(("threads", int(1)));
    out
}

/// The settings `given` (each as its key, `hidden_layers`, and its values as given: none for a
/// switch) that the applied file carries to the training run
/// ([`tune_applies`](crate::commands::reads::tune_applies): the data, the optimizer's settings,
/// the learning-rate schedule, the seed, ...) and `pairs` does not hold yet: a switch as
/// `true`, one value as an integer, a finite float or a string, a list comma-joined.
pub fn carried<'a>(
    given: impl IntoIterator<Item = (&'a str, &'a [String])>,
    pairs: &[(&'static str, Value)],
) -> Vec<(String, Value)> {
    given
        .into_iter()
        .filter(|(key, _)| crate::commands::reads::tune_applies(key))
        .filter(|(key, _)| !pairs.iter().any(|(k, _)| k == key))
        .map(|(key, values)| {
            let value = match values {
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
            (key.to_string(), value)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_values_are_typed_and_pairs_already_held_are_left_out() {
        let (lr, seed, shuffle, data) = (
            vec!["0.5".to_string()],
            vec!["7".to_string()],
            vec![],
            vec!["tensors:d.st".to_string()],
        );
        let given = [
            ("lr", lr.as_slice()),
            ("seed", seed.as_slice()),
            ("no_shuffle", shuffle.as_slice()),
            ("data", data.as_slice()),
        ];
        let held = [("lr", Value::Float(0.1))];
        let carried = carried(given, &held);
        assert!(!carried.iter().any(|(k, _)| k == "lr"), "{carried:?}");
        let seed = carried.iter().find(|(k, _)| k == "seed");
        assert_eq!(seed.map(|(_, v)| v.clone()), Some(Value::Integer(7)));
        let data = carried.iter().find(|(k, _)| k == "data");
        assert_eq!(
            data.map(|(_, v)| v.clone()),
            Some(Value::String("tensors:d.st".into()))
        );
        assert_eq!(
            command_line(&[("micro_batches", Value::Integer(4))]),
            "--micro-batches 4"
        );
    }
}
