//! [`fit_balance`]: the valid balance nearest to one given, for a remedy to offer.
//!
//! A balance that is refused (an empty stage, a wrong sum, more entries than layers, a count of
//! entries that does not split into ranks of v chunks) is fixed by another balance, and the
//! remedy that names it must be one that [`Partition::from_balance`](crate::Partition) accepts:
//! `stages` entries, each at least 1, summing to `layers`. The entries keep the proportions
//! given, so that the fix changes as little as it can.

/// The balance of `stages` entries, summing to `layers`, nearest to `balance`: its first
/// `stages` entries (the rest merged into the last), scaled to sum to `layers`, each at least 1;
/// `None` when no balance fits (`stages` is 0 or more than `layers`).
///
/// ```
/// use pipetrain_partitioner::{Partition, fit_balance};
/// assert_eq!(fit_balance(&[1, 2], 2, 9), Some(vec![3, 6]));
/// assert_eq!(fit_balance(&[0, 3], 2, 3), Some(vec![1, 2]));
/// assert_eq!(fit_balance(&[1, 1, 1], 2, 3), Some(vec![1, 2]));
/// assert_eq!(fit_balance(&[1, 1, 1, 1], 3, 3), Some(vec![1, 1, 1]));
/// assert_eq!(fit_balance(&[3], 2, 3), Some(vec![2, 1]));
/// assert_eq!(fit_balance(&[1, 2], 3, 2), None);
/// let fit = fit_balance(&[usize::MAX, 7], 2, 8).unwrap();
/// Partition::from_balance(&fit, 8).unwrap();
/// ```
pub fn fit_balance(balance: &[usize], stages: usize, layers: usize) -> Option<Vec<usize>> {
    if stages == 0 || stages > layers {
        return None;
    }
    // Weights in u128: a balance of huge entries sums without overflow.
    let mut weights: Vec<u128> = balance.iter().take(stages).map(|&n| n as u128).collect();
    if let Some(last) = weights.last_mut() {
        *last += balance
            .iter()
            .skip(stages)
            .map(|&n| n as u128)
            .sum::<u128>();
    }
    // Too few entries: the largest one halved until there are enough.
    while weights.len() < stages {
        let largest = weights
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(i, w)| (w, std::cmp::Reverse(i)));
        let Some((i, w)) = largest else {
            weights.push(1);
            continue;
        };
        weights[i] = w - w / 2;
        weights.insert(i + 1, w / 2);
    }
    // Scaled in floating point (a remedy needs the proportions, not exact ones), each entry
    // the floor of its share but at least 1, then the layers left over given by largest
    // remainder, and any excess (from the raises to 1) taken from the largest entries.
    let total = weights.iter().sum::<u128>().max(1) as f64;
    let shares: Vec<f64> = weights
        .iter()
        .map(|&w| w as f64 / total * layers as f64)
        .collect();
    let mut fit: Vec<usize> = shares
        .iter()
        .map(|&share| (share as usize).clamp(1, layers))
        .collect();
    let mut sum: usize = fit.iter().sum();
    let mut order: Vec<usize> = (0..stages).collect();
    order.sort_by(|&a, &b| shares[b].fract().total_cmp(&shares[a].fract()));
    for &i in order.iter().cycle().take(layers.saturating_sub(sum)) {
        fit[i] += 1;
        sum += 1;
    }
    while sum > layers {
        let i = (0..stages).rev().max_by_key(|&i| fit[i])?;
        fit[i] -= 1;
        sum -= 1;
    }
    Some(fit)
}

#[cfg(test)]
mod tests {
    use super::fit_balance;
    use crate::Partition;

    /// Every fit is accepted, for every shape small enough to sweep.
    #[test]
    fn every_fit_is_a_valid_balance() {
        let balances: [&[usize]; 7] = [&[], &[0], &[5], &[0, 0, 3], &[1, 2, 3], &[9, 1], &[2; 6]];
        for balance in balances {
            for layers in 1..8 {
                for stages in 1..=layers {
                    let fit = fit_balance(balance, stages, layers).unwrap();
                    assert_eq!(fit.len(), stages, "{balance:?} {stages} {layers}");
                    Partition::from_balance(&fit, layers).unwrap();
                }
                assert_eq!(fit_balance(balance, layers + 1, layers), None);
            }
        }
    }
}
