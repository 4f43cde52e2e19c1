//! What a model is made of, as the engine sees it: [`Layer`](layer::Layer)s, the
//! [`Activation`](activation::Activation)s (and [`Bundle`](bundle::Bundle)s) they pass, a
//! [`Batch`](batch::Batch) and the [`Layout`](layout::Layout) that cuts it, the [`Loss`](loss::Loss), mixed precision's casts, parameter
//! reads, a model in and out of training, the per-layer cost probe ([`costs`]), and the split
//! layers (`Dense`, split `Linear`s) whose backward the engine runs by hand.

pub(crate) mod activation;
pub(crate) mod batch;
pub(crate) mod bundle;
pub mod costs;
pub(crate) mod layer;
pub(crate) mod layout;
pub(crate) mod loss;
pub(crate) mod mixed_precision;
pub(crate) mod modes;
pub(crate) mod params;
pub(crate) mod split;
pub(crate) mod tracking;
