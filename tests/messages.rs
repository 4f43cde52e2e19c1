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

/// The names of the `pub enum`s and `pub struct`s (not `pub(crate)` ones) that `code`
/// declares.
fn public_types(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub enum ")
                .or_else(|| line.strip_prefix("pub struct "))?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            Some(name)
        })
        .collect()
}

/// The engine has one error type (issue 28): its sub-errors (a worker's cause, activations,
/// transfers, collectives, ties, skips, checkpoints, files, devices, MPI, settings) are
/// `EngineError`'s variants, not types of their own.
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
        for path in sources(&root.join(dir)) {
            let code = std::fs::read_to_string(&path).expect("a readable source");
            for name in public_types(&code) {
                if name.ends_with("Error") {
                    let shown = path.strip_prefix(root).unwrap_or(&path).display();
                    errors.push(format!("{shown}: {name}"));
                }
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
            "src/error.rs: Error",
            "tune/src/error.rs: TuneError",
        ],
        "each crate's public error types (fold a new one into its crate's error as variants, or \
         make it a fact type named for what it describes)"
    );
}

#[test]
fn the_type_scan_reads_public_declarations_only() {
    let code = "pub enum AError {\n    #[derive(Debug)]\n  pub struct B(u8);\npub(crate) enum \
                CError {}\n// pub struct DError\nstruct EError;\n";
    assert_eq!(public_types(code), ["AError", "B"]);
}
