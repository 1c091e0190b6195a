//! Numbers as iperf3 reads and prints them.
//!
//! iperf3 src/units.c: `unit_atoi` / `unit_atof` read sizes with binary suffixes (`-n 1G` is
//! 2^30 bytes, `-l 128K` is 131072), `unit_atof_rate` reads rates with decimal ones (`-b 1G`
//! is 10^9 bits per second); `unit_snprintf` prints a value in at most four digits with an
//! adaptive unit: bytes in powers of 1024 (`'A'`: "2.49 GByte"), bits in powers of 1000
//! (`'a'`: "21.4 Gbit"). The report formats append the `s` ("GBytes", "Gbits/sec").

/// Labels of `unit_snprintf` for bytes, by power of 1024.
const BYTE_LABELS: [&str; 5] = ["Byte", "KByte", "MByte", "GByte", "TByte"];
/// Labels of `unit_snprintf` for bits, by power of 1000.
const BIT_LABELS: [&str; 5] = ["bit", "Kbit", "Mbit", "Gbit", "Tbit"];

/// A number with an optional `[kKmMgGtT]` suffix: the number and the suffix's power (0..=4).
fn split_suffix(s: &str) -> Option<(f64, i32)> {
    let s = s.trim();
    let (num, power) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1),
        'm' | 'M' => (&s[..s.len() - 1], 2),
        'g' | 'G' => (&s[..s.len() - 1], 3),
        't' | 'T' => (&s[..s.len() - 1], 4),
        _ => (s, 0),
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n, power))
}

/// A size as `unit_atoi` reads it: `128K` is 131072, `1.5M` is 1572864. `None` when it is not
/// a non-negative number with an optional `K`, `M`, `G` or `T`.
pub fn parse_size(s: &str) -> Option<u64> {
    let (n, power) = split_suffix(s)?;
    let v = n * 1024f64.powi(power);
    (v < u64::MAX as f64).then_some(v as u64)
}

/// A rate in bits per second as `unit_atof_rate` reads it: `10M` is 10,000,000. A burst
/// (`-b 10M/100`) is not accepted here.
pub fn parse_rate(s: &str) -> Option<u64> {
    let (n, power) = split_suffix(s)?;
    let v = n * 1000f64.powi(power);
    (v < u64::MAX as f64).then_some(v as u64)
}

/// `unit_snprintf(value, 'A')`: bytes with an adaptive binary unit, e.g. `"2.49 GByte"`.
pub fn bytes(value: f64) -> String {
    adaptive(value, 1024.0, &BYTE_LABELS)
}

/// `unit_snprintf(bytes_per_second, 'a')`: a rate in bits with an adaptive decimal unit, e.g.
/// `"21.4 Gbit"` (the caller passes bytes per second, as iperf3 does).
pub fn bits(bytes_per_second: f64) -> String {
    adaptive(bytes_per_second * 8.0, 1000.0, &BIT_LABELS)
}

fn adaptive(mut value: f64, step: f64, labels: &[&str; 5]) -> String {
    let mut power = 0;
    while value >= step && power < labels.len() - 1 {
        value /= step;
        power += 1;
    }
    // "print such that we always fit in 4 places" (units.c)
    let text = if value < 9.995 {
        format!("{value:4.2}")
    } else if value < 99.95 {
        format!("{value:4.1}")
    } else {
        format!("{value:4.0}")
    };
    format!("{text} {}", labels[power])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn sizes_use_binary_suffixes() {
        assert_eq!(parse_size("128K"), Some(131_072));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("1Q"), None);
    }

    #[zcnet_testkit::test]
    fn rates_use_decimal_suffixes() {
        assert_eq!(parse_rate("10M"), Some(10_000_000));
        assert_eq!(parse_rate("1g"), Some(1_000_000_000));
        assert_eq!(parse_rate("0"), Some(0));
        assert_eq!(parse_rate("fast"), None);
    }

    #[zcnet_testkit::test]
    fn prints_as_unit_snprintf() {
        // Values from iperf3 3.12's own output over loopback.
        assert_eq!(bytes(2.49 * 1024.0 * 1024.0 * 1024.0), "2.49 GByte");
        assert_eq!(bytes(896.0 * 1024.0), " 896 KByte");
        assert_eq!(bytes(1.81 * 1024.0 * 1024.0), "1.81 MByte");
        assert_eq!(bits(21.4e9 / 8.0), "21.4 Gbit");
        assert_eq!(bits(7.39e9 / 8.0), "7.39 Gbit");
        assert_eq!(bits(0.0), "0.00 bit");
        assert_eq!(bytes(0.0), "0.00 Byte");
    }
}
