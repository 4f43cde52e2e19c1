//! Another program run with a time limit (the PyTorch peers, and the probe of their Python): a
//! program that never answers is stopped, never waited on for ever.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// Runs `command` (stdin closed) and collects its output, or kills it once it has run `limit`
/// (`Ok(None)`). Its pipes are read while it runs, so a program that writes much never blocks
/// on a full pipe; a program that exits while something it started holds its pipes open gives
/// what came before `limit`.
///
/// # Errors
/// The program could not be started, or its state read.
pub(crate) fn output_within(
    command: &mut Command,
    limit: Duration,
) -> std::io::Result<Option<Output>> {
    let deadline = Instant::now() + limit;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest = |bytes: Receiver<Vec<u8>>| {
        bytes
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    };
    Ok(Some(Output {
        status,
        stdout: rest(stdout),
        stderr: rest(stderr),
    }))
}

/// Everything `pipe` gives until it closes, read on a thread of its own.
fn drain(pipe: Option<impl Read + Send + 'static>) -> Receiver<Vec<u8>> {
    let (send, bytes) = channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = pipe.read_to_end(&mut all);
            let _ = send.send(all);
        });
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_never_ends_is_stopped_at_the_limit() {
        let mut sleeper = Command::new("sleep");
        sleeper.arg("600");
        let out = output_within(&mut sleeper, Duration::from_millis(100)).unwrap();
        assert!(out.is_none(), "{out:?}");
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo out; echo err >&2"]);
        let out = output_within(&mut echo, Duration::from_secs(60))
            .unwrap()
            .expect("echo ends");
        assert!(out.status.success());
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
    }
}
