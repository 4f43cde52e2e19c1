//! `Bundle`: a small named set of tensors crossing one stage boundary together.
//!
//! A layer whose output is more than one tensor — a hidden state with its position ids or
//! attention mask, an encoder output a later block needs — returns
//! [`Activation::Bundle`]. Each part is float or int and is *differentiable* or not: the engine
//! sends, stashes and re-materializes every part, and back-propagates through the
//! differentiable ones only. The gradient message upstream is a bundle of the differentiable
//! parts' gradients, by name (empty when none is differentiable), so a non-differentiable part —
//! int ids, or a float mask — never waits for a gradient that cannot come.

use std::fmt;

use crate::error::EngineError;
use crate::model::activation::Activation;

/// One named tensor of a [`Bundle`].
#[derive(Clone, Debug)]
pub struct Part {
    /// The name a later layer takes it by.
    pub name: String,
    /// The tensor, batch dimension first.
    pub value: Activation,
    /// Whether gradients flow back through it (float parts only).
    pub differentiable: bool,
}

/// Several named tensors that cross a stage boundary together, each with the batch dimension
/// first (the same rows in every part).
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::Int;
/// use pipetrain_engine::{Activation, Bundle};
/// let device = Device::flex();
/// let x: Activation = Bundle::new()
///     .with("hidden", Tensor::<3>::zeros([2, 4, 8], &device)) // float: differentiable
///     .with("positions", Tensor::<2, Int>::zeros([2, 4], &device)) // int: never
///     .with_constant("mask", Tensor::<2>::ones([2, 4], &device)) // float, no gradient
///     .into();
/// assert_eq!(x.batch_size(), 2);
/// let halves = x.split(2)?;
/// let mut first = halves[0].clone().bundle()?;
/// let hidden: Tensor<3> = first.take("hidden")?.float()?;
/// assert_eq!(hidden.dims(), [1, 4, 8]);
/// assert!(first.take("hidden").is_err()); // taken already: an error naming what is left
/// # Ok::<(), pipetrain_engine::EngineError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    parts: Vec<Part>,
}

impl Bundle {
    /// An empty bundle.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `value` as part `name`, differentiable if it is float. A part of that name is
    /// replaced in place.
    pub fn with(self, name: impl Into<String>, value: impl Into<Activation>) -> Self {
        let value = value.into();
        let differentiable = value.is_float();
        self.with_part(Part {
            name: name.into(),
            value,
            differentiable,
        })
    }

    /// With `value` as part `name`, without a gradient (a mask, ids, a frozen input): its
    /// float values are cut from the graph here, so no gradient flows through it in a pipeline
    /// or on one device.
    pub fn with_constant(self, name: impl Into<String>, value: impl Into<Activation>) -> Self {
        self.with_part(Part {
            name: name.into(),
            value: value.into(),
            differentiable: false,
        })
    }

    /// With `part` (replacing one of its name in place). An int part is never differentiable; a part
    /// that is not is cut from the graph (as [`with_constant`](Self::with_constant)).
    pub fn with_part(mut self, mut part: Part) -> Self {
        part.differentiable &= part.value.is_float();
        if !part.differentiable {
            part.value = crate::model::tracking::constant(part.value);
        }
        match self.parts.iter_mut().find(|p| p.name == part.name) {
            Some(same) => *same = part,
            None => self.parts.push(part),
        }
        self
    }

    /// A bundle of `parts` as they are (names assumed distinct).
    pub(crate) fn from_parts(parts: Vec<Part>) -> Self {
        Bundle { parts }
    }

    /// With every part of `other` after these (each replacing one of its name in place).
    pub fn with_parts(self, other: Bundle) -> Self {
        other.parts.into_iter().fold(self, Bundle::with_part)
    }

    /// The parts, in insertion order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The parts, by value.
    pub fn into_parts(self) -> Vec<Part> {
        self.parts
    }

    /// Part `name`, or an error naming the parts there are.
    pub fn get(&self, name: &str) -> Result<&Activation, EngineError> {
        match self.parts.iter().find(|p| p.name == name) {
            Some(p) => Ok(&p.value),
            None => Err(self.missing(name)),
        }
    }

    /// Removes and returns part `name`, or an error naming the parts there are.
    pub fn take(&mut self, name: &str) -> Result<Activation, EngineError> {
        self.take_part(name).map(|p| p.value)
    }

    /// Removes and returns part `name` with its flag, or an error naming the parts there are.
    pub(crate) fn take_part(&mut self, name: &str) -> Result<Part, EngineError> {
        match self.parts.iter().position(|p| p.name == name) {
            Some(i) => Ok(self.parts.remove(i)),
            None => Err(self.missing(name)),
        }
    }

    fn missing(&self, name: &str) -> EngineError {
        let names: Vec<&str> = self.parts.iter().map(|p| p.name.as_str()).collect();
        EngineError::LayerRejected(format!(
            "the bundle has no part `{name}`; its parts are {names:?}"
        ))
    }

    /// Parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether it has no parts.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Each part's value mapped by `f`, names and flags kept.
    pub(crate) fn map(self, mut f: impl FnMut(Activation) -> Activation) -> Bundle {
        let parts = self
            .parts
            .into_iter()
            .map(|p| Part {
                value: f(p.value),
                ..p
            })
            .collect();
        Bundle { parts }
    }

    /// Splits every part along dimension 0 into `parts` parts (see [`Activation::split`]).
    pub(crate) fn split(self, parts: usize) -> Result<Vec<Bundle>, EngineError> {
        let rows = self.parts.first().map_or(0, |p| p.value.batch_size());
        let mut out = vec![Bundle::new(); parts];
        for part in self.parts {
            if part.value.batch_size() != rows {
                return Err(EngineError::LayerRejected(format!(
                    "bundle part `{}` has {} rows, the first part {rows}: every part needs the \
                     batch dimension first",
                    part.name,
                    part.value.batch_size()
                )));
            }
            for (bundle, value) in out.iter_mut().zip(part.value.split(parts)?) {
                bundle.parts.push(Part {
                    name: part.name.clone(),
                    value,
                    differentiable: part.differentiable,
                });
            }
        }
        Ok(out)
    }

    /// Concatenates bundles with the same part names part by part along dimension 0.
    pub(crate) fn cat(bundles: Vec<Bundle>) -> Result<Bundle, EngineError> {
        let first = bundles.first().cloned().unwrap_or_default();
        let mut columns: Vec<Vec<Activation>> = vec![Vec::new(); first.len()];
        for mut bundle in bundles {
            for (column, part) in columns.iter_mut().zip(&first.parts) {
                column.push(bundle.take(&part.name)?);
            }
        }
        let parts = first
            .parts
            .into_iter()
            .zip(columns)
            .map(|(p, column)| {
                Ok(Part {
                    value: Activation::cat(column)?,
                    ..p
                })
            })
            .collect::<Result<_, EngineError>>()?;
        Ok(Bundle { parts })
    }
}

impl From<Bundle> for Activation {
    fn from(bundle: Bundle) -> Self {
        Activation::Bundle(bundle)
    }
}

impl fmt::Display for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bundle {{")?;
        for (i, p) in self.parts.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let grad = if p.differentiable { "" } else { " (no grad)" };
            write!(f, "{sep}{}: {}{grad}", p.name, p.value)?;
        }
        write!(f, "}}")
    }
}
