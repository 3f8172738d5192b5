//! The final summary table: one row per lifecycle step (expected, observed, ok).

/// The result of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub step: String,
    pub expected: String,
    pub observed: String,
    pub ok: bool,
}

/// A plain-text table; the widths follow the content (the expected and observed columns wrap at
/// `wrap` characters so the table stays readable in a terminal).
pub fn render(rows: &[Row], wrap: usize) -> String {
    let head = ["step", "expected", "observed", "ok"];
    let cells: Vec<[Vec<String>; 4]> = rows
        .iter()
        .map(|r| {
            [
                vec![r.step.clone()],
                wrap_text(&r.expected, wrap),
                wrap_text(&r.observed, wrap),
                vec![if r.ok { "ok" } else { "FAILED" }.to_string()],
            ]
        })
        .collect();
    let mut width = head.map(str::len);
    for row in &cells {
        for (i, col) in row.iter().enumerate() {
            for l in col {
                width[i] = width[i].max(l.chars().count());
            }
        }
    }
    let sep = format!(
        "+{}+",
        width.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+")
    );
    let line = |cols: [&str; 4]| {
        let parts: Vec<String> = cols
            .iter()
            .zip(width)
            .map(|(c, w)| format!(" {c}{} ", " ".repeat(w - c.chars().count())))
            .collect();
        format!("|{}|", parts.join("|"))
    };
    let mut out = vec![sep.clone(), line(head), sep.clone()];
    for row in &cells {
        let height = row.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..height {
            let get = |i: usize| row[i].get(k).map(String::as_str).unwrap_or("");
            out.push(line([get(0), get(1), get(2), get(3)]));
        }
        out.push(sep.clone());
    }
    out.join("\n")
}

fn wrap_text(s: &str, wrap: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in s.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > wrap {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(step: &str, ok: bool) -> Row {
        Row {
            step: step.into(),
            expected: "rejected with the webhook's message".into(),
            observed: "rejected: spec.module.source: must not be a local path".into(),
            ok,
        }
    }

    #[test]
    fn every_row_has_its_step_and_verdict() {
        let t = render(&[row("1 admission", true), row("2 retries", false)], 30);
        assert!(
            t.lines()
                .any(|l| l.starts_with("| 1 admission") && l.ends_with("| ok     |"))
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("| 2 retries") && l.contains("| FAILED |"))
        );
        let widths: Vec<usize> = t.lines().map(|l| l.chars().count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "aligned:\n{t}");
    }

    #[test]
    fn long_text_wraps_at_word_boundaries() {
        assert_eq!(wrap_text("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap_text("", 6), vec![""]);
    }

    proptest::proptest! {
        #[test]
        fn the_table_is_rectangular_for_any_text(
            texts in proptest::collection::vec(("[a-z ]{0,40}", "[a-zé→ ]{0,60}", proptest::bool::ANY), 0..5),
            wrap in 5usize..40,
        ) {
            let rows: Vec<Row> = texts.iter().enumerate().map(|(i, (e, o, ok))| Row {
                step: format!("{i}"), expected: e.clone(), observed: o.clone(), ok: *ok }).collect();
            let t = render(&rows, wrap);
            let widths: Vec<usize> = t.lines().map(|l| l.chars().count()).collect();
            proptest::prop_assert!(widths.windows(2).all(|w| w[0] == w[1]));
        }
    }
}
