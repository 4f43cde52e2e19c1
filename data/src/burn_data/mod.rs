//! burn's data side (feature `burn-dataset`): pipetrain's datasets as burn
//! [`Dataset`](burn::data::dataset::Dataset)s, a burn [`Batcher`](burn::data::dataloader::batcher::Batcher)
//! that collates them into pipetrain [`Batch`](pipetrain_engine::Batch)es, and any burn dataset as
//! a pipetrain [`Dataset`](crate::Dataset) that the [`Loader`](crate::Loader) and a pipeline take.

mod batcher;
mod from_burn;
mod to_burn;

pub use batcher::ExampleBatcher;
pub use from_burn::FromBurn;
