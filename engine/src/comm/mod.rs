//! How workers talk: the step's [`Abort`](abort::Abort) that every wait watches, point-to-point
//! [`Transport`](transport::Transport) of activations and gradients, the
//! [`Fabric`](fabric::Fabric) that links a world's workers, the collectives over a group
//! (`collective/`), and their MPI versions across processes (`mpi/`).

pub(crate) mod abort;
pub(crate) mod collective;
pub(crate) mod fabric;
#[cfg(feature = "mpi")]
pub mod mpi;
pub(crate) mod transport;
