//! The heartbeat: while the sweep runs, a second thread tells where it stands every interval,
//! so that a slow compilation or tuning is told apart from a hang.

use std::sync::mpsc;
use std::time::Duration;

use super::progress::{Event, Progress};

/// Runs `work` while a scoped thread tells `progress`'s [`Heartbeat`](super::Heartbeat) every
/// `every`. The thread ends as soon as `work` returns (or panics): it waits on a channel whose
/// sender `work`'s side drops, never on a clock alone.
pub(super) fn beating<T>(progress: &Progress<'_>, every: Duration, work: impl FnOnce() -> T) -> T {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                progress.tell(Event::Heartbeat(progress.heartbeat()));
            }
        });
        // Dropped when `work` returns or unwinds: the heartbeat stops either way.
        let _stop = stop;
        work()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_tells_the_running_case_while_work_runs_and_stops_with_it() {
        let (beats, heard) = mpsc::channel();
        let sink = move |event: Event| {
            if let Event::Heartbeat(beat) = event {
                let _ = beats.send(beat);
            }
        };
        let progress = Progress::new(&sink);
        progress.section("mlp_schedules");
        progress.begin("mlp sgd gpipe p=2");
        progress.phase("pipeline: step 1/3".into());
        // The work ends when it has heard a heartbeat (bounded: a missing one fails, no hang).
        let beat = beating(&progress, Duration::from_millis(10), || {
            heard.recv_timeout(Duration::from_secs(30))
        })
        .expect("a heartbeat while the work ran");
        assert_eq!(
            (beat.section, beat.case.as_str(), beat.phase.as_str()),
            ("mlp_schedules", "mlp sgd gpipe p=2", "pipeline: step 1/3")
        );
        assert_eq!((beat.done, beat.kernels), (0, None));
        assert!(beat.to_string().starts_with("heartbeat: "), "{beat}");
    }
}
