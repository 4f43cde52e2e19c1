//! A data set named by its contents, not by how its path is spelled (issue 47, class 2): the
//! size and a CRC-32 of the bytes of every file the data set reads
//! ([`DataSpec::files`](pipetrain_data::DataSpec::files)). A resumed run must train on the
//! data its checkpoint was saved with, and the processes of a multi-process run on the same
//! data: both compare this, so that changed contents at the same path (even 5× the rows) and
//! another directory's copy under the same relative spec are told apart, and the same file
//! spelled `./d.st` or by its absolute path is one.

use std::io::Read;

use pipetrain_data::DataSpec;

/// The contents of the data set `spec` names, in words: `synthetic` (generated from the seed),
/// or its kind, its size and a CRC-32 of its bytes (`tensors, 3 276 bytes, crc32 1a2b3c4d`).
/// A spec that does not parse is itself (the data's own check refuses it), and a file that
/// cannot be read is named with its error (the loader reports it).
pub fn fingerprint(spec: &str) -> String {
    let Ok(parsed) = spec.parse::<DataSpec>() else {
        return spec.to_string();
    };
    if parsed.is_synthetic() {
        return "synthetic".to_string();
    }
    let kind = spec.split(':').next().unwrap_or(spec);
    let mut crc = crc32fast::Hasher::new();
    let mut size: u64 = 0;
    let mut buffer = vec![0u8; 1 << 20];
    for path in parsed.files().iter().filter(|p| p.is_file()) {
        let read = std::fs::File::open(path).and_then(|mut file| {
            loop {
                let n = file.read(&mut buffer)?;
                if n == 0 {
                    break Ok(());
                }
                crc.update(&buffer[..n]);
                size += n as u64;
            }
        });
        if let Err(e) = read {
            return format!("{kind}, {}: {e}", path.display());
        }
    }
    format!("{kind}, {size} bytes, crc32 {:08x}", crc.finalize())
}

/// Whether `value` is a [`fingerprint`] (a checkpoint saved before them stored the spec as
/// given instead).
pub fn is_fingerprint(value: &str) -> bool {
    value == "synthetic" || value.contains(" bytes, crc32 ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contents_count_not_the_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.st");
        std::fs::write(&file, b"rows").unwrap();
        let absolute = format!("tensors:{}", file.display());
        let dotted = format!("tensors:{}/./d.st", dir.path().display());
        assert_eq!(fingerprint(&absolute), fingerprint(&dotted));
        assert!(
            is_fingerprint(&fingerprint(&absolute)),
            "{}",
            fingerprint(&absolute)
        );
        let before = fingerprint(&absolute);
        std::fs::write(&file, b"rows and more rows").unwrap();
        assert_ne!(fingerprint(&absolute), before);
        assert_eq!(fingerprint("synthetic"), "synthetic");
        assert!(!is_fingerprint("tensors:d.st"));
    }
}
