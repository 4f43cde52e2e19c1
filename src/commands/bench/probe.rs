//! The machine the table was measured on: its CPU model, and how busy the other tenants kept
//! its cores while a row ran (`/proc/stat` busy time minus this process's own, `/proc/self/stat`).

use std::time::Instant;

/// Ticks per second of `/proc/stat` and `/proc/<pid>/stat` (`USER_HZ`: 100 on every Linux
/// architecture this runs on; the kernel's own tick rate is not exposed there).
const USER_HZ: f64 = 100.0;

/// The CPU's model name (`/proc/cpuinfo`, else `lscpu`), or `unknown CPU`.
pub fn cpu_model() -> String {
    let from_cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
    from_cpuinfo
        .or_else(|| {
            let out = std::process::Command::new("lscpu").output().ok()?;
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| l.starts_with("Model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The GPU's model name (`nvidia-smi`), or `None` where there is none.
pub fn gpu_model() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output()
        .ok()?;
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .to_string();
    (out.status.success() && !first.is_empty()).then(|| format!("{first} (name, driver)"))
}

/// Cores this process may use (the engine's count).
pub use pipetrain_engine::pool::cores;

/// A reading of the machine's and this process's CPU time.
#[derive(Clone, Copy, Debug)]
pub struct CpuSnapshot {
    at: Instant,
    /// Busy ticks of all cores (user, nice, system, irq, softirq; steal excluded).
    busy: Option<u64>,
    /// This process's user + system ticks (all its threads).
    own: Option<u64>,
}

impl CpuSnapshot {
    /// Reads both counters now (None where /proc is not there).
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            busy: machine_busy_ticks(),
            own: own_ticks(),
        }
    }

    /// Cores kept busy by other processes between `self` and `later`: machine busy time minus
    /// this process's, over the wall time (None without /proc). Processes this one waits for
    /// (the PyTorch peers) count as others here: their rows report their own figure.
    pub fn others_until(&self, later: &CpuSnapshot) -> Option<f64> {
        let wall = later.at.duration_since(self.at).as_secs_f64();
        let busy = later.busy?.checked_sub(self.busy?)?;
        let own = later.own?.checked_sub(self.own?)?;
        (wall > 0.0).then(|| (busy.saturating_sub(own) as f64 / USER_HZ / wall).max(0.0))
    }
}

fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6))
}

fn own_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_a_cpu_and_counters() {
        assert!(!cpu_model().is_empty());
        assert!(cores() >= 1);
        let a = CpuSnapshot::now();
        // Burn some CPU of our own so that the counters move.
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = CpuSnapshot::now();
        if cfg!(target_os = "linux") {
            let others = a.others_until(&b).expect("/proc is readable on Linux");
            assert!(others.is_finite() && others >= 0.0, "{others}");
        }
    }
}
