//! Helpers shared by zcnet-sys's unit tests.

/// Runs `ip ARGS` (iproute2) and asserts that it succeeded, with its stderr in the message.
pub(crate) fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
