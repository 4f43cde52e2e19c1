//! Rows across processes: `mpirun -np N pipetrain train ...` with one worker per process, timed
//! by the run itself (its `--metrics` file: rank 0's samples/s per step, wall time as
//! `train_step` measures it in this process).

use std::path::Path;
use std::process::{Command, Stdio};

use super::configs::{Shape, Workload};
use super::measure::{Measured, balance};

/// Whether MPI rows can run: this build has the `mpi` feature and `mpirun` starts; else why not
/// (the document says so, and the rows are left out).
pub(crate) fn available() -> Result<(), String> {
    if !cfg!(feature = "mpi") {
        return Err(
            "this binary was built without the `mpi` feature (`cargo build --release --features \
             mpi`)"
                .into(),
        );
    }
    match Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("`mpirun --version` failed ({status})")),
        Err(e) => Err(format!(
            "`mpirun` does not start ({e}); install Open MPI (`apt-get install openmpi-bin`)"
        )),
    }
}

/// The `train` arguments of `shape` on `workload`, writing per-step metrics to `metrics`.
fn train_args(shape: &Shape, w: &Workload, metrics: &Path) -> Vec<String> {
    let Shape::Pipeline {
        replicas,
        stages,
        micro_batches,
        schedule,
        zero,
        backward,
        ..
    } = *shape
    else {
        unreachable!("MPI rows are pipelines")
    };
    let balance: Vec<String> = balance(w.hidden, stages)
        .iter()
        .map(usize::to_string)
        .collect();
    let mut args: Vec<String> = [
        "train",
        "--width",
        &w.width.to_string(),
        "--hidden-layers",
        &w.hidden.to_string(),
        "--classes",
        &w.classes.to_string(),
        "--batch",
        &w.batch.to_string(),
        "--steps",
        &(w.warmup + w.steps).to_string(),
        "--threads",
        &w.threads.to_string(),
        "--replicas",
        &replicas.to_string(),
        "--stages",
        &stages.to_string(),
        "--balance",
        &balance.join(","),
        "--micro-batches",
        &micro_batches.to_string(),
        "--schedule",
        &schedule.to_string(),
        "--zero",
        &zero.to_string(),
        "--remat",
        "never",
        "--precision",
        w.precision.name(),
        "--optimizer",
        "sgd",
        "--lr",
        "0.01",
        "--metrics",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(metrics.display().to_string());
    match backward {
        crate::Backward::Fused => args.extend(["--backward".into(), "fused".into()]),
        crate::Backward::Split { weight_group } => {
            args.extend(["--weight-group".into(), weight_group.to_string()])
        }
    }
    args
}

/// Runs `shape` (a pipeline of `processes` > 1) under `mpirun`, one worker per process, each
/// process `binary` (the `pipetrain` binary) training with the shape's flags.
pub(crate) fn run(
    binary: &Path,
    shape: &Shape,
    processes: usize,
    workload: &Workload,
) -> Result<Measured, String> {
    // A name of its own: this process's id and the time (several benches may run at once).
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let metrics = std::env::temp_dir().join(format!(
        "pipetrain-bench-{}-{stamp}.csv",
        std::process::id()
    ));
    let measured = launch(binary, shape, processes, workload, &metrics);
    let _ = std::fs::remove_file(&metrics);
    measured
}

fn launch(
    binary: &Path,
    shape: &Shape,
    processes: usize,
    workload: &Workload,
    metrics: &Path,
) -> Result<Measured, String> {
    let out = Command::new("mpirun")
        .args(["-np", &processes.to_string()])
        .arg(binary)
        .args(train_args(shape, workload, metrics))
        // Root and more ranks than cores are the launcher's business, not a failure here.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`mpirun` does not start: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "`mpirun -np {processes} pipetrain train ...` failed ({}): {}",
            out.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    let csv = std::fs::read_to_string(metrics)
        .map_err(|e| format!("rank 0's metrics {}: {e}", metrics.display()))?;
    parse(&csv, workload.warmup)
}

/// The measured steps (after `warmup`) of a `--metrics` CSV file: their samples/s, the last
/// loss.
fn parse(csv: &str, warmup: usize) -> Result<Measured, String> {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = |name: &str| {
        head.iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("the metrics file has no `{name}` column: {head:?}"))
    };
    let (rate, loss) = (column("samples_per_sec")?, column("loss")?);
    let mut measured = Measured::default();
    for line in lines.skip(warmup) {
        let cells: Vec<&str> = line.split(',').collect();
        let number = |i: usize| -> Result<f64, String> {
            cells
                .get(i)
                .and_then(|c| c.trim().parse().ok())
                .ok_or_else(|| format!("a metrics row without a number in column {i}: {line}"))
        };
        measured.rates.push(number(rate)?);
        measured.loss = number(loss)?;
    }
    if measured.rates.is_empty() {
        return Err(format!("no measured steps in the metrics file:\n{csv}"));
    }
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn measured_steps_come_after_the_warm_up() {
        let csv = "step,loss,lr,samples_per_sec,wall_ms\n1,2.5,0.01,10,1\n2,2.4,0.01,20,1\n\
                   3,2.3,0.01,30,1\n";
        let m = parse(csv, 1).unwrap();
        assert_eq!(m.rates, vec![20.0, 30.0]);
        assert_eq!(m.loss, 2.3);
        assert!(parse(csv, 3).unwrap_err().contains("no measured steps"));
        assert!(
            parse("step,loss\n1,2\n", 0)
                .unwrap_err()
                .contains("samples_per_sec")
        );
    }
}
