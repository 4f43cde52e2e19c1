//! Post-processing of the raw chrome trace that `tracing-chrome` writes: one complete span
//! (`"ph": "X"`) per action, one track per worker, and a flow arrow from every send to the
//! receive that takes its tensor.
//!
//! What the raw trace looks like, and what changes:
//!
//! ```text
//! raw                                           post-processed
//! {"ph":"M","name":"thread_name","tid":7,       {"ph":"M","name":"thread_name","tid":2,
//!  "args":{"name":"pipetrain-r0s1"}}             "args":{"name":"pipetrain-r0s1"}}   (once)
//! {"ph":"B","name":"action","tid":7,"ts":10,    {"ph":"X","name":"1RF0","cat":"action",
//!  "args":{"name":"1RF0","replica":0,...}}       "tid":2,"ts":10,"dur":2,"args":{...}}
//! {"ph":"E","name":"action","tid":7,"ts":12}
//!                                               {"ph":"s","id":1,"tid":1,"ts":9.5,...}
//!                                               {"ph":"f","bp":"e","id":1,"tid":2,...}
//! ```
//!
//! - **One track per worker.** The engine spawns fresh scoped threads every step, and
//!   `tracing-chrome` numbers threads as it meets them, so the raw trace has one tid per worker
//!   *per step*. Threads are renumbered by name (`pipetrain-r{R}s{S}`): every step of a worker
//!   lands on one track, ordered by replica then stage.
//! - **Flows.** A send `sSFm` on replica r carries micro-batch m's activation to `(s+1)RFm`; a
//!   send `sSBm` carries its input gradient to `(s-1)RBm`. The k-th send of a (replica, target
//!   action) pairs with the k-th receive of that action (one per step). The flow starts at
//!   the end of the send and finishes inside the receive (`"bp": "e"`: bound to the enclosing
//!   slice).

use std::collections::{BTreeMap, HashMap};

use pipetrain::schedules::{Action, ActionKind, StageId};
use serde_json::{Value, json};

/// The name `tracing` gives the engine's per-action span (`info_span!("action", ...)`).
const ACTION_SPAN: &str = "action";

/// One complete span after pairing its begin and end.
#[derive(Clone, Debug)]
struct Slice {
    name: String,
    cat: String,
    tid: u64,
    ts: f64,
    dur: f64,
    args: Value,
}

/// Turns the raw `tracing-chrome` events into the post-processed trace (see the module docs).
/// Unpaired begins (a span still open when the trace was flushed) are dropped.
pub fn post_process(raw: Vec<Value>) -> Vec<Value> {
    // Thread names, raw tid → name; renumbered by sorted name.
    let mut names: HashMap<u64, String> = HashMap::new();
    for e in &raw {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            if let (Some(tid), Some(name)) = (e["tid"].as_u64(), e["args"]["name"].as_str()) {
                names.insert(tid, name.to_string());
            }
        }
    }
    let track = |tid: u64| {
        names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("thread {tid}"))
    };
    let mut tracks: BTreeMap<(u8, String), u64> = BTreeMap::new();
    for tid in raw.iter().filter_map(|e| e["tid"].as_u64()) {
        let name = track(tid);
        // Workers after every other thread (the main thread first).
        let rank = u8::from(name.starts_with("pipetrain-r"));
        tracks.entry((rank, worker_order(&name))).or_insert(0);
    }
    for (i, id) in tracks.values_mut().enumerate() {
        *id = i as u64;
    }
    let track_of = |tid: u64| {
        let name = track(tid);
        let rank = u8::from(name.starts_with("pipetrain-r"));
        tracks[&(rank, worker_order(&name))]
    };

    let mut slices = Vec::new();
    let mut instants = Vec::new();
    let mut open: HashMap<u64, Vec<&Value>> = HashMap::new();
    for e in &raw {
        let Some(tid) = e["tid"].as_u64() else {
            continue;
        };
        match e["ph"].as_str() {
            Some("B") => open.entry(tid).or_default().push(e),
            Some("E") => {
                let Some(begin) = open.get_mut(&tid).and_then(Vec::pop) else {
                    continue;
                };
                let ts = begin["ts"].as_f64().unwrap_or(0.0);
                let end = e["ts"].as_f64().unwrap_or(ts);
                let is_action = begin["name"] == ACTION_SPAN;
                let name = match begin["args"]["name"].as_str() {
                    Some(action) if is_action => action.to_string(),
                    _ => begin["name"].as_str().unwrap_or("?").to_string(),
                };
                let cat = if is_action { ACTION_SPAN } else { "span" }.to_string();
                let mut args = begin["args"].clone();
                normalize_args(&mut args);
                if let (true, Ok(action)) = (is_action, name.parse::<Action>()) {
                    args["kind"] = json!(action.kind.name());
                }
                slices.push(Slice {
                    name,
                    cat,
                    tid: track_of(tid),
                    ts,
                    dur: (end - ts).max(0.0),
                    args,
                });
            }
            Some("i") => {
                let mut e = e.clone();
                e["tid"] = json!(track_of(tid));
                instants.push(e);
            }
            _ => {}
        }
    }
    slices.sort_by(|a, b| a.ts.total_cmp(&b.ts));

    let mut out: Vec<Value> = Vec::new();
    for ((_, name), id) in &tracks {
        out.push(
            json!({"ph": "M", "pid": 1, "tid": id, "name": "thread_name",
                        "args": {"name": display_name(name)}}),
        );
        out.push(
            json!({"ph": "M", "pid": 1, "tid": id, "name": "thread_sort_index",
                        "args": {"sort_index": id}}),
        );
    }
    let flows = flows(&slices);
    out.extend(slices.into_iter().map(|s| {
        json!({"ph": "X", "pid": 1, "tid": s.tid, "name": s.name, "cat": s.cat,
               "ts": s.ts, "dur": s.dur, "args": s.args})
    }));
    out.extend(instants);
    out.extend(flows);
    out
}

/// A sort key that orders `pipetrain-r{R}s{S}` numerically (r2 before r10).
fn worker_order(name: &str) -> String {
    match parse_worker(name) {
        Some((r, s)) => format!("pipetrain-r{r:06}s{s:06}"),
        None => name.to_string(),
    }
}

/// The track's name back from its sort key.
fn display_name(key: &str) -> String {
    match parse_worker(key) {
        Some((r, s)) => format!("pipetrain-r{r}s{s}"),
        None => key.to_string(),
    }
}

/// `(replica, stage)` of a worker thread's name: `pipetrain-r{R}s{S}`, or `pipetrain-r{R}s{S}-{i}`
/// for thread i of the worker's compute pool (a worker's actions run on one of them).
fn parse_worker(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix("pipetrain-r")?;
    let (r, s) = rest.split_once('s')?;
    let s = s.split_once('-').map_or(s, |(s, _)| s);
    Some((r.parse().ok()?, s.parse().ok()?))
}

/// `tracing-chrome` records every field as text; the ids become numbers again.
fn normalize_args(args: &mut Value) {
    for key in ["replica", "stage", "micro_batch"] {
        if let Some(n) = args[key].as_str().and_then(|t| t.parse::<i64>().ok()) {
            args[key] = json!(n);
        }
    }
}

/// The receive that takes what `send` sends, or `None` if `send` is no send.
fn receiver(send: Action) -> Option<Action> {
    let (stage, kind) = match send.kind {
        ActionKind::SendActivation => (send.stage.0 + 1, ActionKind::RecvActivation),
        ActionKind::SendGradient => (send.stage.0.checked_sub(1)?, ActionKind::RecvGradient),
        _ => return None,
    };
    Some(Action {
        stage: StageId(stage),
        kind,
        micro_batch: send.micro_batch,
    })
}

/// Flow start / finish events, one pair per send whose receive is in the trace.
fn flows(slices: &[Slice]) -> Vec<Value> {
    let replica = |s: &Slice| s.args["replica"].as_i64().unwrap_or(0);
    // (replica, receive action) → receive slices, in time order.
    let mut receives: HashMap<(i64, Action), Vec<&Slice>> = HashMap::new();
    for s in slices {
        if let Ok(a) = s.name.parse::<Action>() {
            if matches!(
                a.kind,
                ActionKind::RecvActivation | ActionKind::RecvGradient
            ) {
                receives.entry((replica(s), a)).or_default().push(s);
            }
        }
    }
    let mut taken: HashMap<(i64, Action), usize> = HashMap::new();
    let mut out = Vec::new();
    let mut id = 0u64;
    for send in slices {
        let Some(target) = send.name.parse::<Action>().ok().and_then(receiver) else {
            continue;
        };
        let key = (replica(send), target);
        let k = taken.entry(key).or_insert(0);
        let Some(recv) = receives.get(&key).and_then(|r| r.get(*k)) else {
            continue;
        };
        *k += 1;
        id += 1;
        let name = format!("{}→{target}", send.name);
        let cat = "transfer";
        // Both ends strictly inside their slices, so each binds to its own. A send can return
        // after its receive did (the channel hand-off is inside both), so the arrow starts at
        // whichever ends first and never points back in time.
        let eps = 1e-3;
        let inside = |t: f64, s: &Slice| t.min(s.ts + s.dur - eps).max(s.ts);
        let start = inside((send.ts + send.dur).min(recv.ts + recv.dur) - eps, send);
        let finish = inside(start.max(recv.ts), recv);
        out.push(
            json!({"ph": "s", "pid": 1, "tid": send.tid, "ts": start, "id": id,
                        "name": name, "cat": cat}),
        );
        out.push(
            json!({"ph": "f", "bp": "e", "pid": 1, "tid": recv.tid, "ts": finish,
                        "id": id, "name": name, "cat": cat}),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(tid: u64, ts: f64, end: f64, action: &str, replica: i64) -> Vec<Value> {
        vec![
            json!({"ph": "B", "pid": 1, "tid": tid, "ts": ts, "name": "action",
                   "args": {"name": action, "replica": replica}}),
            json!({"ph": "E", "pid": 1, "tid": tid, "ts": end, "name": "action"}),
        ]
    }

    #[test]
    fn threads_are_merged_by_name_and_sends_flow_to_receives() {
        let mut raw = vec![
            json!({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name",
                   "args": {"name": "pipetrain-r0s0"}}),
            json!({"ph": "M", "pid": 1, "tid": 2, "name": "thread_name",
                   "args": {"name": "pipetrain-r0s1-0"}}),
            json!({"ph": "M", "pid": 1, "tid": 3, "name": "thread_name",
                   "args": {"name": "pipetrain-r0s0"}}),
        ];
        raw.extend(span(1, 0.0, 1.0, "0SF0", 0));
        raw.extend(span(2, 0.5, 2.0, "1RF0", 0));
        raw.extend(span(2, 3.0, 4.0, "1SB0", 0));
        raw.extend(span(3, 4.5, 5.0, "0RB0", 0)); // second "step": a new raw tid
        let out = post_process(raw);
        let x: Vec<&Value> = out.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 4);
        let tids: std::collections::BTreeSet<u64> =
            x.iter().map(|e| e["tid"].as_u64().unwrap()).collect();
        assert_eq!(tids.len(), 2, "{out:#?}");
        let s: Vec<&Value> = out.iter().filter(|e| e["ph"] == "s").collect();
        let f: Vec<&Value> = out.iter().filter(|e| e["ph"] == "f").collect();
        assert_eq!((s.len(), f.len()), (2, 2));
        assert_eq!(s[0]["id"], f[0]["id"]);
        assert_ne!(s[0]["tid"], f[0]["tid"]);
    }
}
