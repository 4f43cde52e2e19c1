//! Byte sizes on the command line: `--memory-budget 2GiB`, `512MiB`, `1.5GiB`, `1048576`.

/// Binary units, largest first (matched case-insensitively, after an optional space).
const UNITS: [(&str, u64); 5] = [
    ("tib", 1 << 40),
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("b", 1),
];

/// clap's parser for a byte size: a positive number of bytes, or a number (decimals allowed)
/// followed by KiB, MiB, GiB or TiB.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| Some((lower.strip_suffix(unit)?.trim_end(), *scale)))
        .unwrap_or((lower.as_str(), 1));
    let invalid = || {
        format!(
            "`{text}` is not a byte size; give bytes (e.g. 1073741824) or a number with KiB, \
             MiB or GiB (e.g. 2GiB, 512MiB; KB/MB/GB are ambiguous: use the binary units)"
        )
    };
    let bytes = if let Ok(whole) = number.parse::<u64>() {
        whole.checked_mul(scale).ok_or_else(invalid)?
    } else {
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let bytes = value * scale as f64;
        if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
            return Err(invalid());
        }
        bytes.round() as u64
    };
    if bytes == 0 {
        return Err(format!(
            "`{text}` is 0 bytes: no worker can hold a layer; give e.g. 2GiB"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn plain_bytes_and_binary_units() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("64kib"), Ok(64 << 10));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("100B"), Ok(100));
    }

    #[test]
    fn bad_sizes_name_the_text_and_the_remedy() {
        for bad in ["", "GiB", "2GB", "-1MiB", "two", "1e400"] {
            let err = parse_bytes(bad).unwrap_err();
            assert!(
                err.contains(&format!("`{bad}`")) && err.contains("GiB"),
                "{bad}: {err}"
            );
        }
        assert!(parse_bytes("0").unwrap_err().contains("0 bytes"));
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
