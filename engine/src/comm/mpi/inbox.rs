//! [`Inbox`]: where the communication thread delivers one route's messages, and how a worker
//! waits for one of them: keyed, against the step's abort signal and the timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select, unbounded};

use super::wire::Envelope;
use crate::comm::abort::Abort;

/// Why a wait ended without the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The step was aborted (here or by a peer's failure notice).
    Aborted,
    /// Nothing came within the timeout.
    Timeout,
    /// The communication thread is gone.
    Closed,
}

/// One route's messages, with those that came before they were asked for.
pub(crate) struct Inbox {
    rx: Receiver<Envelope>,
    pending: HashMap<(u32, u32), Envelope>,
    abort: Arc<Abort>,
    timeout: Duration,
}

impl Inbox {
    /// An inbox and the sender the communication thread delivers to.
    pub fn new(abort: &Arc<Abort>, timeout: Duration) -> (Sender<Envelope>, Inbox) {
        let (tx, rx) = unbounded();
        let inbox = Inbox {
            rx,
            pending: HashMap::new(),
            abort: Arc::clone(abort),
            timeout,
        };
        (tx, inbox)
    }

    /// The communication timeout (for messages).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Waits for the message keyed (`a`, `b`), buffering others.
    pub fn take(&mut self, a: u32, b: u32) -> Result<Envelope, Wait> {
        if let Some(envelope) = self.pending.remove(&(a, b)) {
            return Ok(envelope);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            select! {
                recv(self.rx) -> envelope => match envelope {
                    Ok(e) if (e.a, e.b) == (a, b) => return Ok(e),
                    Ok(e) => {
                        self.pending.insert((e.a, e.b), e);
                    }
                    Err(_) => return Err(Wait::Closed),
                },
                recv(self.abort.watch()) -> _ => return Err(Wait::Aborted),
                default(left) => return Err(Wait::Timeout),
            }
        }
    }
}
