//! `--config run.toml`: train flags from a TOML file, for every subcommand that takes them
//! (`train`, `eval`, `tune`).
//!
//! The file is turned into command-line arguments, inserted before the real ones, and clap
//! parses the lot with `args_override_self`, so a flag given on the command line overrides the
//! file's. The valid keys are the long names of [`TrainArgs`]' flags, read from clap itself: no
//! flag list is kept here.
//!
//! ```text
//! run.toml                     becomes
//! stages = 2                   --stages=2
//! micro_batches = 4            --micro-batches=4       (`_` or `-` in keys)
//! balance = [5, 4]             --balance=5,4           (arrays comma-joined)
//! verify = true                --verify                (switch: present when true,
//! schedule = "gpipe"           --schedule=gpipe         absent when false)
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Args as _};
use pipetrain::schedules::FileProblem;

use crate::args::TrainArgs;

/// Subcommands whose flags include [`TrainArgs`] (`tune` flattens them beside its own), and so
/// `--config`. No other subcommand takes `--config`: clap refuses it there.
const TRAIN_COMMANDS: [&str; 3] = ["train", "eval", "tune"];

/// `argv` with the flags of the `--config` file (if any) inserted right after the subcommand
/// (or the program name, for the bare `pipetrain --stages 2 ...` form).
///
/// # Errors
/// An unreadable or invalid TOML file, an unknown key (named with the file), or a value that is
/// a table.
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(path) = config_path(&argv) else {
        return Ok(argv);
    };
    let at = match argv.get(1).and_then(|a| a.to_str()) {
        Some(cmd) if TRAIN_COMMANDS.contains(&cmd) => 2,
        Some(cmd) if !cmd.starts_with('-') => return Ok(argv), // another subcommand
        _ => 1,
    };
    let flags = flags_of(&path)?;
    let mut out = argv;
    out.splice(at..at, flags);
    Ok(out)
}

/// The value of the last `--config FILE` / `--config=FILE`.
fn config_path(argv: &[OsString]) -> Option<PathBuf> {
    let mut path = None;
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        } else if text == "--config" {
            path = args.next().map(PathBuf::from);
        } else if let Some(value) = text.strip_prefix("--config=") {
            path = Some(PathBuf::from(value));
        }
    }
    path
}

/// Largest config file read: flags fit in far less; anything bigger is not a config.
const MAX_CONFIG: u64 = 1 << 20;

/// The command-line flags the TOML file at `path` stands for.
fn flags_of(path: &std::path::Path) -> Result<Vec<OsString>, String> {
    let shown = path.display();
    let text = pipetrain::schedules::read_bounded(path, MAX_CONFIG).map_err(|e| match e {
        FileProblem::TooLarge { .. } => {
            format!("--config {shown}: {e}; a file of flags is far smaller: give the right file")
        }
        _ => format!("--config {shown}: {e}"),
    })?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("--config {shown}: {e}"))?;
    let command = TrainArgs::augment_args(clap::Command::new("train"));
    let mut flags = Vec::new();
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        // `hidden_layers` and `hidden-layers` are one flag: one of them would win in silence.
        if let Some((_, first)) = seen.iter().find(|(l, _)| *l == long) {
            return Err(format!(
                "--config {shown}: `{first}` and `{key}` are one flag (--{long}); keep one"
            ));
        }
        seen.push((long.clone(), key));
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| {
                format!(
                    "--config {shown}: unknown key `{key}`; keys are the flags of \
                     `pipetrain train --help` without the dashes"
                )
            })?;
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        match (switch, value) {
            (true, toml::Value::Boolean(true)) => flags.push(format!("--{long}").into()),
            (true, toml::Value::Boolean(false)) => {}
            (true, other) => {
                return Err(format!(
                    "--config {shown}: `{key}` is a switch; give true or false, not {other}"
                ));
            }
            (false, value) => {
                let value = scalar_or_list(value).ok_or_else(|| {
                    format!("--config {shown}: `{key}` must be a value or an array, not a table")
                })?;
                flags.push(format!("--{long}={value}").into());
            }
        }
    }
    Ok(flags)
}

/// A TOML value as the text of a flag's value: arrays comma-joined, strings unquoted.
fn scalar_or_list(value: &toml::Value) -> Option<String> {
    Some(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(scalar_or_list)
            .collect::<Option<Vec<_>>>()?
            .join(","),
        toml::Value::Table(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn no_config_leaves_the_arguments_alone() {
        let a = argv(&["pipetrain", "train", "--steps", "3"]);
        assert_eq!(expand(a.clone()).unwrap(), a);
    }

    #[test]
    fn values_lists_and_switches_become_flags() {
        let dir = std::env::temp_dir().join(format!("pipetrain-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.toml");
        std::fs::write(
            &path,
            "steps = 3\nmicro_batches = 4\nbalance = [2, 1]\nverify = true\nzero = 0\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let out = expand(argv(&["pipetrain", "train", "--config", p, "--steps", "5"])).unwrap();
        let out: Vec<String> = out.into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(
            out,
            [
                "pipetrain",
                "train",
                "--balance=2,1",
                "--micro-batches=4",
                "--steps=3",
                "--verify",
                "--zero=0",
                "--config",
                p,
                "--steps",
                "5"
            ]
        );
        // Issue 47, class 2: both spellings of one flag, one of them used in silence.
        std::fs::write(&path, "hidden_layers = 3\nhidden-layers = 4\n").unwrap();
        let err = expand(argv(&["pipetrain", "--config", p])).unwrap_err();
        assert!(
            err.contains("`hidden-layers` and `hidden_layers` are one flag (--hidden-layers)"),
            "{err}"
        );
        std::fs::write(&path, "stepz = 3\n").unwrap();
        let err = expand(argv(&["pipetrain", "--config", p])).unwrap_err();
        assert!(err.contains("stepz") && err.contains(p), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
