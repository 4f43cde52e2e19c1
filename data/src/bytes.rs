//! Reading a file's bytes with the offset at hand, so every format error can name the file
//! and where in it things went wrong.

use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};
use crate::problem::Corruption;

/// The whole file, or [`DataError::Io`] naming it. Only a regular file is read, and no more
/// than its size when opened: a device such as `/dev/zero` would never end
/// ([`DataError::NotAFile`]). What is not a regular file is refused before it is opened: opening
/// a FIFO blocks until something writes to it, which may be never.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_a_file = || DataError::NotAFile {
        path: path.to_path_buf(),
    };
    // `metadata` follows symbolic links, as `open` does.
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(not_a_file());
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Again on the file opened: the path may name another one by now.
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(meta.len()).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// A cursor over one file's bytes.
pub(crate) struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(path: &'a Path, bytes: &'a [u8]) -> Self {
        Cursor {
            path,
            bytes,
            offset: 0,
        }
    }

    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.path.to_path_buf()
    }

    /// The next `n` bytes, or [`DataError::Truncated`] saying what they were for.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let available = self.bytes.len() - self.offset;
        if n > available {
            return Err(DataError::Truncated {
                path: self.path(),
                offset: self.offset,
                what: what.to_string(),
                needed: n,
                available,
            });
        }
        let out = &self.bytes[self.offset..self.offset + n];
        self.offset += n;
        Ok(out)
    }

    /// The next big-endian `u32`.
    pub(crate) fn u32_be(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// [`DataError::Corrupt`] unless every byte has been read.
    pub(crate) fn finish(&self, format: &'static str) -> Result<()> {
        let left = self.bytes.len() - self.offset;
        if left != 0 {
            return Err(DataError::Corrupt {
                path: self.path(),
                offset: self.offset,
                problem: Corruption::TrailingBytes {
                    bytes: left,
                    format,
                },
            });
        }
        Ok(())
    }
}

/// Bytes scaled to `[0, 1]`.
pub(crate) fn pixels(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.iter().map(|&b| f32::from(b) / 255.0)
}
