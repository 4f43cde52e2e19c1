//! Skip connections declared by layers ([`Layer::stashes`] / [`Layer::pops`]), checked before
//! anything runs: every pop has exactly one earlier stash, every stash a later pop.

use std::collections::HashMap;

use crate::layer::Layer;

/// A layer sequence whose stashes and pops do not pair up. Layers are numbered in model order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkipError {
    /// A pop with no stash of that name before it.
    #[error(
        "layer {pop} pops skip `{name}`, which no earlier layer stashes{later}; stash it in a \
         layer before {pop} or drop the pop",
        later = match stash {
            Some(s) => format!(" (layer {s} stashes it, after the pop)"),
            None => String::new(),
        }
    )]
    PopWithoutStash {
        /// The skip.
        name: String,
        /// The popping layer.
        pop: usize,
        /// A later layer that stashes it, if one does.
        stash: Option<usize>,
    },
    /// Two stashes of one name.
    #[error("layers {first} and {second} both stash skip `{name}`; give each skip its own name")]
    StashedTwice {
        /// The skip.
        name: String,
        /// The first stashing layer.
        first: usize,
        /// The second.
        second: usize,
    },
    /// A stash nothing pops.
    #[error("layer {stash} stashes skip `{name}`, which no later layer pops; pop it or drop it")]
    NeverPopped {
        /// The skip.
        name: String,
        /// The stashing layer.
        stash: usize,
    },
    /// Two pops of one name.
    #[error("layers {first} and {second} both pop skip `{name}`; a stashed skip is popped once")]
    PoppedTwice {
        /// The skip.
        name: String,
        /// The first popping layer.
        first: usize,
        /// The second.
        second: usize,
    },
}

/// Checks that `layers`' skips pair up: each name stashed once and popped once, later.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::{Activation, EngineError, Layer, SkipError, check_skips};
///
/// #[derive(Module, Debug)]
/// struct L { pops: usize } // 0: stashes `s`, 1: pops it
/// impl Layer for L {
///     fn forward(&self, x: Activation) -> Result<Activation, EngineError> { Ok(x) }
///     fn stashes(&self) -> Vec<String> { if self.pops == 0 { vec!["s".into()] } else { vec![] } }
///     fn pops(&self) -> Vec<String> { if self.pops == 1 { vec!["s".into()] } else { vec![] } }
/// }
/// let (stash, pop) = (|| L { pops: 0 }, || L { pops: 1 });
/// assert!(check_skips(&[stash(), pop()]).is_ok());
/// let err = check_skips(&[stash(), stash(), pop()]).unwrap_err();
/// assert_eq!(err.to_string(), "layers 0 and 1 both stash skip `s`; give each skip its own name");
/// assert!(matches!(
///     check_skips(&[pop(), stash()]),
///     Err(SkipError::PopWithoutStash { pop: 0, stash: Some(1), .. })
/// ));
/// ```
pub fn check_skips<L: Layer>(layers: &[L]) -> Result<(), SkipError> {
    let mut stashed: HashMap<String, usize> = HashMap::new();
    let mut popped: HashMap<String, usize> = HashMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for name in layer.pops() {
            if let Some(&first) = popped.get(&name) {
                return Err(SkipError::PoppedTwice {
                    name,
                    first,
                    second: i,
                });
            }
            if !stashed.contains_key(&name) {
                let stash = layers[i..].iter().position(|l| l.stashes().contains(&name));
                return Err(SkipError::PopWithoutStash {
                    name,
                    pop: i,
                    stash: stash.map(|s| s + i),
                });
            }
            popped.insert(name, i);
        }
        for name in layer.stashes() {
            if let Some(&first) = stashed.get(&name) {
                return Err(SkipError::StashedTwice {
                    name,
                    first,
                    second: i,
                });
            }
            stashed.insert(name, i);
        }
    }
    let mut never: Vec<(usize, String)> = stashed
        .into_iter()
        .filter(|(name, _)| !popped.contains_key(name))
        .map(|(name, stash)| (stash, name))
        .collect();
    never.sort();
    match never.into_iter().next() {
        Some((stash, name)) => Err(SkipError::NeverPopped { name, stash }),
        None => Ok(()),
    }
}
