//! A network of its own for every pod, as a bridge CNI plugin gives one: a Linux bridge on this
//! machine with a /24 of `10.213.0.0/16`, and per pod a network namespace joined to it by a veth
//! pair, with the next address of the /24 and a default route through the bridge.
//!
//! So two pods may listen on the same port (two replicas of one Deployment), this machine (the
//! API server calling a webhook, the kubelet probing) reaches each at its own address, and an
//! EndpointSlice may hold that address. What only listens on this machine's loopback (the API
//! server, a test's module server) is reached from inside a pod on the pod's own loopback, at
//! the same port: a forwarder listens there ([`PodNetwork::new`]'s `forward`).
//!
//! Needs root (`ip netns add`, veth, bridge), as the process kubelet's namespaces do. Each
//! bridge is named for its /24 (`cptfbr<N>`), so creating it claims the /24 among test
//! processes running side by side; a network left behind by a killed process is reclaimed when
//! its /24 is next claimed. The pure parts: [`subnet_address`], [`next_pod_address`].

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The /16 the pod networks take their /24s from.
pub const PREFIX: [u8; 2] = [10, 213];

#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error("`ip {args}` failed: {message}")]
    Ip { args: String, message: String },
    #[error("every /24 of 10.213.0.0/16 is taken by another pod network (bridges cptfbr1..cptfbr254)")]
    NoSubnet,
    #[error("no address is left in the pod network {0}.0/24")]
    NoAddress(String),
    #[error("cannot listen on port {port} inside the pod's network namespace {netns}: {source}")]
    Forward {
        port: u16,
        netns: String,
        #[source]
        source: std::io::Error,
    },
}

/// `ip <args>`; its error output on failure.
fn ip(args: &[&str]) -> Result<(), PodNetError> {
    let out = Command::new("ip").args(args).output().map_err(|e| PodNetError::Ip {
        args: args.join(" "),
        message: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(PodNetError::Ip {
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Address `host` of the /24 number `subnet` (`10.213.<subnet>.<host>`).
pub fn subnet_address(subnet: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(PREFIX[0], PREFIX[1], subnet, host)
}

/// The first address of the /24 `subnet` for a pod, `.2` to `.254` (`.1` is the bridge's), not
/// in `used`.
pub fn next_pod_address(subnet: u8, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    (2..=254)
        .map(|host| subnet_address(subnet, host))
        .find(|a| !used.contains(a))
}

/// The bridge and its /24. Dropping it deletes the bridge (the pods' namespaces first).
#[derive(Debug)]
pub struct PodNetwork {
    subnet: u8,
    bridge: String,
    forward: Vec<u16>,
}

impl PodNetwork {
    /// Claims the first free /24 and makes its bridge. `forward`: the ports of this machine's
    /// loopback that pods reach on their own loopback.
    pub fn new(forward: Vec<u16>) -> Result<PodNetwork, PodNetError> {
        for subnet in 1..=254u8 {
            let bridge = format!("cptfbr{subnet}");
            // Creating the bridge is the claim: it fails when another process holds the /24.
            match ip(&["link", "add", &bridge, "type", "bridge"]) {
                Ok(()) => {}
                Err(PodNetError::Ip { message, .. }) if message.contains("File exists") => continue,
                Err(e) => return Err(e),
            }
            let net = PodNetwork {
                subnet,
                bridge,
                forward,
            };
            net.remove_leftovers();
            let gateway = format!("{}/24", net.gateway());
            ip(&["addr", "add", &gateway, "dev", &net.bridge])?;
            ip(&["link", "set", &net.bridge, "up"])?;
            return Ok(net);
        }
        Err(PodNetError::NoSubnet)
    }

    /// The bridge's address: the pods' default route, and the source of what this machine
    /// sends to them (the API server's webhook calls, the probes).
    pub fn gateway(&self) -> Ipv4Addr {
        subnet_address(self.subnet, 1)
    }

    pub fn subnet(&self) -> u8 {
        self.subnet
    }

    /// Namespaces a killed process left behind on this /24.
    fn remove_leftovers(&self) {
        let prefix = format!("cptf{}p", self.subnet);
        if let Ok(dir) = std::fs::read_dir("/run/netns") {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if name
                    .strip_prefix(&prefix)
                    .is_some_and(|rest| rest.parse::<u8>().is_ok())
                {
                    let _ = ip(&["netns", "del", &name]);
                }
            }
        }
    }

    /// A network namespace for a pod at `address` (of this /24), joined to the bridge, with the
    /// forwarders listening on its loopback. Must be called within a Tokio runtime.
    pub fn attach(&self, address: Ipv4Addr) -> Result<PodNet, PodNetError> {
        let host = address.octets()[3];
        let name = format!("cptf{}p{host}", self.subnet);
        let veth = format!("cptf{}v{host}", self.subnet);
        // A namespace of that name left by a pod that had the address before.
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name])?;
        let net = PodNet {
            name: name.clone(),
            path: Path::new("/run/netns").join(&name),
            address,
            forwarders: Vec::new(),
        };
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ])?;
        ip(&["link", "set", &veth, "master", &self.bridge, "up"])?;
        let cidr = format!("{address}/24");
        ip(&["-n", &name, "addr", "add", &cidr, "dev", "eth0"])?;
        ip(&["-n", &name, "link", "set", "eth0", "up"])?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        let gateway = self.gateway().to_string();
        ip(&["-n", &name, "route", "add", "default", "via", &gateway])?;
        let mut net = net;
        for &port in &self.forward {
            let listener = listen_in(&net.path, port).map_err(|source| PodNetError::Forward {
                port,
                netns: name.clone(),
                source,
            })?;
            net.forwarders.push(tokio::spawn(forward(listener, port)));
        }
        Ok(net)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        self.remove_leftovers();
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// One pod's network namespace. Dropping it stops its forwarders and deletes the namespace (and
/// with it the veth pair); processes still in it keep it until they end.
#[derive(Debug)]
pub struct PodNet {
    name: String,
    path: PathBuf,
    address: Ipv4Addr,
    forwarders: Vec<tokio::task::JoinHandle<()>>,
}

impl PodNet {
    /// The namespace's file, for `nsenter --net=`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn address(&self) -> Ipv4Addr {
        self.address
    }
}

impl Drop for PodNet {
    fn drop(&mut self) {
        for f in &self.forwarders {
            f.abort();
        }
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A listener on `127.0.0.1:port` inside the network namespace `netns`: a thread of its own
/// enters the namespace (a thread's network namespace is its own), and the socket stays there.
fn listen_in(netns: &Path, port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let file = std::fs::File::open(netns)?;
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
            l.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(l)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the thread entering the namespace panicked")))
    })?;
    tokio::net::TcpListener::from_std(listener)
}

/// Every connection to `listener` is joined to `127.0.0.1:port` of this machine.
async fn forward(listener: tokio::net::TcpListener, port: u16) {
    while let Ok((mut inside, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut outside) = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_addresses_skip_the_bridges_and_the_used_ones() {
        let mut used = BTreeSet::new();
        assert_eq!(next_pod_address(7, &used), Some(Ipv4Addr::new(10, 213, 7, 2)));
        used.insert(Ipv4Addr::new(10, 213, 7, 2));
        used.insert(Ipv4Addr::new(10, 213, 7, 4));
        assert_eq!(next_pod_address(7, &used), Some(Ipv4Addr::new(10, 213, 7, 3)));
    }

    #[test]
    fn no_pod_address_is_left_when_the_subnet_is_full() {
        let used: BTreeSet<Ipv4Addr> = (2..=254).map(|h| subnet_address(9, h)).collect();
        assert_eq!(next_pod_address(9, &used), None);
    }
}
