//! CIFAR-10 in its binary batches (`data_batch_1.bin` … `data_batch_5.bin`, `test_batch.bin`).
//!
//! ```text
//! record: [label u8 in 0..10][1024 red][1024 green][1024 blue]   (3073 bytes, 32 × 32 planes)
//! ```
//! A file is records back to back, no header.

use std::path::{Path, PathBuf};

use crate::bytes::{Cursor, pixels, read};
use crate::dataset::{InMemory, Values};
use crate::error::{DataError, Result};
use crate::problem::Corruption;

/// Bytes per record: one label and 3 × 32 × 32 pixels.
pub const RECORD: usize = 1 + PIXELS;
/// Pixel bytes per record.
pub const PIXELS: usize = 3 * 32 * 32;
/// Classes.
pub const CLASSES: u8 = 10;
/// The training batches' file names, in order.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];

/// The records of `paths`, in order: inputs are float pixels / 255 of shape `[3, 32, 32]`
/// (channels first, as stored), targets int class labels (shape `[]`).
///
/// Errors, naming the file and byte offset: a length that is not a whole number of records
/// (the offset of the partial record), a label above 9, or no records at all.
pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<InMemory> {
    let mut inputs = Vec::new();
    let mut targets = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let bytes = read(path)?;
        let records = bytes.len() / RECORD;
        let mut cursor = Cursor::new(path, &bytes);
        inputs.reserve(records * PIXELS);
        targets.reserve(records);
        for _ in 0..records {
            let label = cursor.take(1, "label")?[0];
            if label >= CLASSES {
                return Err(DataError::BadLabel {
                    path: path.to_path_buf(),
                    offset: cursor.offset() - 1,
                    label: u64::from(label),
                    classes: u64::from(CLASSES),
                    format: "CIFAR-10",
                });
            }
            targets.push(i64::from(label));
            inputs.extend(pixels(cursor.take(PIXELS, "pixels")?));
        }
        if cursor.offset() != bytes.len() {
            // The partial record is reported as a truncated one.
            cursor.take(RECORD, "a CIFAR-10 record (1 label + 3072 pixel bytes)")?;
        }
    }
    if targets.is_empty() {
        return Err(DataError::Corrupt {
            path: paths
                .first()
                .map_or_else(PathBuf::new, |p| p.as_ref().to_path_buf()),
            offset: 0,
            problem: Corruption::NoRecords { format: "CIFAR-10" },
        });
    }
    InMemory::new(
        Values::Float(inputs),
        vec![3, 32, 32],
        Values::Int(targets),
        vec![],
    )
}

/// The training batches present in `dir` (`data_batch_1.bin` … `data_batch_5.bin`, in order);
/// errors when none is.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<InMemory> {
    let dir = dir.as_ref();
    let present: Vec<PathBuf> = TRAIN_FILES
        .iter()
        .map(|name| dir.join(name))
        .filter(|p| p.exists())
        .collect();
    // A batch that is there but no file (a FIFO, a directory) is refused, not skipped in
    // silence: the data would be short of it.
    if let Some(path) = present.iter().find(|p| !p.is_file()) {
        return Err(DataError::NotAFile { path: path.clone() });
    }
    if present.is_empty() {
        return Err(DataError::NoFiles {
            dir: dir.to_path_buf(),
            expected: TRAIN_FILES.iter().map(|s| s.to_string()).collect(),
        });
    }
    load(&present)
}
