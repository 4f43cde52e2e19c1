//! The crates below the front ends word no remedy themselves: no string literal of their code
//! names a command-line flag (`--comm-timeout`) or a builder call (`.stages(1)`). Their errors
//! carry a `Remedy` value, which the facade words as builder calls and the binary as flags
//! (`pipetrain::remedy`).
//!
//! Comments are not messages (a doc comment may say `--features mpi`), nor are the strings of a
//! file's `#[cfg(test)]` module.

use std::path::{Path, PathBuf};

/// The crates whose messages are checked.
const CRATES: [&str; 5] = ["schedules", "partitioner", "tune", "engine", "data"];

/// The builder methods a message must not call.
const METHODS: [&str; 15] = [
    "stages",
    "balance",
    "micro_batches",
    "replicas",
    "accumulation",
    "zero",
    "schedule",
    "remat",
    "backward",
    "learning_rate",
    "threads_per_worker",
    "memory_budget",
    "clip_grad_norm",
    "skip_nonfinite",
    "bucket_bytes",
];

/// Each string literal of `code` (comments skipped) with the line it starts on.
fn string_literals(code: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => line += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '/' if next == Some('*') => {
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                i += 2;
                continue;
            }
            // A char literal ('"', '\'', 'x'); a lifetime has no closing quote.
            '\'' if chars.get(i + 2) == Some(&'\'') && next != Some('\\') => {
                i += 3;
                continue;
            }
            '\'' if next == Some('\\') && chars.get(i + 3) == Some(&'\'') => {
                i += 4;
                continue;
            }
            'r' if matches!(next, Some('"' | '#'))
                && !chars
                    .get(i.wrapping_sub(1))
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                if chars.get(i + 1 + hashes) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let start = i + 2 + hashes;
                let rest: String = chars[start..].iter().collect();
                let end = rest.find(&close).expect("a raw string ends");
                let text = &rest[..end];
                out.push((line, text.to_string()));
                line += text.matches('\n').count();
                i = start + text.chars().count() + close.chars().count();
                continue;
            }
            '"' => {
                let (start_line, mut text) = (line, String::new());
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        text.push(chars[i]);
                        i += 1;
                    }
                    line += usize::from(chars[i] == '\n');
                    text.push(chars[i]);
                    i += 1;
                }
                out.push((start_line, text));
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// What `text` names that a message of these crates must not: a flag or a builder call.
fn front_end_words(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    for (i, w) in bytes.windows(3).enumerate() {
        let flag = w[0] == b'-' && w[1] == b'-' && w[2].is_ascii_lowercase();
        if flag && (i == 0 || !matches!(bytes[i - 1], b'-' | b'<' | b'!')) {
            let end = text[i + 2..]
                .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .map_or(text.len(), |e| i + 2 + e);
            return Some(text[i..end].to_string());
        }
    }
    METHODS
        .iter()
        .map(|m| format!(".{m}("))
        .find(|call| text.contains(call.as_str()))
}

/// The `.rs` files under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `file:line: word in "text"` for each string literal of `crates`' sources that names a flag
/// or a builder call.
fn offenders(root: &Path, crates: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for krate in crates {
        for path in sources(&root.join(krate).join("src")) {
            let code = std::fs::read_to_string(&path).expect("a readable source");
            let code = code
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for (line, text) in string_literals(code) {
                if let Some(word) = front_end_words(&text) {
                    let shown = path.strip_prefix(root).unwrap_or(&path).display();
                    found.push(format!("{shown}:{line}: {word} in {text:?}"));
                }
            }
        }
    }
    found
}

#[test]
fn no_message_below_the_front_ends_names_a_flag_or_a_builder_call() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = offenders(root, &CRATES);
    assert!(
        found.is_empty(),
        "messages that word a remedy as a flag or a builder call (give the error a `Remedy` \
         instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_flags_and_calls_in_strings_only() {
    let code = r##"
        // use --stages 2 (a comment)
        /// `.stages(1)` in a doc comment
        let a = "raise --comm-timeout";
        let b = format!("use \
            .micro_batches({m})");
        let c = r#"a "quoted" --lr"#;
        let d = ('"', '\'', "--> an arrow, a -- dash, <!-- html -->");
    "##;
    let found: Vec<(usize, Option<String>)> = string_literals(code)
        .into_iter()
        .map(|(line, text)| (line, front_end_words(&text)))
        .collect();
    assert_eq!(
        found,
        [
            (4, Some("--comm-timeout".to_string())),
            (5, Some(".micro_batches(".to_string())),
            (7, Some("--lr".to_string())),
            (8, None),
        ]
    );
}

/// The `pub enum`s and `pub struct`s (not `pub(crate)` ones) that `code` declares: each name,
/// and whether an attribute above it derives `Error` (thiserror's, by any path).
fn public_types(code: &str) -> Vec<(String, bool)> {
    let mut types = Vec::new();
    let mut derives_error = false;
    for line in code.lines().map(str::trim_start) {
        if let Some(derive) = line.strip_prefix("#[derive(") {
            derives_error |= derive
                .split(|c: char| c == ',' || c == ')' || c.is_whitespace())
                .any(|path| path == "Error" || path.ends_with("::Error"));
            continue;
        }
        if line.starts_with("#[") || line.starts_with("//") || line.is_empty() {
            continue;
        }
        let rest = line
            .strip_prefix("pub enum ")
            .or_else(|| line.strip_prefix("pub struct "));
        if let Some(rest) = rest {
            types.push((identifier(rest), derives_error));
        }
        derives_error = false;
    }
    types
}

/// The leading identifier of `text`.
fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The types `code` implements `std::error::Error` for by hand (`impl std::error::Error for
/// X`, `impl Error for X`, `impl<T> core::error::Error for X<T>`).
fn error_impls(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let mut rest = line.trim_start().strip_prefix("impl")?;
            if rest.starts_with('<') {
                rest = &rest[rest.find('>')? + 1..];
            }
            let (trait_path, ty) = rest.split_once(" for ")?;
            let error = ["Error", "std::error::Error", "core::error::Error"];
            error
                .contains(&trait_path.trim())
                .then(|| identifier(ty.trim_start()))
        })
        .collect()
}

/// One error type per crate (issue 28): its sub-errors (a worker's cause, activations,
/// transfers, collectives, ties, skips, checkpoints, files, devices, MPI, settings) are
/// variants of the crate's error, not types of their own. Every public type that implements
/// `std::error::Error` counts, whatever its name: derived (thiserror) or by hand.
#[test]
fn each_crate_declares_one_public_error_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut errors = Vec::new();
    for dir in [
        "schedules/src",
        "partitioner/src",
        "tune/src",
        "engine/src",
        "data/src",
        "models/src",
        "src",
    ] {
        // The crate's public types (where each is declared) and the types it implements
        // `Error` for by hand, in any of its files.
        let (mut declared, mut by_hand) = (Vec::new(), Vec::new());
        for path in sources(&root.join(dir)) {
            let code = std::fs::read_to_string(&path).expect("a readable source");
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for (name, derived) in public_types(&code) {
                declared.push((shown.clone(), name, derived));
            }
            by_hand.extend(error_impls(&code));
        }
        for (shown, name, derived) in declared {
            if derived || by_hand.contains(&name) {
                errors.push(format!("{shown}: {name}"));
            }
        }
    }
    errors.sort();
    assert_eq!(
        errors,
        [
            "data/src/error.rs: DataError",
            "engine/src/error.rs: EngineError",
            "partitioner/src/error.rs: PartitionError",
            "schedules/src/error.rs: ScheduleError",
            "src/error/mod.rs: Error",
            "tune/src/error.rs: TuneError",
        ],
        "each crate's public error types (fold a new one into its crate's error as variants)"
    );
}

#[test]
fn the_type_scan_finds_public_types_that_implement_error() {
    let code = "#[derive(Debug, thiserror::Error)]\n#[error(\"no\")]\npub enum Refused {}\n\
                #[derive(Debug, Error)]\npub(crate) enum Inner {}\n#[derive(Debug)]\n  pub \
                struct Plain(u8);\nimpl std::error::Error for Plain {}\n\
                impl From<u8> for Refused {}\n// pub struct DError\nstruct EError;\n\
                #[derive(Clone)]\npub struct Fact;\nimpl<T> Error for Generic<T> {}\n";
    assert_eq!(
        public_types(code),
        [
            ("Refused".to_string(), true),
            ("Plain".to_string(), false),
            ("Fact".to_string(), false),
        ]
    );
    assert_eq!(error_impls(code), ["Plain", "Generic"]);
}
