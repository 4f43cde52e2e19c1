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
//!   send `sSBm` carries its input gradient to `(s-1)RBm`; a skip `sSKm>t` goes straight to
//!   `tRKm<s` and its gradient `tSKBm>s` back to `sRKBm<t`, drawn in category `skip`
//!   ([`flows`](super::flows) pairs them). The flow starts at the end of the send and finishes inside the receive (`"bp": "e"`: bound to
//!   the enclosing slice).
//! - **Streaming.** The raw file is read twice, one event (one line) at a time: once for the
//!   threads, once to write the result. Nothing holds the whole trace (it once took ~23× the
//!   trace's size in memory).

use std::collections::{BTreeMap, HashMap};

use crate::schedules::Action;
use serde_json::{Value, json};

use crate::commands::profile::flows::Flows;

/// The name `tracing` gives the engine's per-action span (`info_span!("action", ...)`).
const ACTION_SPAN: &str = "action";

/// One complete span after pairing its begin and end.
#[derive(Clone, Debug)]
pub struct Slice {
    /// The action (`1RF0`) or span name.
    pub name: String,
    /// `action` or `span`.
    pub cat: String,
    /// Its track.
    pub tid: u64,
    /// Start, µs.
    pub ts: f64,
    /// Duration, µs.
    pub dur: f64,
    /// Replica, stage, micro-batch, phase, kind.
    pub args: Value,
}

/// What [`post_process_into`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Action slices.
    pub slices: usize,
    /// Flow arrows (start and finish pairs).
    pub flows: usize,
}

/// The tracks of a raw trace: raw thread ids renumbered, one track per worker (see the module
/// docs). Built from a first pass over the events; small (one entry per thread).
#[derive(Default)]
pub struct Tracks {
    names: HashMap<u64, String>,
    ids: BTreeMap<(u8, String), u64>,
}

impl Tracks {
    /// Reads the thread names and ids of `raw`.
    pub fn of(raw: impl IntoIterator<Item = Value>) -> Self {
        let mut names: HashMap<u64, String> = HashMap::new();
        let mut tids = Vec::new();
        for e in raw {
            let Some(tid) = e["tid"].as_u64() else {
                continue;
            };
            if e["ph"] == "M" && e["name"] == "thread_name" {
                if let Some(name) = e["args"]["name"].as_str() {
                    names.insert(tid, name.to_string());
                }
            }
            if !tids.contains(&tid) {
                tids.push(tid);
            }
        }
        let mut tracks = Self {
            names,
            ids: BTreeMap::new(),
        };
        for tid in tids {
            let key = tracks.key(tid);
            tracks.ids.entry(key).or_insert(0);
        }
        for (i, id) in tracks.ids.values_mut().enumerate() {
            *id = i as u64;
        }
        tracks
    }

    /// The sort key of raw thread `tid`: workers after every other thread (the main thread
    /// first), workers by replica then stage.
    fn key(&self, tid: u64) -> (u8, String) {
        let name = self
            .names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("thread {tid}"));
        (
            u8::from(name.starts_with("pipetrain-r")),
            worker_order(&name),
        )
    }

    /// The track of raw thread `tid` (0 for a thread the first pass did not see).
    fn track(&self, tid: u64) -> u64 {
        self.ids.get(&self.key(tid)).copied().unwrap_or(0)
    }
}

/// Turns the raw `tracing-chrome` events into the post-processed trace (see the module docs),
/// all in memory, for the tests; [`post_process_into`] streams.
#[cfg(test)]
fn post_process(raw: Vec<Value>) -> Vec<Value> {
    let tracks = Tracks::of(raw.iter().cloned());
    let mut out = Vec::new();
    post_process_into(raw, &tracks, |e| {
        out.push(e);
        Ok::<(), std::convert::Infallible>(())
    })
    .expect("collecting cannot fail");
    out
}

/// Post-processes the raw `events` (a second pass, after [`Tracks::of`]) and hands each output
/// event to `write` as it is made: the track names first, then slices, instants and flow
/// arrows as their spans close. Memory stays bounded by the open spans and the sends waiting
/// for their receives, not by the trace. Unpaired begins (a span still open when the trace was
/// flushed) are dropped.
///
/// # Errors
/// The first error of `write`.
pub fn post_process_into<E>(
    raw: impl IntoIterator<Item = Value>,
    tracks: &Tracks,
    mut write: impl FnMut(Value) -> Result<(), E>,
) -> Result<Counts, E> {
    for ((_, name), id) in &tracks.ids {
        write(
            json!({"ph": "M", "pid": 1, "tid": id, "name": "thread_name",
                     "args": {"name": display_name(name)}}),
        )?;
        write(
            json!({"ph": "M", "pid": 1, "tid": id, "name": "thread_sort_index",
                     "args": {"sort_index": id}}),
        )?;
    }
    let mut counts = Counts::default();
    let mut flows = Flows::default();
    let mut open: HashMap<u64, Vec<Value>> = HashMap::new();
    for e in raw {
        let Some(tid) = e["tid"].as_u64() else {
            continue;
        };
        match e["ph"].as_str() {
            Some("B") => open.entry(tid).or_default().push(e),
            Some("E") => {
                let Some(begin) = open.get_mut(&tid).and_then(Vec::pop) else {
                    continue;
                };
                let slice = slice(&begin, &e, tracks.track(tid));
                counts.slices += usize::from(slice.cat == ACTION_SPAN);
                write(
                    json!({"ph": "X", "pid": 1, "tid": slice.tid, "name": slice.name,
                             "cat": slice.cat, "ts": slice.ts, "dur": slice.dur,
                             "args": slice.args}),
                )?;
                for flow in flows.add(slice) {
                    counts.flows += usize::from(flow["ph"] == "s");
                    write(flow)?;
                }
            }
            Some("i") => {
                let mut e = e;
                e["tid"] = json!(tracks.track(tid));
                write(e)?;
            }
            _ => {}
        }
    }
    Ok(counts)
}

/// The slice of the span opened by `begin` and closed by `end`, on `track`.
fn slice(begin: &Value, end: &Value, track: u64) -> Slice {
    let ts = begin["ts"].as_f64().unwrap_or(0.0);
    let end = end["ts"].as_f64().unwrap_or(ts);
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
    Slice {
        name,
        cat,
        tid: track,
        ts,
        dur: (end - ts).max(0.0),
        args,
    }
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
    fn events_are_written_as_their_spans_close() {
        // Each span's slice is written before the next span is read: nothing is held back.
        let written = std::cell::Cell::new(0usize);
        let spans = 1000;
        let raw = (0..spans).flat_map(|i| {
            // Before span i is read, the 2 track events and i slices are out.
            assert!(
                written.get() >= 2 + i,
                "span {i}: {} written",
                written.get()
            );
            span(1, i as f64, i as f64 + 0.5, "0F0", 0)
        });
        let tracks = Tracks::of(span(1, 0.0, 0.5, "0F0", 0));
        let counts = post_process_into(raw, &tracks, |_| {
            written.set(written.get() + 1);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
        assert_eq!(counts.slices, spans);
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
