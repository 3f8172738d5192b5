//! Masking secret values in text: the runner's log, its result (the termination message) and the
//! outputs that reach an object's status.
//!
//! A value is masked in every form it may take in what is written:
//! - itself, and JSON-escaped (inside a JSON document);
//! - when it spans lines (an SSH key in a heredoc): the whole value with `\n` and with `\r\n`
//!   line breaks, and **each of its lines** on its own, trimmed, when at least [`MIN_LINE_LEN`]
//!   long (a log is written line by line, so the whole value never shows in one line; a shorter
//!   line would mangle unrelated text and reveal little);
//! - base64, standard and URL-safe: the value's own encoding, and the three encodings it takes
//!   as a **substring** of a longer encoded text. Base64 turns each 3 bytes into 4 characters, so a
//!   value that starts at byte offset 1 or 2 (mod 3) of an encoded document (`user:password`, a
//!   key inside a kubeconfig) is encoded differently; for each offset the characters that depend
//!   only on the value's bytes are masked (the ones that mix in neighbouring bytes are not known);
//! - base64 **wrapped** at the widths tools wrap it at ([`BASE64_WRAP_WIDTHS`]: PEM's 64, the
//!   `base64` command's and MIME's 76): each line of the wrapped encoding on its own (the log is
//!   written line by line) and the whole of it with `\n` and `\r\n` line breaks, raw and
//!   JSON-escaped. Only the value's own encoding is wrapped this way, the one that starts a line;
//!   a value inside a longer encoded document that is then wrapped is not;
//! - when it spans lines, **each line base64-encoded on its own** (standard and URL-safe), for
//!   the lines long enough to be masked on their own.
//!
//! Every rule makes a number of forms, and of characters, linear in the value's length.
//!
//! Values shorter than [`MIN_SECRET_LEN`] are not masked.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// Shorter values are not masked (they would mangle unrelated text and protect nothing).
pub const MIN_SECRET_LEN: usize = 4;
/// Lines of a multi-line value shorter than this (trimmed) are not masked on their own.
pub const MIN_LINE_LEN: usize = 8;
/// Base64 fragments shorter than this are not masked on their own.
pub const MIN_BASE64_FRAGMENT: usize = 6;
/// The widths base64 is wrapped at by the tools that wrap it: PEM (64) and MIME or the `base64`
/// command (76).
pub const BASE64_WRAP_WIDTHS: [usize; 2] = [64, 76];
/// What a masked value becomes.
pub const MASK: &str = "***";

/// The JSON escape of `s`, without the quotes.
fn json_escaped(s: &str) -> String {
    let json = serde_json::to_string(s).unwrap_or_default();
    json.strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(s)
        .to_string()
}

/// The base64 characters of `value` as it appears at byte offset `shift` (0, 1 or 2, mod 3) of a
/// longer encoded text: only those that depend on the value's bytes alone.
pub fn base64_fragment(value: &[u8], shift: usize, engine: &impl base64::Engine) -> String {
    let shift = shift % 3;
    let mut shifted = vec![0u8; shift];
    shifted.extend_from_slice(value);
    let encoded = engine.encode(&shifted);
    // A character holds 6 bits: the first one free of the prefix starts at bit 8 × shift, and the
    // last one entirely inside the value ends at bit 8 × (shift + len).
    let start = (8 * shift).div_ceil(6);
    let end = (8 * (shift + value.len())) / 6;
    encoded.get(start..end.max(start)).unwrap_or_default().to_string()
}

/// `encoded` (ASCII base64) cut into lines of `width` characters.
fn wrap_lines(encoded: &str, width: usize) -> Vec<String> {
    encoded
        .as_bytes()
        .chunks(width.max(1))
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect()
}

/// The forms of `value`'s own base64 encoding wrapped at each of [`BASE64_WRAP_WIDTHS`]: each
/// line of it that is long enough, and the whole of it with each line break, raw and
/// JSON-escaped. What is wrapped is the characters the value alone decides (so a value encoded
/// with a trailing newline, as `echo … | base64` does, is masked too); an encoding that fits
/// one line is not wrapped, and is a form already.
fn wrapped_base64_forms(value: &[u8], out: &mut Vec<String>) {
    let encoded = base64_fragment(value, 0, &STANDARD_NO_PAD);
    for width in BASE64_WRAP_WIDTHS {
        if encoded.len() <= width {
            continue;
        }
        let lines = wrap_lines(&encoded, width);
        for sep in ["\n", "\r\n"] {
            let whole = lines.join(sep);
            out.push(json_escaped(&whole));
            out.push(whole);
        }
        out.extend(lines.into_iter().filter(|l| l.len() >= MIN_BASE64_FRAGMENT));
    }
}

/// Every string `value` is masked as (see the module documentation), unsorted.
pub fn forms(value: &str) -> Vec<String> {
    if value.len() < MIN_SECRET_LEN {
        return vec![];
    }
    let mut out = vec![value.to_string(), json_escaped(value)];
    if value.contains('\n') {
        let lf = value.replace("\r\n", "\n");
        let crlf = lf.replace('\n', "\r\n");
        out.push(json_escaped(&lf));
        out.push(json_escaped(&crlf));
        out.push(lf);
        out.push(crlf);
        for line in value.lines() {
            let line = line.trim();
            if line.len() >= MIN_LINE_LEN {
                out.push(line.to_string());
                out.push(json_escaped(line));
            }
        }
        // Each line encoded on its own (as it is, and trimmed): the characters that line alone
        // decides, so that one encoded with its line break is masked too.
        for line in value.lines() {
            let trimmed = line.trim();
            if trimmed.len() < MIN_LINE_LEN {
                continue;
            }
            for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                out.push(base64_fragment(trimmed.as_bytes(), 0, engine));
                if line != trimmed {
                    out.push(base64_fragment(line.as_bytes(), 0, engine));
                }
            }
        }
    }
    wrapped_base64_forms(value.as_bytes(), &mut out);
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        out.push(engine.encode(value));
        for shift in 0..3 {
            let fragment = base64_fragment(value.as_bytes(), shift, engine);
            if fragment.len() >= MIN_BASE64_FRAGMENT {
                out.push(fragment);
            }
        }
    }
    out
}

/// The strings of a JSON value to mask: every string in it (at any depth), and for a value that
/// is not a string its compact JSON text too.
pub fn value_strings(v: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    walk(v, &mut out);
    if !v.is_string() {
        out.push(v.to_string());
    }
    out
}

/// Every form of every value, longest first (so a secret containing another is masked whole),
/// without duplicates or empty strings.
pub fn mask_list(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = values
        .into_iter()
        .flat_map(|v| forms(&v))
        .filter(|f| !f.is_empty())
        .collect();
    sort_longest_first(&mut out);
    out
}

/// Longest first, then by text; without duplicates.
pub fn sort_longest_first(secrets: &mut Vec<String>) {
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
}

/// Replace every occurrence of every secret in `text`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if !s.is_empty() && out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

/// As [`redact`], on bytes that may not be UTF-8.
pub fn redact_bytes(bytes: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for s in secrets {
        let needle = s.as_bytes();
        if needle.is_empty() || !out.windows(needle.len()).any(|w| w == needle) {
            continue;
        }
        let mut result = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(needle) {
                result.extend_from_slice(MASK.as_bytes());
                i += needle.len();
            } else {
                result.push(out[i]);
                i += 1;
            }
        }
        out = result;
    }
    out
}

/// Mask the secrets in every string of a JSON value.
pub fn redact_json(v: &mut serde_json::Value, secrets: &[String]) {
    match v {
        serde_json::Value::String(s) => *s = redact(s, secrets),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| redact_json(x, secrets)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|x| redact_json(x, secrets)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use proptest::prelude::*;

    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
QyNTUxOQAAACBhbm90aGVyLWtleS1mb3ItdGVzdGluZy1vbmx5LW5vdC1yZWFsAAAAmLk=\n\
-----END OPENSSH PRIVATE KEY-----\n";

    #[test]
    fn a_sensitive_value_is_masked_raw_json_escaped_and_base64() {
        let secret = "pa\"ss\\word-1234";
        let masks = mask_list([secret.to_string()]);
        let json = serde_json::to_string(&serde_json::json!({"m": format!("error: {secret}")})).unwrap();
        assert!(
            !redact(&json, &masks).contains("ss\\\\word"),
            "{}",
            redact(&json, &masks)
        );
        let b64 = STANDARD.encode(secret);
        let out = redact(&format!("token {b64}"), &masks);
        assert!(out.starts_with("token ***"), "{out}");
        assert!(!out.contains(b64.trim_end_matches('=')), "{out}");
        assert_eq!(redact(&format!("x {secret} y"), &masks), "x *** y");
    }

    #[test]
    fn short_values_are_not_masked() {
        assert!(mask_list(["abc".to_string()]).is_empty());
    }

    #[test]
    fn every_line_of_a_multi_line_value_is_masked_where_lines_are_logged_one_by_one() {
        let masks = mask_list([KEY.to_string()]);
        // A heredoc in a plan, indented, one log line at a time.
        for line in KEY.lines() {
            let logged = format!("      {line}");
            let out = redact(&logged, &masks);
            assert_eq!(out.trim(), MASK, "{logged:?} became {out:?}");
        }
    }

    #[test]
    fn a_multi_line_value_is_masked_whole_across_its_line_breaks_in_every_form() {
        let masks = mask_list([KEY.to_string()]);
        let crlf = KEY.replace('\n', "\r\n");
        for text in [
            format!("error: {KEY} happened"),
            format!("error: {crlf} happened"),
            serde_json::to_string(&format!("error: {KEY} happened")).unwrap(),
        ] {
            let out = redact(&text, &masks);
            assert!(!out.contains("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE"), "{out}");
            assert!(!out.contains("PRIVATE KEY"), "{out}");
            assert_eq!(out.matches(MASK).count(), 1, "masked as one value: {out}");
        }
    }

    #[test]
    fn short_lines_of_a_multi_line_value_are_not_masked_on_their_own() {
        let masks = mask_list(["first-line-long\nend\n".to_string()]);
        assert_eq!(redact("the end", &masks), "the end");
        assert_eq!(redact("x first-line-long", &masks), "x ***");
    }

    #[test]
    fn a_value_inside_a_base64_document_is_masked_at_each_of_the_three_offsets() {
        let secret = "hunter2-correct-horse";
        let masks = mask_list([secret.to_string()]);
        for prefix in ["", "u", "us", "user:", "admin:x:"] {
            for engine in [&STANDARD, &URL_SAFE] {
                let doc = engine.encode(format!("{prefix}{secret}@db.example.com"));
                let fragment = base64_fragment(secret.as_bytes(), prefix.len(), engine);
                assert!(doc.contains(&fragment), "{prefix:?}: {fragment} not in {doc}");
                let out = redact(&doc, &masks);
                assert!(!out.contains(&fragment), "{prefix:?}: {doc} became {out}");
                assert_eq!(out.matches(MASK).count(), 1, "{out}");
            }
        }
    }

    #[test]
    fn a_fragment_is_exactly_the_characters_the_value_alone_decides() {
        // "abc" at offset 0 is all of "YWJj"; at offset 1 its first bits share a character
        // with the byte before it.
        assert_eq!(base64_fragment(b"abc", 0, &STANDARD), "YWJj");
        let at1 = STANDARD.encode(b"xabc");
        assert!(at1.contains(&base64_fragment(b"abc", 1, &STANDARD)));
        let at2 = STANDARD.encode(b"xyabc");
        assert!(at2.contains(&base64_fragment(b"abc", 2, &STANDARD)));
        assert_eq!(base64_fragment(b"", 2, &STANDARD), "");
    }

    #[test]
    fn every_string_inside_a_structured_value_is_sensitive() {
        let v = serde_json::json!({"user": "admin", "keys": ["k1-secret", "k2-secret"], "n": 1234});
        let s = value_strings(&v);
        for want in ["admin", "k1-secret", "k2-secret"] {
            assert!(s.contains(&want.to_string()), "{s:?}");
        }
        assert!(s.contains(&v.to_string()), "the JSON text too");
    }

    /// The characters of the base64 alphabet left in `text` (padding aside).
    fn alphabet_left(text: &str) -> usize {
        text.chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'))
            .count()
    }

    /// `base64 file` with GNU coreutils: padded, wrapped at 76 with `\n`.
    fn wrapped(bytes: &[u8], width: usize, sep: &str) -> String {
        let encoded = STANDARD.encode(bytes);
        wrap_lines(&encoded, width).join(sep)
    }

    #[test]
    fn a_secret_base64_wrapped_at_76_columns_is_masked() {
        let masks = mask_list([KEY.to_string()]);
        // `base64 key.pem`, and `echo "$KEY" | base64` (one more newline).
        for input in [KEY.to_string(), format!("{KEY}\n")] {
            let encoded = wrapped(input.as_bytes(), 76, "\n");
            assert!(encoded.lines().count() > 2, "{encoded}");
            // Whole, in a JSON document (an output) and one line at a time (the log).
            let whole = redact(&format!("data: {encoded}\n"), &masks);
            assert!(alphabet_left(&whole) <= 4 + 4, "{whole}");
            let json = redact(&serde_json::to_string(&encoded).unwrap(), &masks);
            assert!(alphabet_left(&json) < 8, "{json}");
            for line in encoded.lines() {
                let out = redact(&format!("  {line}"), &masks);
                assert!(alphabet_left(&out) < 8, "{line} became {out}");
            }
        }
    }

    #[test]
    fn a_secret_base64_wrapped_at_64_columns_with_crlf_is_masked() {
        let secret = "postgres://admin:Tr0ub4dor&3-correct-horse-battery@db.internal:5432/app?sslmode=require";
        let masks = mask_list([secret.to_string()]);
        let encoded = wrapped(secret.as_bytes(), 64, "\r\n");
        let out = redact(&format!("-----BEGIN X-----\r\n{encoded}\r\n-----END X-----"), &masks);
        let body: String = out.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(alphabet_left(&body) < 8, "{out}");
        assert!(!out.contains(&encoded[..64]), "{out}");
    }

    #[test]
    fn each_line_of_a_multi_line_secret_base64_encoded_on_its_own_is_masked() {
        let masks = mask_list([KEY.to_string()]);
        for line in KEY.lines() {
            for engine in [&STANDARD, &URL_SAFE] {
                for encoded in [engine.encode(line), engine.encode(format!("{line}\n"))] {
                    let out = redact(&format!("line: {encoded}"), &masks);
                    assert!(
                        alphabet_left(&out) <= "line".len() + 3,
                        "{line:?}: {encoded} became {out}"
                    );
                }
            }
        }
        // A line too short to be masked on its own is not masked encoded either.
        let masks = mask_list(["first-line-long\nend\n".to_string()]);
        let end = STANDARD.encode("end");
        assert_eq!(redact(&end, &masks), end);
    }

    #[test]
    fn the_forms_of_a_value_grow_linearly_with_its_length() {
        for len in [1_000usize, 10_000, 100_000] {
            let value: String = KEY.chars().cycle().take(len).collect();
            let forms = forms(&value);
            let chars: usize = forms.iter().map(String::len).sum();
            assert!(forms.len() <= 60 + len / 8, "{len}: {} forms", forms.len());
            assert!(chars <= 60 * len, "{len}: {chars} characters");
        }
    }

    proptest! {
        /// After masking, a value of at least 4 characters appears in no text, JSON document or
        /// base64 encoding of it.
        #[test]
        fn no_form_of_a_masked_value_survives(
            value in "[a-m\"\\\\]{4,24}",
            before in "[n-z ]{0,20}",
            after in "[n-z ]{0,20}",
        ) {
            let masks = mask_list([value.clone()]);
            let text = format!("{before}{value}{after}");
            prop_assert!(!redact(&text, &masks).contains(&value));
            let json = serde_json::to_string(&text).unwrap();
            let escaped = json_escaped(&value);
            prop_assert!(!redact(&json, &masks).contains(&escaped));
            let b64 = STANDARD.encode(&value);
            prop_assert!(!redact(&b64, &masks).contains(&b64[..b64.trim_end_matches('=').len()]));
        }

        /// Wherever a value of at least 6 bytes sits in a base64-encoded document, the characters
        /// of the encoding that only the value decides are masked.
        #[test]
        fn a_value_at_any_offset_of_an_encoded_document_is_masked(
            value in "[A-Za-z0-9:/@._-]{6,40}",
            before in "[ -~]{0,12}",
            after in "[ -~]{0,12}",
        ) {
            let masks = mask_list([value.clone()]);
            for engine in [&STANDARD, &URL_SAFE] {
                let doc = engine.encode(format!("{before}{value}{after}"));
                let fragment = base64_fragment(value.as_bytes(), before.len(), engine);
                prop_assert!(doc.contains(&fragment));
                let out = redact(&doc, &masks);
                prop_assert!(!out.contains(&fragment), "{} left in {}", fragment, out);
            }
        }

        /// A value's encoding wrapped at a width tools use leaves at most a few characters of
        /// its end unmasked (the ones that mix in what follows it, and a last line too short to
        /// mask), whether the text is masked whole or one line at a time.
        #[test]
        fn no_wrapped_encoding_of_a_value_survives(
            value in proptest::collection::vec(any::<u8>(), 48..400)
                .prop_map(|b| b.iter().map(|c| char::from(b' ' + c % 95)).collect::<String>()),
            width in proptest::sample::select(BASE64_WRAP_WIDTHS.to_vec()),
            newline in any::<bool>(),
            crlf in any::<bool>(),
        ) {
            let masks = mask_list([value.clone()]);
            let input = if newline { format!("{value}\n") } else { value.clone() };
            let sep = if crlf { "\r\n" } else { "\n" };
            let encoded = wrapped(input.as_bytes(), width, sep);
            let whole = redact(&encoded, &masks);
            prop_assert!(alphabet_left(&whole) < MIN_BASE64_FRAGMENT + 3, "{:?} became {:?}", encoded, whole);
            let mut left = 0;
            for line in encoded.split(sep) {
                left += alphabet_left(&redact(line, &masks));
            }
            prop_assert!(left < MIN_BASE64_FRAGMENT + 3, "{} characters left of {:?}", left, encoded);
        }

        /// Each long enough line of a multi-line value, base64-encoded on its own, is masked.
        #[test]
        fn each_long_line_of_a_multi_line_value_encoded_on_its_own_is_masked(
            lines in proptest::collection::vec("[ -~]{1,40}", 2..6),
            newline in any::<bool>(),
        ) {
            let value = lines.join("\n");
            let masks = mask_list([value.clone()]);
            for line in &lines {
                if line.trim().len() < MIN_LINE_LEN || line.trim() != line {
                    continue;
                }
                let input = if newline { format!("{line}\n") } else { line.clone() };
                for engine in [&STANDARD, &URL_SAFE] {
                    let encoded = engine.encode(&input);
                    let out = redact(&encoded, &masks);
                    prop_assert!(alphabet_left(&out) <= 3, "{:?}: {} became {}", line, encoded, out);
                }
            }
        }

        /// Every line of a multi-line value that is long enough is masked wherever it is logged.
        #[test]
        fn each_long_line_of_a_multi_line_value_is_masked(
            lines in proptest::collection::vec("[A-Za-z0-9+/=]{1,30}", 2..8),
            indent in " {0,8}",
        ) {
            let value = lines.join("\n");
            let masks = mask_list([value.clone()]);
            for line in &lines {
                let out = redact(&format!("{indent}{line}"), &masks);
                if line.len() >= MIN_LINE_LEN {
                    prop_assert!(!out.contains(line.as_str()), "{:?} left in {:?}", line, out);
                }
            }
            // A value under the minimum is not masked at all (two one-character lines are three
            // characters).
            if value.len() >= MIN_SECRET_LEN {
                let text = format!("x {value} y");
                prop_assert!(!redact(&text, &masks).contains(&value));
            }
        }
    }
}
