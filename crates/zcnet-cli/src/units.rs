//! Parsing and checking sizes, durations and counts from the command line. Every check names
//! the flag and the value given, and fails with exit code 2 before anything is connected or
//! allocated (docs/cli.md, "Exit codes").

use std::time::Duration;
use zcnet::Error;

/// The most bytes one buffer may hold: a send (`--size` of `send` and `bench tx`), a request of
/// `bench rx`, a receive buffer (`--buf-size`). 64 MiB: the kernel cuts sends into 64 KiB
/// segments (GSO) anyway, so larger buffers gain nothing, and `--size 10G` is a typo.
pub const MAX_BUFFER: usize = 64 << 20;
/// The most bytes of buffers one command may ask for: `--size` × `--inflight`,
/// `--buf-size` × `--buffers`. 1 GiB of memory, pinned for zero copy.
pub const MAX_BUFFERS_TOTAL: usize = 1 << 30;
/// The most sends in flight (`--inflight`).
pub const MAX_INFLIGHT: usize = 4096;
/// The largest receive area (`--area`): 64 GiB, past any GPU's or NIC queue's use.
pub const MAX_AREA: usize = 64 << 30;
/// The most connections and threads a bench run makes (`--connections`, `--threads`).
pub const MAX_CONNECTIONS: usize = 4096;
pub const MAX_THREADS: usize = 1024;
/// The longest `--duration`, in seconds (about 31 years: beyond it the clock overflows).
pub const MAX_SECONDS: f64 = 1e9;

/// Parses `4096`, `4K`, `64KiB`, `1M`, `2G` (binary multiples); `None` for anything else,
/// overflow included.
fn parse_bytes(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let (num, mult) = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("tib", 1 << 40),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("t", 1 << 40),
    ]
    .iter()
    .find_map(|(suf, m)| lower.strip_suffix(suf).map(|n| (n.to_string(), *m)))
    .unwrap_or((lower.clone(), 1));
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
}

/// `flag`'s value `s` as a byte count of at least 1 (e.g. `--bytes 1G`).
pub fn bytes_arg(flag: &str, s: &str) -> Result<u64, Error> {
    match parse_bytes(s) {
        None => Err(Error::invalid_input(format!(
            "{flag} '{s}': give bytes like 4096, 16K, 1M or 2G"
        ))),
        Some(0) => Err(Error::invalid_input(format!(
            "{flag} {s}: give at least 1 B, like 4096, 16K or 1M"
        ))),
        Some(n) => Ok(n),
    }
}

/// `--rcvlowat`'s value: `Ok(None)` for `auto`, `Ok(Some(0))` for `off` or 0, else the
/// bytes (below 4 GiB; the kernel caps the mark at half of `net.ipv4.tcp_rmem`'s maximum).
pub fn lowat_arg(flag: &str, s: &str) -> Result<Option<u32>, Error> {
    match s {
        "auto" => Ok(None),
        "off" => Ok(Some(0)),
        _ => parse_bytes(s)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "{flag} '{s}': give bytes below 4G like 128K, off, or auto"
                ))
            }),
    }
}

/// `flag`'s value `s` as a size: 1 B to `max` (e.g. `--size 64K`, at most [`MAX_BUFFER`];
/// `--area`, at most [`MAX_AREA`]).
pub fn size_arg(flag: &str, s: &str, max: usize) -> Result<usize, Error> {
    let n = bytes_arg(flag, s)?;
    match usize::try_from(n) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(Error::invalid_input(format!(
            "{flag} {s} is over its limit of {}: give a smaller {flag}",
            human(max as u64)
        ))),
    }
}

/// `--window`'s value: bytes in flight, 0 (buffers by `--inflight` alone) to
/// [`MAX_BUFFERS_TOTAL`].
pub fn window_arg(s: &str) -> Result<usize, Error> {
    if parse_bytes(s) == Some(0) {
        return Ok(0);
    }
    size_arg("--window", s, MAX_BUFFERS_TOTAL)
}

/// `flag`'s value as a count of 1 to `max` (e.g. `--inflight 8`).
pub fn count_arg(flag: &str, n: usize, max: usize) -> Result<usize, Error> {
    if (1..=max).contains(&n) {
        Ok(n)
    } else if max == usize::MAX {
        Err(Error::invalid_input(format!(
            "{flag} {n}: give a number of at least 1"
        )))
    } else {
        Err(Error::invalid_input(format!(
            "{flag} {n}: give a number from 1 to {max}"
        )))
    }
}

/// `flag`'s value as a positive number of seconds (at most [`MAX_SECONDS`]).
pub fn seconds_arg(flag: &str, secs: f64) -> Result<Duration, Error> {
    if secs > 0.0 && secs <= MAX_SECONDS {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(Error::invalid_input(format!(
            "{flag} {secs}: give a positive number of seconds (at most {MAX_SECONDS:e})"
        )))
    }
}

/// Checks that `count` buffers of `size` bytes stay within [`MAX_BUFFERS_TOTAL`]; the flags
/// are named as given (`("--size", "64M")`, `("--inflight", "4096")`).
pub fn total_arg(
    (size_flag, size): (&str, usize),
    (count_flag, count): (&str, usize),
) -> Result<(), Error> {
    match size.checked_mul(count) {
        Some(t) if t <= MAX_BUFFERS_TOTAL => Ok(()),
        t => Err(Error::invalid_input(format!(
            "{size_flag} {} × {count_flag} {count} is {} of buffers, over the limit of {}: give a smaller {size_flag} or {count_flag}",
            human(size as u64),
            t.map_or_else(|| "more than 16 EiB".to_string(), |t| human(t as u64)),
            human(MAX_BUFFERS_TOTAL as u64)
        ))),
    }
}

/// `n` bytes the way the flags take them: `64M`, `1G`, `1536K`, `100` (exact, binary units).
fn human(n: u64) -> String {
    for (suf, m) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{suf}", n / m);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(window_arg("512K").unwrap(), 512 << 10);
        assert_eq!(window_arg("0").unwrap(), 0);
        assert_eq!(window_arg("1G").unwrap(), 1 << 30);
        for bad in ["2G", "x", "-1"] {
            let m = window_arg(bad).unwrap_err().to_string();
            assert!(m.starts_with("--window") && m.contains(bad), "{m}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(size_arg("--size", "4096", MAX_BUFFER).unwrap(), 4096);
        assert_eq!(size_arg("--size", "4K", MAX_BUFFER).unwrap(), 4096);
        assert_eq!(size_arg("--size", "64KiB", MAX_BUFFER).unwrap(), 65536);
        assert_eq!(size_arg("--size", "1m", MAX_BUFFER).unwrap(), 1 << 20);
        assert_eq!(size_arg("--size", "64M", MAX_BUFFER).unwrap(), MAX_BUFFER);
        assert_eq!(bytes_arg("--bytes", "2T").unwrap(), 2 << 40);
        for bad in ["0", "abc", "-1", "10G", "64M1", "99999999999999999999"] {
            let e = size_arg("--size", bad, MAX_BUFFER).unwrap_err();
            assert_eq!(zcnet_cli::cli_text::exit_code(&e), 2, "{bad}");
            let m = e.to_string();
            assert!(m.starts_with("--size "), "{m}");
            assert!(
                !m.contains("os error") && !m.contains("invalid input"),
                "{m}"
            );
        }
        assert!(size_arg("--size", "10G", MAX_BUFFER)
            .unwrap_err()
            .to_string()
            .contains("over its limit of 64M"));
    }

    #[test]
    fn counts_seconds_and_totals() {
        assert_eq!(count_arg("--inflight", 8, MAX_INFLIGHT).unwrap(), 8);
        for n in [0, MAX_INFLIGHT + 1] {
            let m = count_arg("--inflight", n, MAX_INFLIGHT)
                .unwrap_err()
                .to_string();
            assert!(
                m.starts_with(&format!("--inflight {n}: give a number from 1 to 4096")),
                "{m}"
            );
        }
        assert_eq!(seconds_arg("--duration", 0.5).unwrap().as_millis(), 500);
        for s in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e30] {
            let e = seconds_arg("--duration", s).unwrap_err();
            assert_eq!(zcnet_cli::cli_text::exit_code(&e), 2);
            assert!(e.to_string().starts_with("--duration "), "{e}");
        }
        assert!(total_arg(("--size", 64 << 20), ("--inflight", 16)).is_ok());
        let m = total_arg(("--size", 64 << 20), ("--inflight", 17))
            .unwrap_err()
            .to_string();
        assert!(m.contains("--size 64M × --inflight 17 is 1088M"), "{m}");
        assert!(total_arg(("--size", usize::MAX), ("--inflight", 2)).is_err());
    }
}
