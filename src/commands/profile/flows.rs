//! Flow arrows of the chrome trace, paired as the slices stream past: a send `sSFm` on replica
//! r carries micro-batch m's activation to `(s+1)RFm`, a send `sSBm` its input gradient to
//! `(s-1)RBm`, a skip `sSKm>t` its skips straight to `tRKm<s` and `tSKBm>s` their gradients
//! back to `sRKBm<t` (category `skip`, their own arrows), and the k-th send of a (replica, receive action) pairs with the k-th receive of
//! it. Each worker runs its actions one at a time, so both arrive in time order and pair first
//! in, first out; only the ends still waiting for their other end are held.

use std::collections::{HashMap, VecDeque};

use crate::schedules::{Action, ActionKind, StageId};
use serde_json::{Value, json};

use crate::commands::profile::trace::Slice;

/// Ends held per (replica, receive action) at most. In one process a send and its receive are
/// at most a step apart (one or two wait); a multi-process trace holds receives whose sends are
/// in another process's trace and never pair, so the oldest are dropped.
const WAITING: usize = 64;

/// Sends and receives waiting for their other end, by (replica, receive action).
#[derive(Default)]
pub struct Flows {
    sends: HashMap<(i64, Action), VecDeque<Slice>>,
    receives: HashMap<(i64, Action), VecDeque<Slice>>,
    id: u64,
}

impl Flows {
    /// Takes the next slice; returns the flow start and finish events it completes (none or
    /// two).
    pub fn add(&mut self, slice: Slice) -> Vec<Value> {
        let Ok(action) = slice.name.parse::<Action>() else {
            return Vec::new();
        };
        let replica = slice.args["replica"].as_i64().unwrap_or(0);
        let (key, is_send) = match receiver(action) {
            Some(target) => ((replica, target), true),
            None if is_receive(action) => ((replica, action), false),
            None => return Vec::new(),
        };
        let (mine, theirs) = match is_send {
            true => (&mut self.sends, &mut self.receives),
            false => (&mut self.receives, &mut self.sends),
        };
        let Some(other) = theirs.get_mut(&key).and_then(VecDeque::pop_front) else {
            let queue = mine.entry(key).or_default();
            if queue.len() == WAITING {
                queue.pop_front();
            }
            queue.push_back(slice);
            return Vec::new();
        };
        let (send, recv) = if is_send {
            (slice, other)
        } else {
            (other, slice)
        };
        self.id += 1;
        arrow(self.id, &send, &recv, key.1)
    }
}

/// Whether `action` receives a tensor.
fn is_receive(action: Action) -> bool {
    action.kind.is_transfer() && !action.kind.is_send()
}

/// The receive that takes what `send` sends, or `None` if `send` is no send.
fn receiver(send: Action) -> Option<Action> {
    let mb = send.micro_batch?;
    let (stage, kind) = match send.kind {
        ActionKind::SendActivation => (send.stage.0 + 1, ActionKind::RecvActivation),
        ActionKind::SendGradient => (send.stage.0.checked_sub(1)?, ActionKind::RecvGradient),
        ActionKind::SendSkip => {
            return Some(Action::skip(
                send.peer?,
                ActionKind::RecvSkip,
                mb,
                send.stage,
            ));
        }
        ActionKind::SendSkipGradient => {
            let kind = ActionKind::RecvSkipGradient;
            return Some(Action::skip(send.peer?, kind, mb, send.stage));
        }
        _ => return None,
    };
    Some(Action::new(StageId(stage), kind, mb))
}

/// The start and finish events of flow `id` from `send` to `recv` (the `target` action).
fn arrow(id: u64, send: &Slice, recv: &Slice, target: Action) -> Vec<Value> {
    let name = format!("{}→{target}", send.name);
    let cat = if target.kind.is_skip() {
        "skip"
    } else {
        "transfer"
    };
    // Both ends strictly inside their slices, so each binds to its own. A send can return
    // after its receive did (the channel hand-off is inside both), so the arrow starts at
    // whichever ends first and never points back in time.
    let eps = 1e-3;
    let inside = |t: f64, s: &Slice| t.min(s.ts + s.dur - eps).max(s.ts);
    let start = inside((send.ts + send.dur).min(recv.ts + recv.dur) - eps, send);
    let finish = inside(start.max(recv.ts), recv);
    vec![
        json!({"ph": "s", "pid": 1, "tid": send.tid, "ts": start, "id": id,
               "name": name, "cat": cat}),
        json!({"ph": "f", "bp": "e", "pid": 1, "tid": recv.tid, "ts": finish,
               "id": id, "name": name, "cat": cat}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, ts: f64) -> Slice {
        Slice {
            name: name.to_string(),
            cat: "action".to_string(),
            tid: 0,
            ts,
            dur: 1.0,
            args: json!({"replica": 0}),
        }
    }

    #[test]
    fn sends_and_receives_pair_first_in_first_out_whichever_comes_first() {
        let mut flows = Flows::default();
        assert!(flows.add(slice("1RF0", 0.0)).is_empty());
        let first = flows.add(slice("0SF0", 1.0));
        assert_eq!(first.len(), 2);
        assert!(flows.add(slice("0SF0", 2.0)).is_empty());
        assert_eq!(flows.add(slice("1RF0", 3.0)).len(), 2);
        assert!(flows.add(slice("0F0", 4.0)).is_empty(), "no transfer");
    }

    #[test]
    fn skips_flow_straight_between_their_pair_in_their_own_category() {
        let mut flows = Flows::default();
        assert!(flows.add(slice("0SK0>2", 0.0)).is_empty());
        assert!(
            flows.add(slice("1RF0", 1.0)).is_empty(),
            "not the skip's receive"
        );
        let skip = flows.add(slice("2RK0<0", 2.0));
        assert_eq!(skip.len(), 2);
        assert_eq!(skip[0]["cat"], "skip");
        assert_eq!(skip[0]["name"], "0SK0>2→2RK0<0");
        assert!(flows.add(slice("2SKB0>0", 3.0)).is_empty());
        let back = flows.add(slice("0RKB0<2", 4.0));
        assert_eq!(back[1]["name"], "2SKB0>0→0RKB0<2");
    }

    #[test]
    fn unpaired_receives_are_bounded() {
        // A multi-process trace: the sends are in another process's file.
        let mut flows = Flows::default();
        for step in 0..10_000 {
            flows.add(slice("1RF0", f64::from(step)));
        }
        let waiting: usize = flows.receives.values().map(VecDeque::len).sum();
        assert_eq!(waiting, WAITING);
    }
}
