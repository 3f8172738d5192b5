//! The final summary table: one row per lifecycle step (expected, observed, which runners its
//! Jobs had, ok).

/// The result of one step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub step: String,
    pub expected: String,
    pub observed: String,
    pub ok: bool,
    /// The step's Jobs whose runner was the real `captf-runner` with a real binary.
    pub real_jobs: usize,
    /// The step's Jobs whose runner was scripted.
    pub scripted_jobs: usize,
}

impl Row {
    /// `2 real, 2 scripted`, `3 real`, `no Job`.
    pub fn runners(&self) -> String {
        match (self.real_jobs, self.scripted_jobs) {
            (0, 0) => "no Job".to_string(),
            (r, 0) => format!("{r} real"),
            (0, s) => format!("{s} scripted"),
            (r, s) => format!("{r} real, {s} scripted"),
        }
    }
}

/// The line under the table: how many Jobs ran the real runner with `binary` (`OpenTofu
/// 1.12.6`), how many were scripted.
pub fn runners_line(rows: &[Row], binary: &str) -> String {
    let real: usize = rows.iter().map(|r| r.real_jobs).sum();
    let scripted: usize = rows.iter().map(|r| r.scripted_jobs).sum();
    format!("runners: {real} Job(s) ran the real captf-runner with {binary}, {scripted} were scripted")
}

/// A plain-text table; the widths follow the content (the expected and observed columns wrap at
/// `wrap` characters so the table stays readable in a terminal).
pub fn render(rows: &[Row], wrap: usize) -> String {
    let head = ["step", "expected", "observed", "runners", "ok"];
    let cells: Vec<[Vec<String>; 5]> = rows
        .iter()
        .map(|r| {
            [
                vec![r.step.clone()],
                wrap_text(&r.expected, wrap),
                wrap_text(&r.observed, wrap),
                vec![r.runners()],
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
    let line = |cols: [&str; 5]| {
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
            out.push(line([get(0), get(1), get(2), get(3), get(4)]));
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
            ..Row::default()
        }
    }

    #[test]
    fn each_row_says_how_many_of_its_jobs_ran_real_terraform_and_the_total_follows() {
        let rows = [
            row("1 admission", true),
            Row {
                real_jobs: 2,
                scripted_jobs: 2,
                ..row("2 retries", true)
            },
            Row {
                real_jobs: 3,
                ..row("4 drift", true)
            },
            Row {
                scripted_jobs: 1,
                ..row("5 lock", true)
            },
        ];
        let runners: Vec<String> = rows.iter().map(Row::runners).collect();
        assert_eq!(runners, ["no Job", "2 real, 2 scripted", "3 real", "1 scripted"]);
        let t = render(&rows, 30);
        assert!(
            t.lines()
                .any(|l| l.starts_with("| 2 retries") && l.contains("| 2 real, 2 scripted |")),
            "{t}"
        );
        assert_eq!(
            runners_line(&rows, "OpenTofu 1.12.6"),
            "runners: 5 Job(s) ran the real captf-runner with OpenTofu 1.12.6, 3 were scripted"
        );
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
                step: format!("{i}"), expected: e.clone(), observed: o.clone(), ok: *ok,
                real_jobs: i, scripted_jobs: 2 * i }).collect();
            let t = render(&rows, wrap);
            let widths: Vec<usize> = t.lines().map(|l| l.chars().count()).collect();
            proptest::prop_assert!(widths.windows(2).all(|w| w[0] == w[1]));
        }
    }
}
