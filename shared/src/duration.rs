//! Go-style duration strings, as `drift.interval` and `-lock-timeout` use them.
//!
//! Accepted: `0`, or one or more `<decimal number><unit>` with units `ns`, `us`, `µs`, `ms`,
//! `s`, `m`, `h` (`30m`, `1h30m`, `1.5h`). No sign: CAPTF has no negative durations.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: expected a number with a unit, like 30m or 1h30m")]
pub struct ParseDurationError(pub String);

/// Parse a Go-style duration.
pub fn parse(s: &str) -> Result<Duration, ParseDurationError> {
    let err = || ParseDurationError(s.to_string());
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err());
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let (num, after) = rest.split_at(num_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
            return Err(err());
        }
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| err())?
        };
        let mut nanos = int.checked_mul(unit_nanos).ok_or_else(err)?;
        // Fractions: at most 9 digits matter for nanosecond precision.
        let mut scale = unit_nanos;
        for d in frac_part.chars().take(18) {
            scale /= 10;
            nanos += u128::from(d.to_digit(10).ok_or_else(err)?) * scale;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(err)?;
        rest = next;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| err())?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Format seconds the way `-lock-timeout` takes them: `300s`.
pub fn seconds_flag(secs: i64) -> String {
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("168h"), Ok(Duration::from_secs(168 * 3600)));
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn junk_is_rejected() {
        for bad in [
            "",
            "30",
            "m",
            "1d",
            "-5m",
            "1h 30m",
            "1..5h",
            ".h",
            "30M",
            "abc",
            "99999999999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
