//! The library's error messages name API values (`.stages(1)`, `init_from`); a CLI user typed
//! flags. This rewrites the one vocabulary into the other before a message is printed.

/// Builder methods and the flags that set them: `.method(value)` becomes `--flag value`.
const METHODS: &[(&str, &str)] = &[
    ("stages", "--stages"),
    ("balance", "--balance"),
    ("micro_batches", "--micro-batches"),
    ("replicas", "--replicas"),
    ("accumulation", "--accumulate"),
    ("zero", "--zero"),
    ("learning_rate", "--lr"),
    ("threads_per_worker", "--threads"),
    ("memory_budget", "--memory-budget"),
    ("clip_grad_norm", "--clip-grad-norm"),
    ("skip_nonfinite", "--skip-nonfinite"),
];

/// Library functions and the flags that call them.
const FUNCTIONS: &[(&str, &str)] = &[
    ("`init_from`", "--init"),
    ("`rename` rules", "--rename rules"),
    ("`Remat::Always`", "--remat always"),
    ("`Backward::Split { weight_group: 1 }`", "--weight-group 1"),
];

/// `message` with every builder call and library function it names replaced by the flag that
/// does the same.
///
/// `"stages = 0: … (use .stages(1))"` → `"stages = 0: … (use --stages 1)"`.
pub fn to_flags(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while let Some(dot) = rest.find('.') {
        out.push_str(&rest[..dot]);
        let after = &rest[dot + 1..];
        for (method, flag) in METHODS {
            let Some(args) = after.strip_prefix(method).and_then(|a| a.strip_prefix('(')) else {
                continue;
            };
            if let Some(close) = args.find(')') {
                out.push_str(flag);
                let value = args[..close].trim_matches(['[', ']']).replace(", ", ",");
                if !value.is_empty() {
                    out.push(' ');
                    out.push_str(&value);
                }
                rest = &args[close + 1..];
                continue 'scan;
            }
        }
        out.push('.');
        rest = after;
    }
    out.push_str(rest);
    FUNCTIONS
        .iter()
        .fold(out, |text, (function, flag)| text.replace(function, flag))
}

#[cfg(test)]
mod tests {
    use super::to_flags;

    #[test]
    fn builder_calls_become_flags() {
        assert_eq!(
            to_flags("stages = 0: a pipeline needs at least one stage (use .stages(1))"),
            "stages = 0: a pipeline needs at least one stage (use --stages 1)"
        );
        assert_eq!(
            to_flags("use .micro_batches(1) to run the batch at once. Or .balance([2, 1])."),
            "use --micro-batches 1 to run the batch at once. Or --balance 2,1."
        );
        assert_eq!(
            to_flags("start from it with `init_from` instead"),
            "start from it with --init instead"
        );
    }

    #[test]
    fn memory_budget_remedies_become_flags() {
        assert_eq!(
            to_flags(
                "give at least .memory_budget(20992), or re-materialization (`Remat::Always`)"
            ),
            "give at least --memory-budget 20992, or re-materialization (--remat always)"
        );
    }

    #[test]
    fn other_text_is_unchanged() {
        for text in ["3.5 s. a.b(c) .unknown(2)", "file.safetensors: bad", "end."] {
            assert_eq!(to_flags(text), text);
        }
    }
}
