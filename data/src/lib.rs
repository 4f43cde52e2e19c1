//! # pipetrain-data
//!
//! Datasets, a distributed sampler with the semantics of PyTorch's `DistributedSampler`, and
//! loaders for real file formats.
