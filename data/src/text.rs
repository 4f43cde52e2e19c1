//! Plain text as byte-level tokens (vocabulary of 256): next-byte prediction windows.

use std::path::Path;

use crate::bytes::read;
use crate::dataset::{InMemory, Values};
use crate::error::{DataError, Result};
use crate::problem::ParameterProblem;

/// Tokens are bytes.
pub const VOCAB: usize = 256;

/// The bytes of `path` cut into non-overlapping windows of `context + 1` bytes; window `w`
/// (starting at byte `i = w × (context + 1)`) is one example with int input
/// `bytes[i..i + context]` and int target `bytes[i + 1..i + context + 1]`, both of shape
/// `[context]`. A tail shorter than a window is dropped.
///
/// ```text
/// context 3:   h e l l | o   w o | r l d
///              input  h e l   target e l l      (the tail "r l d" is dropped)
/// ```
///
/// Errors when `context` is 0 or the file is shorter than one window.
pub fn load(path: impl AsRef<Path>, context: usize) -> Result<InMemory> {
    let path = path.as_ref();
    if context == 0 {
        return Err(DataError::BadParameter {
            name: "context",
            value: "0".into(),
            problem: ParameterProblem::ZeroContext,
        });
    }
    let bytes = read(path)?;
    let window = context + 1;
    if bytes.len() < window {
        return Err(DataError::TooShort {
            path: path.to_path_buf(),
            bytes: bytes.len(),
            context,
            needed: window,
        });
    }
    windows(&bytes, context)
}

/// `tokens` cut into non-overlapping windows of `context + 1`: window `w` is the example with
/// input `tokens[i..i + context]` and target `tokens[i + 1..i + context + 1]`, `i = w ×
/// (context + 1)`; a shorter tail is dropped. Bytes here, a tokenizer's ids in
/// [`tokenized`](crate::tokenized).
pub(crate) fn windows<T: Copy + Into<i64>>(tokens: &[T], context: usize) -> Result<InMemory> {
    let window = context + 1;
    let count = tokens.len() / window;
    let mut inputs = Vec::with_capacity(count * context);
    let mut targets = Vec::with_capacity(count * context);
    for w in tokens.chunks_exact(window) {
        inputs.extend(w[..context].iter().map(|&t| t.into()));
        targets.extend(w[1..].iter().map(|&t| t.into()));
    }
    InMemory::new(
        Values::Int(inputs),
        vec![context],
        Values::Int(targets),
        vec![context],
    )
}
