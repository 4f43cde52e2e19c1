//! A counting allocator that tells the workers apart: the process's live bytes and peak, and
//! each worker's, through `tracking-allocator`'s hooks (the crate wraps the system allocator and
//! calls a tracker on every allocation and free; the workspace's code stays free of `unsafe`).
//!
//! ## Whose bytes are they
//!
//! The live counters ([`live`], [`peaks`]) charge an allocation to **the worker whose threads
//! made it**, until anyone frees it: its worker thread `pipetrain-r{replica}s{stage}` and its
//! compute pool's `pipetrain-r{replica}s{stage}-{i}` (the interpreter runs in the pool, and so
//! do burn-flex's and `gemm`'s parallel kernels, which take the pool they are called in).
//! Frees are charged to the allocation's maker by address (a map from each live allocation to
//! its maker), so a worker's count never goes below what it made and another freed. Bytes
//! allocated on any other thread (the test's, which builds the pipeline and splits the batch)
//! are nobody's ([`OTHER`]), and in the process's total.
//!
//! A tensor made by one worker and freed by another has no single owner: stage 0's activation
//! that stage 1 receives (on a CPU the hand-off sends the buffer itself, no copy), stage 1's
//! input gradient that stage 0's backward reads, a replica's share of the all-reduce's sums
//! that the other replicas read. While [`record`]ing, the tracker logs every allocation and
//! free with its maker and freer, and [`steps`] reads a step's peak per worker off the log
//! under each [`Owner`] rule: the maker, the holder (the receiver of a message within a
//! replica's pipeline, the maker of a collective's sums), the maker of what it alone held, or
//! everyone who held it at either end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use tracking_allocator::{AllocationGroupId, AllocationRegistry, AllocationTracker, Allocator};

/// Wraps the system allocator and calls [`Counter`] on each allocation and free (once
/// [`start`]ed).
#[global_allocator]
static ALLOCATOR: Allocator<std::alloc::System> = Allocator::system();

/// Owners counted apart: [`OTHER`], then one per worker (replica × stage) up to this many.
const OWNERS: usize = 64;
/// Stages a replica may have in the index of a worker's owner slot.
const STAGES: usize = 16;
/// The slot of bytes no worker's thread allocated.
pub const OTHER: usize = 0;

/// Live bytes per owner, and the most live since the last [`reset_peaks`].
static LIVE: [AtomicI64; OWNERS] = [const { AtomicI64::new(0) }; OWNERS];
static PEAK: [AtomicI64; OWNERS] = [const { AtomicI64::new(0) }; OWNERS];
/// The process's live bytes and peak (every owner together).
static TOTAL: AtomicI64 = AtomicI64::new(0);
static TOTAL_PEAK: AtomicI64 = AtomicI64::new(0);

/// Shards of the map from each live allocation's address to its maker's slot, size and id.
const SHARDS: usize = 32;
type Makers = Mutex<Option<HashMap<usize, (u8, usize, u64)>>>;
static MAKERS: [Makers; SHARDS] = [const { Mutex::new(None) }; SHARDS];
/// The next allocation's id.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One allocation or free, in the order the tracker saw them, while [`record`] keeps a log.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The allocation's id (its free names it too).
    pub id: u64,
    pub size: usize,
    /// The slot of the thread that made it.
    pub maker: u8,
    /// The slot of the thread that freed it; `None` for the allocation itself.
    pub freer: Option<u8>,
}

/// Whether the tracker logs its events, and the log.
static RECORDING: AtomicBool = AtomicBool::new(false);
static LOG: Mutex<Vec<Event>> = Mutex::new(Vec::new());

/// Per owner slot, the slot its bytes are counted in, plus one (0: its own): the chunks of one
/// pipeline rank, which take turns, are counted together ([`count_as`]).
static COUNT_AS: [AtomicUsize; OWNERS] = [const { AtomicUsize::new(0) }; OWNERS];

thread_local! {
    /// This thread's owner slot, read once from its name (`u8::MAX`: not read yet).
    static OWNER: std::cell::Cell<u8> = const { std::cell::Cell::new(u8::MAX) };
}

/// The owner slot of worker (`replica`, `stage`).
pub fn slot(replica: usize, stage: usize) -> usize {
    1 + replica * STAGES + stage
}

/// The owner slot a thread named `name` allocates for: a worker's or its pool's
/// (`pipetrain-r1s0`, `pipetrain-r1s0-0`), else [`OTHER`].
fn owner_of(name: Option<&str>) -> usize {
    let parse = |name: &str| -> Option<usize> {
        let rest = name.strip_prefix("pipetrain-r")?;
        let (replica, rest) = rest.split_once('s')?;
        let stage = rest.split('-').next()?;
        let (replica, stage) = (replica.parse().ok()?, stage.parse::<usize>().ok()?);
        (stage < STAGES && slot(replica, stage) < OWNERS).then(|| slot(replica, stage))
    };
    name.and_then(parse).unwrap_or(OTHER)
}

/// The slot this thread's allocations are counted in.
fn this_thread_owner() -> usize {
    let own = OWNER
        .try_with(|owner| {
            if owner.get() == u8::MAX {
                owner.set(owner_of(std::thread::current().name()) as u8);
            }
            owner.get() as usize
        })
        .unwrap_or(OTHER);
    match COUNT_AS[own].load(Ordering::SeqCst) {
        0 => own,
        plus_one => plus_one - 1,
    }
}

/// Counts the bytes of worker slot `slot`'s threads in slot `together` from now on (the chunks
/// of one pipeline rank). Call between measurements.
pub fn count_as(slot: usize, together: usize) {
    COUNT_AS[slot].store(together + 1, Ordering::SeqCst);
}

/// Counts every worker's bytes in its own slot again.
pub fn count_apart() {
    for slot in &COUNT_AS {
        slot.store(0, Ordering::SeqCst);
    }
}

fn shard(addr: usize) -> &'static Makers {
    // Allocations are aligned: the low bits say nothing.
    &MAKERS[(addr >> 4) % SHARDS]
}

fn add(owner: usize, bytes: i64) {
    let live = LIVE[owner].fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK[owner].fetch_max(live, Ordering::SeqCst);
    let total = TOTAL.fetch_add(bytes, Ordering::SeqCst) + bytes;
    TOTAL_PEAK.fetch_max(total, Ordering::SeqCst);
}

/// The tracker: counts each allocation for the allocating thread's owner, and each free for the
/// freed allocation's maker. Its own map's allocations are not tracked (the crate suspends
/// tracking while a tracker runs).
struct Counter;

impl AllocationTracker for Counter {
    fn allocated(&self, addr: usize, size: usize, _wrapped: usize, _group: AllocationGroupId) {
        let owner = this_thread_owner();
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let stale = {
            let mut map = shard(addr).lock().unwrap_or_else(|e| e.into_inner());
            map.get_or_insert_with(HashMap::new)
                .insert(addr, (owner as u8, size, id))
        };
        // An address freed where tracking could not see it (a thread's last frees) and made
        // again: the old allocation is gone.
        if let Some((maker, old, _)) = stale {
            add(maker as usize, -(old as i64));
        }
        add(owner, size as i64);
        log(Event {
            id,
            size,
            maker: owner as u8,
            freer: None,
        });
    }

    fn deallocated(
        &self,
        addr: usize,
        _size: usize,
        _wrapped: usize,
        _source: AllocationGroupId,
        _current: AllocationGroupId,
    ) {
        let made = {
            let mut map = shard(addr).lock().unwrap_or_else(|e| e.into_inner());
            map.as_mut().and_then(|m| m.remove(&addr))
        };
        if let Some((maker, size, id)) = made {
            add(maker as usize, -(size as i64));
            log(Event {
                id,
                size,
                maker,
                freer: Some(this_thread_owner() as u8),
            });
        }
    }
}

/// Appends `event` to the log while one is kept.
fn log(event: Event) {
    if RECORDING.load(Ordering::SeqCst) {
        LOG.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

/// Keeps a log of every allocation and free from now until [`recorded`].
pub fn record() {
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    log.clear();
    // Not counted: the log is the test's, not the step's.
    AllocationRegistry::untracked(|| log.reserve(1 << 20));
    RECORDING.store(true, Ordering::SeqCst);
}

/// Stops the log and hands it over.
pub fn recorded() -> Vec<Event> {
    RECORDING.store(false, Ordering::SeqCst);
    std::mem::take(&mut *LOG.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Who a step's bytes belong to, read off its log ([`steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The thread that made them.
    Maker,
    /// Whoever holds them to the end: the freer where the bytes were handed over within a
    /// replica's pipeline (an activation sent on, a gradient sent back: the receiver frees what
    /// it received; the caller's rows a stage reads), the maker otherwise (a collective's sums,
    /// which the replica that owns the share makes and the others read).
    Holder,
    /// The maker, where the maker freed them too; in the slot [`CROSSED`] where another
    /// worker's thread did (messages: an activation sent on, a gradient sent back).
    OwnOnly,
    /// Both: the maker, and the freer where another worker's thread freed them (each worker
    /// is charged every byte it held at either end).
    Touched,
}

/// The slot [`Owner::OwnOnly`] counts the bytes in that one worker made and another freed.
pub const CROSSED: usize = OWNERS - 1;

/// The replica of a worker's slot; `None` for [`OTHER`].
fn replica_of(slot: usize) -> Option<usize> {
    (slot != OTHER).then(|| (slot - 1) / STAGES)
}

/// Each slot's step in `log` with its bytes counted for `owner`: its most bytes live above
/// where it began, less what it left live at the end.
pub fn steps(log: &[Event], owner: Owner) -> Vec<u64> {
    let freer: HashMap<u64, u8> = log.iter().filter_map(|e| Some((e.id, e.freer?))).collect();
    let made: std::collections::HashSet<u64> = log
        .iter()
        .filter(|e| e.freer.is_none())
        .map(|e| e.id)
        .collect();
    // The slots an event counts in: one, or the maker's and the freer's.
    let slots = |e: &Event| -> [Option<usize>; 2] {
        let maker = e.maker as usize;
        // Bytes made before the log: their maker's, whoever frees them.
        if !made.contains(&e.id) {
            return [Some(maker), None];
        }
        let freed_by = freer.get(&e.id).map(|&f| f as usize);
        let crossed = freed_by.filter(|&f| f != maker);
        match owner {
            Owner::Maker => [Some(maker), None],
            Owner::Holder => match crossed {
                Some(f) if replica_of(maker).is_none_or(|r| replica_of(f) == Some(r)) => {
                    [Some(f), None]
                }
                _ => [Some(maker), None],
            },
            Owner::OwnOnly => [Some(crossed.map_or(maker, |_| CROSSED)), None],
            Owner::Touched => [Some(maker), crossed],
        }
    };
    let (mut live, mut peak) = (vec![0i64; OWNERS], vec![0i64; OWNERS]);
    for e in log {
        for s in slots(e).into_iter().flatten() {
            match e.freer {
                None => live[s] += e.size as i64,
                Some(_) => live[s] -= e.size as i64,
            }
            peak[s] = peak[s].max(live[s]);
        }
    }
    live.iter()
        .zip(&peak)
        .map(|(&end, &peak)| (peak - end.max(0)).max(0) as u64)
        .collect()
}

/// Starts counting (once per process): what was allocated before is not counted, nor its frees.
pub fn start() {
    static START: Once = Once::new();
    START.call_once(|| {
        AllocationRegistry::set_global_tracker(Counter).expect("one tracker per process");
        AllocationRegistry::enable_tracking();
    });
}

/// The process's live bytes (since [`start`]).
pub fn current_usage() -> i64 {
    TOTAL.load(Ordering::SeqCst)
}

/// The process's most live bytes since the last [`reset_peaks`].
pub fn peak_usage() -> i64 {
    TOTAL_PEAK.load(Ordering::SeqCst)
}

/// Each owner's live bytes, by slot.
pub fn live() -> Vec<i64> {
    LIVE.iter().map(|l| l.load(Ordering::SeqCst)).collect()
}

/// Each owner's most live bytes since the last [`reset_peaks`], by slot.
pub fn peaks() -> Vec<i64> {
    PEAK.iter().map(|p| p.load(Ordering::SeqCst)).collect()
}

/// Sets every peak, the process's and each owner's, to what is live now.
pub fn reset_peaks() {
    for (live, peak) in LIVE.iter().zip(&PEAK) {
        peak.store(live.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    TOTAL_PEAK.store(TOTAL.load(Ordering::SeqCst), Ordering::SeqCst);
}

#[test]
fn a_worker_s_threads_are_its_own() {
    assert_eq!(owner_of(Some("pipetrain-r0s0")), slot(0, 0));
    assert_eq!(owner_of(Some("pipetrain-r1s1-0")), slot(1, 1));
    assert_eq!(owner_of(Some("pipetrain-r0s3-12")), slot(0, 3));
    assert_eq!(owner_of(Some("pipetrain-mpi")), OTHER);
    assert_eq!(owner_of(Some("main")), OTHER);
    assert_eq!(owner_of(None), OTHER);
}
