//! MNIST in its IDX files (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, …).
//!
//! ```text
//! images: [0x00000803][count u32][rows u32][cols u32][count × rows × cols pixel bytes]
//! labels: [0x00000801][count u32][count label bytes]
//! ```
//! All words big-endian; files must be decompressed (a gzip file is recognised and named as
//! such in the error).

use std::path::Path;

use crate::bytes::{Cursor, pixels, read};
use crate::dataset::{InMemory, Values};
use crate::error::{DataError, Result};
use crate::problem::Corruption;

/// Magic number of an IDX file of unsigned bytes in 3 dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes in 1 dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// Training images' file name in the official distribution.
pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
/// Training labels' file name in the official distribution.
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";

/// The images of `images_path` with the labels of `labels_path`: inputs are float pixels / 255
/// flattened to `[rows × cols]` (784 for MNIST, so an MLP takes them as is), targets are int
/// class labels (shape `[]`).
///
/// Errors, naming the file and byte offset: a wrong magic number, a file shorter than its
/// header declares, trailing bytes, and image and label counts that disagree.
pub fn load(images_path: impl AsRef<Path>, labels_path: impl AsRef<Path>) -> Result<InMemory> {
    let images_path = images_path.as_ref();
    let labels_path = labels_path.as_ref();
    let image_bytes = read(images_path)?;
    let label_bytes = read(labels_path)?;
    let (count, side, pixel_bytes) = images(images_path, &image_bytes)?;
    let labels = labels(labels_path, &label_bytes)?;
    if labels.len() != count {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: count,
            labels_path: labels_path.to_path_buf(),
            labels: labels.len(),
        });
    }
    InMemory::new(
        Values::Float(pixels(pixel_bytes).collect()),
        vec![side],
        Values::Int(labels.iter().map(|&l| i64::from(l)).collect()),
        vec![],
    )
}

/// `dir/train-images-idx3-ubyte` with `dir/train-labels-idx1-ubyte`.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<InMemory> {
    let dir = dir.as_ref();
    load(dir.join(TRAIN_IMAGES), dir.join(TRAIN_LABELS))
}

/// Count, pixels per image, and the pixel bytes.
fn images<'a>(path: &'a Path, bytes: &'a [u8]) -> Result<(usize, usize, &'a [u8])> {
    let mut cursor = Cursor::new(path, bytes);
    magic(&mut cursor, IMAGES_MAGIC)?;
    let count = cursor.u32_be("image count")? as usize;
    let rows = cursor.u32_be("row count")? as usize;
    let cols = cursor.u32_be("column count")? as usize;
    let overflow = || DataError::Corrupt {
        path: path.to_path_buf(),
        offset: 4,
        problem: Corruption::Overflow { count, rows, cols },
    };
    let per_image = rows.checked_mul(cols).ok_or_else(overflow)?;
    if per_image == 0 {
        return Err(DataError::Corrupt {
            path: cursor.path(),
            offset: 8,
            problem: Corruption::NoPixels { rows, cols },
        });
    }
    let total = count.checked_mul(per_image).ok_or_else(overflow)?;
    let data = cursor.take(total, &format!("{count} images of {rows} × {cols} pixels"))?;
    cursor.finish("IDX images")?;
    Ok((count, per_image, data))
}

fn labels<'a>(path: &'a Path, bytes: &'a [u8]) -> Result<&'a [u8]> {
    let mut cursor = Cursor::new(path, bytes);
    magic(&mut cursor, LABELS_MAGIC)?;
    let count = cursor.u32_be("label count")? as usize;
    let data = cursor.take(count, &format!("{count} labels"))?;
    cursor.finish("IDX labels")?;
    Ok(data)
}

fn magic(cursor: &mut Cursor<'_>, expected: u32) -> Result<()> {
    let found = cursor.u32_be("magic number")?;
    if found != expected {
        return Err(DataError::BadMagic {
            path: cursor.path(),
            offset: 0,
            found,
            expected,
        });
    }
    Ok(())
}
