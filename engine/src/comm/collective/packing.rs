//! Laying tensors out in flat buffers: which rank owns which range.

use std::ops::Range;

use burn::prelude::*;

use crate::error::EngineError;

/// Tensor indices grouped by owner rank (rank 0's first), in index order within a rank.
pub(super) fn by_owner(owners: &[usize], size: usize) -> Vec<usize> {
    (0..size)
        .flat_map(|r| (0..owners.len()).filter(move |&i| owners[i] == r))
        .collect()
}

/// Each rank's consecutive range in a buffer laid out in `order`.
pub(super) fn owner_bounds(
    order: &[usize],
    owners: &[usize],
    lens: &[usize],
    size: usize,
) -> Vec<Range<usize>> {
    let mut bounds = Vec::with_capacity(size);
    let mut start = 0;
    for r in 0..size {
        let len: usize = order
            .iter()
            .filter(|&&i| owners[i] == r)
            .map(|&i| lens[i])
            .sum();
        bounds.push(start..start + len);
        start += len;
    }
    bounds
}

/// A rank-1 tensor's values as `f32`.
pub(crate) fn values(t: Tensor<1>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 after convert")
}

/// `len` values split into `parts` consecutive ranges whose sizes differ by at most one (the
/// first `len % parts` ranges are one longer).
///
/// ```
/// assert_eq!(pipetrain_engine::even_bounds(7, 3), vec![0..3, 3..5, 5..7]);
/// ```
pub fn even_bounds(len: usize, parts: usize) -> Vec<Range<usize>> {
    let (base, extra) = (len / parts, len % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let end = start + base + usize::from(i < extra);
            let range = start..end;
            start = end;
            range
        })
        .collect()
}

/// `Ok` if `bounds` split `len` values into `size` consecutive ranges, one per member.
pub(crate) fn check_bounds(
    bounds: &[Range<usize>],
    len: usize,
    size: usize,
) -> Result<(), EngineError> {
    let consecutive = bounds.len() == size
        && bounds.first().is_none_or(|b| b.start == 0)
        && bounds.windows(2).all(|w| w[0].end == w[1].start)
        && bounds.iter().all(|b| b.start <= b.end)
        && bounds.last().is_none_or(|b| b.end == len);
    if consecutive {
        Ok(())
    } else {
        Err(EngineError::Bounds {
            bounds: bounds.to_vec(),
            len,
            size,
        })
    }
}
