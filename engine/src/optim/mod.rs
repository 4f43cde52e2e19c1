//! The optimizer side of a step: which optimizer and its PyTorch options, ZeRO-1's sharded
//! state, and tied parameters (the tie plan, and their gradients summed over the copies).

pub(crate) mod optimizer;
pub(crate) mod options;
pub(crate) mod tie;
pub(crate) mod zero;
