//! Durations as Kubernetes components read them: Go's `time.ParseDuration`.
//!
//! kube-controller-manager's duration flags (`--endpoint-updates-batch-period`,
//! `--leader-elect-lease-duration`, ...) are `time.Duration` flags, so anything they
//! accept — `1.5s`, `500ms`, `1m30s`, `1h2m3.5s`, `300us`, `300µs`, `10ns`, a bare `0` —
//! is accepted here with the same value, and anything they refuse is refused: an empty
//! string, a number without a unit (except `0`), an unknown unit, `.s`, a value above
//! Go's limit of 2^63-1 nanoseconds (about 292 years).
//!
//! One deliberate difference: a negative duration (`-5s`) parses in Go, but every
//! svcplane flag is a delay, a period or a timeout, where kube-controller-manager
//! either refuses a negative value or treats it as nonsense; it is refused here with a
//! message saying so. `-0s` is zero, as in Go.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a Go duration at all (empty, no digits, a stray character).
    #[error(
        "invalid duration {0:?}: use a number with a unit (ns, us, ms, s, m, h), e.g. 500ms, 1.5s, 1m30s"
    )]
    Invalid(String),
    /// A number without a unit, other than `0`.
    #[error("invalid duration {0:?}: missing unit (ns, us, ms, s, m, h), e.g. 500ms, 1.5s, 1m30s")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("invalid duration {value:?}: unknown unit {unit:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit {
        /// The whole input.
        value: String,
        /// The unit found.
        unit: String,
    },
    /// Larger than Go's `time.Duration` can hold.
    #[error("invalid duration {0:?}: longer than Go's maximum of 2562047h47m16.854775807s")]
    Overflow(String),
    /// Negative (below `-0`).
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
}

/// Go's maximum `time.Duration`, in nanoseconds.
const MAX_NANOS: u64 = i64::MAX as u64;

/// Nanoseconds per unit, as Go's `unitMap`.
fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        // Go accepts both the micro sign (U+00B5) and the Greek small letter mu (U+03BC).
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses `value` as Go's `time.ParseDuration` does (see the module docs), refusing
/// negative values.
pub fn parse_go_duration(value: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(value.to_owned());
    let overflow = || DurationError::Overflow(value.to_owned());
    let mut s = value;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    // The one unitless value Go accepts.
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        // The next character must be a digit or a period.
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part.
        let int_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (int_digits, rest) = s.split_at(int_len);
        let mut whole: u64 = 0;
        for d in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(d - b'0')))
                .filter(|w| *w <= MAX_NANOS)
                .ok_or_else(overflow)?;
        }
        s = rest;
        // Fraction: digits after the period; like Go, digits beyond what a u64 holds
        // are consumed but ignored.
        let mut fraction: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut has_fraction_digits = false;
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let mut overflowed = false;
            for d in rest[..frac_len].bytes() {
                has_fraction_digits = true;
                if overflowed {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(d - b'0')))
                    .filter(|f| *f <= MAX_NANOS)
                {
                    Some(f) => {
                        fraction = f;
                        scale *= 10.0;
                    }
                    None => overflowed = true,
                }
            }
            s = &rest[frac_len..];
        }
        if int_digits.is_empty() && !has_fraction_digits {
            // ".s" or "-.s": no digits at all.
            return Err(invalid());
        }
        // Unit: everything up to the next digit or period.
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(value.to_owned()));
        }
        let (unit, rest) = s.split_at(unit_len);
        s = rest;
        let nanos_per_unit = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            value: value.to_owned(),
            unit: unit.to_owned(),
        })?;
        let mut part = whole
            .checked_mul(nanos_per_unit)
            .filter(|v| *v <= MAX_NANOS)
            .ok_or_else(overflow)?;
        if fraction > 0 {
            // Go: v += uint64(float64(f) * (float64(unit) / scale)).
            let extra = (fraction as f64 * (nanos_per_unit as f64 / scale)) as u64;
            part = part
                .checked_add(extra)
                .filter(|v| *v <= MAX_NANOS)
                .ok_or_else(overflow)?;
        }
        total = total
            .checked_add(part)
            .filter(|v| *v <= MAX_NANOS)
            .ok_or_else(overflow)?;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative(value.to_owned()));
    }
    Ok(Duration::from_nanos(total))
}

/// Renders `d` the way Go's `Duration.String` does (`1m30s`, `1.5s`, `500ms`, `0s`), for
/// messages and defaults that should read like kube-controller-manager's.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos().min(u128::from(MAX_NANOS)) as u64;
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        // Below one second Go uses the largest unit that keeps an integer part.
        let (unit, div) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", fixed(nanos, div));
    }
    let mut out = String::new();
    let hours = nanos / 3_600_000_000_000;
    let minutes = (nanos / 60_000_000_000) % 60;
    let seconds_nanos = nanos % 60_000_000_000;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&fixed(seconds_nanos, 1_000_000_000));
    out.push('s');
    out
}

/// `value / div` with the fraction's trailing zeros dropped.
fn fixed(value: u64, div: u64) -> String {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A duration flag's value parser: Go's `time.ParseDuration` syntax, not negative.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    parse_go_duration(value).map_err(|e| e.to_string())
}

/// As [`parse_duration`], refusing zero (intervals).
pub fn parse_positive_duration(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    if d.is_zero() {
        return Err(format!(
            "invalid duration {value:?}: must be greater than zero"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const NS: u64 = 1;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    const M: u64 = 60 * S;
    const H: u64 = 60 * M;

    /// The accepted cases of Go's own `parseDurationTests` (time/time_test.go) that a
    /// non-negative flag can hold, plus the forms the issue names.
    #[rstest]
    #[case("0", 0)]
    #[case("5s", 5 * S)]
    #[case("30s", 30 * S)]
    #[case("1478s", 1478 * S)]
    #[case("+5s", 5 * S)]
    #[case("-0", 0)]
    #[case("+0", 0)]
    #[case("-0s", 0)]
    #[case("5.0s", 5 * S)]
    #[case("5.6s", 5 * S + 600 * MS)]
    #[case("5.s", 5 * S)]
    #[case(".5s", 500 * MS)]
    #[case("1.0s", S)]
    #[case("1.00s", S)]
    #[case("1.004s", S + 4 * MS)]
    #[case("1.0040s", S + 4 * MS)]
    #[case("100.00100s", 100 * S + MS)]
    #[case("10ns", 10 * NS)]
    #[case("11us", 11 * US)]
    #[case("12µs", 12 * US)]
    #[case("12μs", 12 * US)]
    #[case("13ms", 13 * MS)]
    #[case("14s", 14 * S)]
    #[case("15m", 15 * M)]
    #[case("16h", 16 * H)]
    #[case("3h30m", 3 * H + 30 * M)]
    #[case("10.5s4m", 4 * M + 10 * S + 500 * MS)]
    #[case("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS)]
    #[case("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS)]
    #[case("52763797000ns", 52763797000 * NS)]
    #[case("0.3333333333333333333h", 20 * M)]
    #[case("9007199254740993ns", (1 << 53) + 1)]
    #[case("9223372036854775807ns", i64::MAX as u64)]
    #[case("9223372036854775.807us", i64::MAX as u64)]
    #[case("9223372036s854ms775us807ns", i64::MAX as u64)]
    #[case("0.100000000000000000000h", 6 * M)]
    #[case("0.830103483285477580700h", 49 * M + 48 * S + 372_539_827 * NS)]
    #[case("1.5s", 1500 * MS)]
    #[case("500ms", 500 * MS)]
    #[case("1m30s", 90 * S)]
    #[case("1h2m3.5s", H + 2 * M + 3500 * MS)]
    #[case("300us", 300 * US)]
    #[case("300µs", 300 * US)]
    #[case("0s", 0)]
    #[case("0.0s", 0)]
    fn go_accepts(#[case] input: &str, #[case] nanos: u64) {
        assert_eq!(
            parse_go_duration(input),
            Ok(Duration::from_nanos(nanos)),
            "{input}"
        );
    }

    /// Go's `parseDurationErrorTests`, and the unitless and empty values KCM refuses.
    #[rstest]
    #[case("", "invalid duration")]
    #[case("3", "missing unit")]
    #[case("60", "missing unit")]
    #[case("-", "invalid duration")]
    #[case("s", "invalid duration")]
    #[case(".", "invalid duration")]
    #[case("-.", "invalid duration")]
    #[case(".s", "invalid duration")]
    #[case("+.s", "invalid duration")]
    #[case("1d", "unknown unit \"d\"")]
    #[case("5x", "unknown unit \"x\"")]
    #[case("1.5", "missing unit")]
    #[case(" 5s", "invalid duration")]
    #[case("5 s", "unknown unit \" s\"")]
    #[case("9223372036854775808ns", "maximum")]
    #[case("9223372036854775.808us", "maximum")]
    #[case("9223372036854ms775us808ns", "maximum")]
    #[case("3000000h", "maximum")]
    #[case("-5s", "must not be negative")]
    #[case("-1.5h", "must not be negative")]
    #[case("-1ns", "must not be negative")]
    fn go_refuses(#[case] input: &str, #[case] why: &str) {
        let e = parse_go_duration(input).unwrap_err().to_string();
        assert!(e.contains(why), "{input:?}: {e}");
        assert!(e.contains(&format!("{input:?}")), "names the value: {e}");
    }

    #[rstest]
    #[case(0, "0s")]
    #[case(1, "1ns")]
    #[case(1_100, "1.1µs")]
    #[case(2_200_000, "2.2ms")]
    #[case(500 * MS, "500ms")]
    #[case(S + 500 * MS, "1.5s")]
    #[case(90 * S, "1m30s")]
    #[case(H, "1h0m0s")]
    #[case(H + 2 * M + 3500 * MS, "1h2m3.5s")]
    fn formats_like_go(#[case] nanos: u64, #[case] want: &str) {
        let d = Duration::from_nanos(nanos);
        assert_eq!(format_go_duration(d), want);
        assert_eq!(parse_go_duration(want), Ok(d), "round trip of {want}");
    }
}
