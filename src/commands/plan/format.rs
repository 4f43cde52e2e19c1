//! Numbers and tables for people, as the plan report and the schedule comparison print them.

/// Right-aligned columns under `headers`, two spaces apart, one line per row.
pub fn columns(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:>w$}"))
            .collect();
        cells.join("  ") + "\n"
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A time or cost for people: at most three decimals, no trailing zeros (`24`, `26.1`).
pub fn num(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// A fraction as a percentage with two decimals (`27.27 %`).
pub fn percent(fraction: f64) -> String {
    format!("{:.2} %", fraction * 100.0)
}

/// A number as a user writes it: plain (`0.001`, `1`, `0.5`) unless that takes more than 12
/// characters, then as [`short`] (`1e308`, not 309 digits; `1e-300`).
pub fn compact(value: f64) -> String {
    let plain = format!("{value}");
    if plain.len() <= 12 {
        plain
    } else {
        short(value)
    }
}

/// A number as short as it reads exactly: `1e308`, not 309 digits; `0.5`, not `5e-1`.
pub fn short(value: f64) -> String {
    let plain = format!("{value}");
    let exp = format!("{value:e}");
    match exp.len() < plain.len() {
        true => exp,
        false => plain,
    }
}
