//! Free TCP ports for the components a test starts on this machine's network. Each one is
//! asked of the kernel (a bind to port 0, then let go, so the component can bind it) and never
//! handed out twice in one process: components started side by side each ask before either
//! binds, and the kernel may name the same free port to both, after which one of them stops with
//! "address already in use" or, worse, answers in the other's place.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A port free on every address now, never one this process was given before.
pub fn free_port() -> std::io::Result<u16> {
    free_port_on(Ipv4Addr::UNSPECIFIED)
}

/// [`free_port`] on one address (loopback for what only this machine calls).
pub fn free_port_on(address: Ipv4Addr) -> std::io::Result<u16> {
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let port = TcpListener::bind((address, 0))?.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_never_handed_out_twice_in_one_process() {
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let port = free_port().expect("a free port");
            assert!(seen.insert(port), "port {port} handed out twice");
        }
    }
}
