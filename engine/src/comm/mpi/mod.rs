//! Multi-process and multi-host runs over MPI (feature `mpi`): the same engine, with workers in
//! several processes.
//!
//! ```text
//!   mpirun -np 4 pipetrain train --stages 2 --replicas 2
//!
//!   rank 0: r0s0 ─┐          rank 1: r0s1        one worker per process (or k with
//!   rank 2: r1s0  │ MPI      rank 3: r1s1        --workers-per-process k: channels inside)
//!                 └─ activations/gradients between stages, sums within each stage group
//! ```
//!
//! - [`Comm`] — the one communication thread per process that owns MPI (communicators are not
//!   `Send`; the workspace forbids `unsafe`) and serves the workers over channels; it also
//!   carries the launcher's broadcasts and gathers, and failure notices between processes.
//! - [`MpiTransport`] and [`MpiCollective`] — the engine's [`Transport`](crate::Transport) and
//!   [`Collective`](crate::Collective) over it; sums are taken in rank order, so a run ends
//!   with the same bits as in one process.
//! - [`MpiFabric`] — the engine's [`Fabric`](crate::Fabric): give it to
//!   [`Runtime::new`](crate::Runtime::new) with workers built for
//!   [`Placement::local`].
//! - [`Placement`] and [`check_environment`] — rank → workers, and the launcher's variables
//!   (Slurm's, torchrun's) checked against MPI.

mod bundle_wire;
mod collective;
mod comm;
mod fabric;
mod inbox;
mod launch;
mod notice;
mod server;
mod transport;
mod wire;

pub use collective::MpiCollective;
pub use comm::{Comm, Identity};
pub use fabric::MpiFabric;
pub use launch::{Placement, check_environment};
pub use transport::MpiTransport;
