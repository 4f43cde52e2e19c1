//! pipetrain
