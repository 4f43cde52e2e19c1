//! Remedies in the library's words: [`Builder`] writes a [`Remedy`]'s settings as the builder
//! calls that set them (`.stages(1)`, `.memory_budget(20992)`); [`Error`](crate::Error)'s
//! `Display` is its [`Error::render`](crate::Error::render) in this style. A front end with
//! other words (the `pipetrain` binary's flags) implements [`Style`] and calls `render` with it.
//!
//! ```
//! use pipetrain::remedy::{Builder, Remedy, Setting, Value};
//!
//! let fix = Remedy::set(Setting::MemoryBudget, Value::Bytes(20992));
//! assert_eq!(fix.render(&Builder), "use .memory_budget(20992)");
//! ```

pub use pipetrain_schedules::remedy::{Plain, Remedied, Remedy, Setting, Style, Value};

/// The builder calls of [`PipelineBuilder`](crate::PipelineBuilder) (and the library functions
/// for what it does not set).
#[derive(Clone, Copy, Debug, Default)]
pub struct Builder;

impl Style for Builder {
    fn name(&self, setting: Setting) -> String {
        match method(setting) {
            Some(method) => format!("{} (.{method})", setting.words()),
            None if model_or_data(setting) => setting.words().to_string(),
            None => self.set(setting, &Value::Any),
        }
    }

    fn set(&self, setting: Setting, value: &Value) -> String {
        let any = matches!(value, Value::Any);
        match (setting, value) {
            (Setting::Balance, Value::Any) => ".balance([...])".to_string(),
            (Setting::Balance, v) => format!(".balance([{v}])"),
            (Setting::SkipNonFinite, _) => ".skip_nonfinite()".to_string(),
            (Setting::Schedule, Value::Mode(mode)) => {
                format!(".schedule(ScheduleKind::{})", schedule_variant(mode))
            }
            // Three schedules take chunks per rank: the remedy keeps the one given.
            (Setting::VirtualStages, v) => format!(
                "`virtual_stages: {v}` in the schedule given (`ScheduleKind::Interleaved`, \
                 `InterleavedZb` or `LoopedBfs`)"
            ),
            (Setting::Remat, Value::Mode(mode)) => {
                format!(".remat(Remat::{})", camel(mode))
            }
            (Setting::WeightGroup, v) => {
                format!(".backward(Backward::Split {{ weight_group: {v} }})")
            }
            (Setting::InitFrom, _) => "`init_from`".to_string(),
            (Setting::Rename, _) => "`rename` rules (REGEX=REPLACEMENT)".to_string(),
            (Setting::CommTimeout, _) if any => "the timeout of `mpi::Comm::start`".to_string(),
            (Setting::CommTimeout, v) => format!("`mpi::Comm::start` with a {v} s timeout"),
            (Setting::WorkersPerProcess, _) if any => {
                "other workers per process (`mpi::Placement`)".to_string()
            }
            (Setting::WorkersPerProcess, v) => {
                format!("{v} workers per process (`mpi::Placement`)")
            }
            (Setting::Processes, v) => format!("{v} processes"),
            (Setting::Workers, v) => format!("`Space::workers` = {v}"),
            (Setting::Batch, v) => format!("a batch of {v} rows"),
            (Setting::AllowNonFinite, _) => "`DataSettings::allow_nonfinite`".to_string(),
            (Setting::HeldOut, v) => format!("`DataSettings::held_out` = {v}"),
            (Setting::KeepLast, _) => "`DataSettings::keep_last`".to_string(),
            (Setting::FileOrder, _) => "`DataSettings::shuffle` = false".to_string(),
            (Setting::MatmulPrecision, Value::Mode(mode)) => {
                format!(".matmul_precision(MatmulPrecision::{})", camel(mode))
            }
            (Setting::Precision, Value::Mode(mode)) => {
                format!(".precision(Precision::{})", camel(mode))
            }
            (Setting::Remeasure, _) => "`TuneSettings::remeasure` = true".to_string(),
            (Setting::Data, _) => "loaded data (a `DataSpec` other than synthetic)".to_string(),
            (setting, v) => match method(setting) {
                Some(method) => format!(".{method}({v})"),
                None => format!("{} {v}", setting.words()),
            },
        }
    }
}

/// The [`PipelineBuilder`](crate::PipelineBuilder) method that sets `setting` with one value:
/// named as the setting's key.
fn method(setting: Setting) -> Option<&'static str> {
    use Setting::*;
    let builder = matches!(
        setting,
        Stages
            | Balance
            | MicroBatches
            | Replicas
            | Accumulation
            | Zero
            | Schedule
            | LearningRate
            | ThreadsPerWorker
            | MemoryBudget
            | ClipGradNorm
            | SkipNonFinite
            | Remat
            | BucketBytes
            | MatmulPrecision
            | Precision
    );
    builder.then(|| setting.key())
}

/// Whether `setting` is one of a run's model or data (`trainer::DataSettings`), which no
/// builder method sets: its name is its words.
fn model_or_data(setting: Setting) -> bool {
    use Setting::*;
    matches!(
        setting,
        Model | Classes | Vocab | Context | HeldOut | AllowNonFinite | KeepLast | FileOrder | Data
    )
}

/// A [`ScheduleKind`](crate::ScheduleKind) variant from its plan-file name (`1f1b`).
fn schedule_variant(mode: &str) -> String {
    match mode {
        "gpipe" => "GPipe".to_string(),
        "1f1b" => "OneFOneB".to_string(),
        "zb-h1" => "ZbH1".to_string(),
        "zb-v" => "ZbV".to_string(),
        other => camel(other),
    }
}

/// `except_last` → `ExceptLast`.
fn camel(words: &str) -> String {
    words
        .split(['_', '-'])
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_calls_name_the_method_and_its_value() {
        let render = |setting, value| Remedy::set(setting, value).render(&Builder);
        assert_eq!(render(Setting::Stages, Value::Count(1)), "use .stages(1)");
        assert_eq!(
            render(Setting::Balance, Value::Counts(vec![2, 1])),
            "use .balance([2, 1])"
        );
        assert_eq!(
            render(Setting::Remat, Value::mode("except_last")),
            "use .remat(Remat::ExceptLast)"
        );
        assert_eq!(
            render(Setting::Schedule, Value::mode("1f1b")),
            "use .schedule(ScheduleKind::OneFOneB)"
        );
        assert_eq!(
            render(Setting::LearningRate, Value::Smaller),
            "use a smaller learning rate (.learning_rate)"
        );
        assert_eq!(
            render(Setting::SkipNonFinite, Value::On),
            "use .skip_nonfinite()"
        );
        // Not a switch to interleaved 1F1B for a looped-BFS or interleaved-ZB user.
        let chunks = render(Setting::VirtualStages, Value::Count(2));
        assert!(!chunks.contains(".schedule("), "{chunks}");
        assert!(chunks.contains("virtual_stages: 2"), "{chunks}");
    }
}
