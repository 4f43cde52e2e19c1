//! Every file pipetrain writes — checkpoints, `--metrics`, `--profile` and its raw stream,
//! `--plot`, `export -o`, `tune --apply`, the bench's `--out` — goes through this module, under
//! one set of rules:
//!
//! - **Only a regular file, or a missing name in an existing directory, is a destination.** A
//!   directory, device node, FIFO, socket or symbolic link there is refused
//!   ([`EngineError::NotRegular`](crate::EngineError::NotRegular)) and never replaced: `--profile /dev/full` once turned the
//!   machine's `/dev/full` into a file.
//! - **Probe first.** [`probe`] runs every step of a write but the rename (temp file created,
//!   written, synced, removed) before a run starts, so a bad path fails at once, not after the
//!   training.
//! - **Temp files are exclusive.** They are created with `O_CREAT | O_EXCL` under a random name
//!   (the `tempfile` crate), so a symbolic link planted at any name beside the destination is
//!   never followed, and two writers never share one.
//! - **Atomic.** Write all, fsync, rename over the destination, fsync the directory: the
//!   destination holds the old file or the whole new one, never a part ([`AtomicFile`],
//!   [`write_atomically`]). A failed write removes its temp file.
//! - **Stale temp files are swept.** A temp file's name carries its owner's process id and host
//!   (see [`TempFile`]); one whose owner is gone (killed mid-write) is removed the next time a writer
//!   of the same destination starts on that host.
//!
//! ```text
//! path's directory:  .run.csv.4711@host.Xa3k9q.tmp   exclusive, random; removed on failure
//!                    │ write all, fsync                 (or, once 4711 is gone, by the next run)
//!                    ▼ rename
//!                    run.csv                           then fsync the directory
//! ```

mod atomic;
mod destination;
mod temp;

pub use atomic::{AtomicFile, probe, write_atomically};
pub use destination::{directory, regular_or_absent};
pub use temp::{TempFile, sweep};
