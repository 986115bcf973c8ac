//! Loopback ports for processes that take their port on the command line (etcd, the apiserver, the
//! controllers, kwok, Kueue, Jaeger).
//!
//! A port the kernel handed out with `bind(127.0.0.1:0)` and then released lies in the ephemeral range,
//! where any outgoing connection (the apiserver's to etcd, a client's to anything) may take it before the
//! process binds it: two test executables starting clusters at once made the controller-manager fail with
//! "address already in use". These ports come from below that range, where the kernel never picks a source
//! port, and each is claimed with a file of its own across processes (created exclusively, holding the
//! claimer's pid), so concurrent test processes never pick the same one. Claims are released on drop; a
//! claim whose process is gone is taken over.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;

/// The lowest port handed out (above the well-known and most registered service ports).
const LOWEST: u16 = 15_000;
/// Candidates tried before giving up.
const ATTEMPTS: usize = 2_000;

/// `n` distinct ports, claimed until this value drops.
#[derive(Debug)]
pub struct ClaimedPorts {
    ports: Vec<u16>,
    claims: Vec<PathBuf>,
}

impl ClaimedPorts {
    /// Claims `n` free loopback ports below the kernel's ephemeral range.
    pub fn claim(n: usize) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join("gpu-admission-ports");
        std::fs::create_dir_all(&dir)?;
        let highest = ephemeral_low().saturating_sub(1).max(LOWEST + 1_000);
        let span = u64::from(highest - LOWEST + 1);
        let random = RandomState::new();
        let mut claimed = Self {
            ports: Vec::with_capacity(n),
            claims: Vec::with_capacity(n),
        };
        for attempt in 0..ATTEMPTS {
            if claimed.ports.len() == n {
                break;
            }
            let offset = u16::try_from(random.hash_one((std::process::id(), attempt)) % span)
                .expect("the span fits a port");
            let port = LOWEST + offset;
            if claimed.ports.contains(&port) {
                continue;
            }
            let file = dir.join(port.to_string());
            if !take(&file) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                claimed.ports.push(port);
                claimed.claims.push(file);
            } else {
                let _ = std::fs::remove_file(&file);
            }
        }
        anyhow::ensure!(
            claimed.ports.len() == n,
            "found only {} of {n} free ports in {LOWEST}..={highest}",
            claimed.ports.len()
        );
        Ok(claimed)
    }

    /// The claimed ports, in the order they were found.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }
}

impl Drop for ClaimedPorts {
    fn drop(&mut self) {
        for file in &self.claims {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Creates the claim `file` (our pid in it); a claim whose process no longer runs is taken over.
fn take(file: &PathBuf) -> bool {
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(file)
    };
    let mut opened = create();
    if opened.is_err() && !claimer_alive(file) {
        let _ = std::fs::remove_file(file);
        opened = create();
    }
    match opened {
        Ok(mut f) => f
            .write_all(std::process::id().to_string().as_bytes())
            .is_ok(),
        Err(_) => false,
    }
}

/// Whether the process named in claim `file` still runs (an unreadable or empty claim counts as alive:
/// its writer may be between creating and writing it).
fn claimer_alive(file: &PathBuf) -> bool {
    match std::fs::read_to_string(file) {
        Ok(pid) if !pid.trim().is_empty() => {
            PathBuf::from(format!("/proc/{}", pid.trim())).exists()
        }
        _ => true,
    }
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_ports_are_distinct_below_the_ephemeral_range_and_released_on_drop() {
        let first = ClaimedPorts::claim(7).unwrap();
        let second = ClaimedPorts::claim(7).unwrap();
        let mut all: Vec<u16> = first
            .ports()
            .iter()
            .chain(second.ports())
            .copied()
            .collect();
        assert!(all.iter().all(|&p| (LOWEST..ephemeral_low()).contains(&p)));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 14, "two claims share a port");
        let dir = std::env::temp_dir().join("gpu-admission-ports");
        let port = first.ports()[0];
        assert!(dir.join(port.to_string()).is_file());
        drop(first);
        assert!(!dir.join(port.to_string()).exists());
    }
}
