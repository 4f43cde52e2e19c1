//! Plain text through a Hugging Face tokenizer (`tokenizer.json`, the `tokenizers` crate):
//! next-token prediction windows, cut as [`text`](crate::text) cuts bytes.

use std::path::Path;

use crate::bytes::read;
use crate::dataset::InMemory;
use crate::error::{DataError, Result};
use crate::problem::ParameterProblem;

/// The text of `path`, UTF-8, encoded by the tokenizer of `tokenizer` without special tokens,
/// and cut into non-overlapping windows of `context + 1` tokens: window `w` (from token
/// `i = w × (context + 1)`) is one example with int input `ids[i..i + context]` and int target
/// `ids[i + 1..i + context + 1]`. A tail shorter than a window is dropped. Also returns the
/// tokenizer's vocabulary size (added tokens included), which the model's must cover.
///
/// # Errors
/// `context` 0; the text unreadable or not UTF-8; the tokenizer unreadable or not one the
/// `tokenizers` crate loads ([`DataError::Tokenizer`]); fewer tokens than one window
/// ([`DataError::TooFewTokens`]).
pub fn load(path: impl AsRef<Path>, context: usize, tokenizer: &Path) -> Result<(InMemory, usize)> {
    let path = path.as_ref();
    if context == 0 {
        return Err(DataError::BadParameter {
            name: "context",
            value: "0".into(),
            problem: ParameterProblem::ZeroContext,
        });
    }
    let bytes = read(path)?;
    let text = String::from_utf8(bytes).map_err(|e| DataError::Tokenizer {
        path: path.to_path_buf(),
        reason: format!(
            "not UTF-8 text (at byte offset {}): a tokenizer encodes text",
            e.utf8_error().valid_up_to()
        ),
    })?;
    let bad_tokenizer = |reason: String| DataError::Tokenizer {
        path: tokenizer.to_path_buf(),
        reason,
    };
    // Read as data first (a FIFO or a directory is refused as every data file is).
    let json = read(tokenizer)?;
    let tokenizer_model = tokenizers::Tokenizer::from_bytes(&json).map_err(|e| {
        bad_tokenizer(format!(
            "not a tokenizer.json the tokenizers crate loads: {e}"
        ))
    })?;
    let encoding = tokenizer_model
        .encode(text.as_str(), false)
        .map_err(|e| bad_tokenizer(format!("cannot encode {}: {e}", path.display())))?;
    let ids = encoding.get_ids();
    let window = context + 1;
    if ids.len() < window {
        return Err(DataError::TooFewTokens {
            path: path.to_path_buf(),
            tokenizer: tokenizer.to_path_buf(),
            tokens: ids.len(),
            context,
            needed: window,
        });
    }
    let data = crate::text::windows(ids, context)?;
    Ok((data, tokenizer_model.get_vocab_size(true)))
}
