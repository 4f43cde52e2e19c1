//! The command line's words for a remedy: [`Flags`] writes each setting as the flag that sets
//! it (`--stages 1`, `--memory-budget 20992`), where the library writes a builder call
//! (`.stages(1)`). [`crate::failure`] renders every error it prints in this style.

use pipetrain::remedy::{Setting, Style, Value};

/// The flags of `pipetrain` (the flag table).
#[derive(Clone, Copy, Debug, Default)]
pub struct Flags;

/// The flag that sets `setting`, or `None` for what no flag sets (the processes of an MPI
/// launch).
fn flag(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Stages => "--stages",
        Setting::Balance => "--balance",
        Setting::MicroBatches => "--micro-batches",
        Setting::Replicas => "--replicas",
        Setting::Accumulation => "--accumulate",
        Setting::Zero => "--zero",
        Setting::Schedule => "--schedule",
        Setting::VirtualStages => "--virtual-stages",
        Setting::LearningRate => "--lr",
        Setting::ThreadsPerWorker => "--threads",
        Setting::MemoryBudget => "--memory-budget",
        Setting::ClipGradNorm => "--clip-grad-norm",
        Setting::SkipNonFinite => "--skip-nonfinite",
        Setting::Remat => "--remat",
        Setting::WeightGroup => "--weight-group",
        Setting::InitFrom => "--init",
        Setting::Rename => "--rename",
        Setting::CommTimeout => "--comm-timeout",
        Setting::WorkersPerProcess => "--workers-per-process",
        Setting::Workers => "--workers",
        Setting::Batch => "--batch",
        Setting::Model => "--model",
        Setting::Classes => "--classes",
        Setting::Vocab => "--vocab",
        Setting::Context => "--context",
        Setting::Tokenizer => "--tokenizer",
        Setting::HeldOut => "--held-out",
        Setting::AllowNonFinite => "--allow-nonfinite-inputs",
        Setting::Steps => "--steps",
        Setting::Data => "--data",
        Setting::Checkpoint => "--checkpoint",
        Setting::Resume => "--resume",
        Setting::Metrics => "--metrics",
        Setting::Profile => "--profile",
        Setting::Plot => "--plot",
        Setting::LrSchedule => "--lr-schedule",
        Setting::KeepLast => "--keep-last",
        Setting::FileOrder => "--no-shuffle",
        Setting::MatmulPrecision => "--matmul-precision",
        Setting::Precision => "--precision",
        Setting::Remeasure => "--remeasure",
        _ => return None,
    })
}

impl Style for Flags {
    /// The run identity's entries are named as the flags that set them.
    fn entry(&self, name: &str) -> String {
        format!("--{name}")
    }

    fn label(&self, setting: Setting) -> String {
        flag(setting).map_or_else(|| setting.words().to_string(), str::to_string)
    }

    fn name(&self, setting: Setting) -> String {
        match flag(setting) {
            Some(flag) => format!("{} ({flag})", setting.words()),
            None => setting.words().to_string(),
        }
    }

    fn set(&self, setting: Setting, value: &Value) -> String {
        let Some(flag) = flag(setting) else {
            return match (setting, value) {
                (Setting::Processes, v) => format!("{v} processes (mpirun -np {v})"),
                (setting, v) => format!("{} {v}", setting.words()),
            };
        };
        match (setting, value) {
            (_, Value::On) => flag.to_string(),
            (Setting::InitFrom, Value::Any) => format!("{flag} FILE"),
            (Setting::Rename, Value::Any) => format!("{flag} REGEX=REPLACEMENT"),
            (Setting::Balance, Value::Any) => format!("{flag} N,N,..."),
            (Setting::Data, Value::Any) => format!("{flag} SPEC"),
            (_, Value::Counts(counts)) => {
                let counts: Vec<String> = counts.iter().map(ToString::to_string).collect();
                format!("{flag} {}", counts.join(","))
            }
            (_, Value::Any) => format!("{flag} N"),
            (_, v) => format!("{flag} {v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use pipetrain::remedy::{Builder, Remedy};

    use super::*;

    /// The same remedy, through the public types, in the library's words and the command
    /// line's.
    #[test]
    fn a_remedy_renders_as_a_builder_call_and_as_a_flag() {
        let fix = Remedy::one_of([
            Remedy::set(Setting::MemoryBudget, Value::Bytes(20992)),
            Remedy::set(Setting::Stages, Value::Count(3)),
            Remedy::set(Setting::Remat, Value::mode("always")),
        ]);
        assert_eq!(
            fix.render(&Builder),
            "use .memory_budget(20992), .stages(3) or .remat(Remat::Always)"
        );
        assert_eq!(
            fix.render(&Flags),
            "use --memory-budget 20992, --stages 3 or --remat always"
        );
        let balance = Remedy::set(Setting::Balance, Value::Counts(vec![2, 1]));
        assert_eq!(balance.render(&Builder), "use .balance([2, 1])");
        assert_eq!(balance.render(&Flags), "use --balance 2,1");
        let slow = Remedy::set(Setting::CommTimeout, Value::Larger);
        assert_eq!(
            slow.render(&Flags),
            "use a larger communication timeout (--comm-timeout)"
        );
    }

    /// A whole error, its remedy nested in the engine's, in either front end's words.
    #[test]
    fn an_error_renders_in_either_style() {
        let error = pipetrain::Error::from(pipetrain::schedules::ScheduleError::ZeroStages);
        assert_eq!(
            error.to_string(),
            "stages = 0: a pipeline needs at least one stage (1 runs without pipelining); use \
             .stages(1)"
        );
        assert_eq!(
            error.render(&Flags),
            "stages = 0: a pipeline needs at least one stage (1 runs without pipelining); use \
             --stages 1"
        );
    }

    /// The partitioner's and the data's typed remedies, in either front end's words.
    #[test]
    fn partition_and_data_remedies_render_both_ways() {
        use pipetrain::partitioner::PartitionError;
        use pipetrain::trainer::{DataProblem, Task};

        let split = pipetrain::Error::from(PartitionError::MoreStagesThanLayers {
            stages: 5,
            layers: 3,
        });
        let facts = "cannot split 3 layers into 5 stages: every stage needs at least one layer";
        assert_eq!(split.render(&Builder), format!("{facts}; use .stages(3)"));
        assert_eq!(split.render(&Flags), format!("{facts}; use --stages 3"));
        let label = pipetrain::Error::Run(pipetrain::RunError::Data {
            spec: "tensors:d.st".into(),
            problem: DataProblem::OutOfRange {
                part: "target",
                row: 3,
                value: 3,
                task: Task::Classify {
                    model: "mlp".into(),
                    classes: 3,
                },
            },
        });
        assert_eq!(
            label.render(&Builder),
            "data tensors:d.st: target row 3: label 3 is not in 0..3 (classes 3); fix the data \
             or use classes 4"
        );
        assert_eq!(
            label.render(&Flags),
            "--data tensors:d.st: target row 3: label 3 is not in 0..3 (--classes 3); fix \
             the data or use --classes 4"
        );
    }
}
