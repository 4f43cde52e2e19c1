//! Skip connections declared by layers ([`Layer::stashes`] / [`Layer::pops`]), checked before
//! anything runs: every pop has exactly one earlier stash, every stash a later pop.

use std::collections::HashMap;

use crate::error::EngineError;
use crate::model::layer::Layer;

/// Checks that `layers`' skips pair up: each name stashed once and popped once, later.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::{Activation, EngineError, Layer, check_skips};
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
///     Err(EngineError::PopWithoutStash { pop: 0, stash: Some(1), .. })
/// ));
/// ```
pub fn check_skips<L: Layer>(layers: &[L]) -> Result<(), EngineError> {
    let mut stashed: HashMap<String, usize> = HashMap::new();
    let mut popped: HashMap<String, usize> = HashMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for name in layer.pops() {
            if let Some(&first) = popped.get(&name) {
                return Err(EngineError::PoppedTwice {
                    name,
                    first,
                    second: i,
                });
            }
            if !stashed.contains_key(&name) {
                let stash = layers[i..].iter().position(|l| l.stashes().contains(&name));
                return Err(EngineError::PopWithoutStash {
                    name,
                    pop: i,
                    stash: stash.map(|s| s + i),
                });
            }
            popped.insert(name, i);
        }
        for name in layer.stashes() {
            if let Some(&first) = stashed.get(&name) {
                return Err(EngineError::StashedTwice {
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
        Some((stash, name)) => Err(EngineError::NeverPopped { name, stash }),
        None => Ok(()),
    }
}
