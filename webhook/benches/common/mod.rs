//! What both benches do with the real binary: start it on loopback ports, and read its memory.

use std::net::SocketAddr;
use std::path::Path;

/// Start the webhook binary at `binary` with the dev certificate pair on free loopback ports;
/// returns the process and the address it printed.
pub fn spawn_webhook(
    binary: &Path,
    files: &captf_webhook::devcerts::DevCertFiles,
) -> (std::process::Child, SocketAddr) {
    let mut child = std::process::Command::new(binary)
        .args(["--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(&files.cert)
        .arg("--tls-key-file")
        .arg(&files.key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let addr = line.trim().trim_start_matches("listening on https://").parse().unwrap();
    (child, addr)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
