//! One endpoint in front of the frontend replicas, as a Service is: a TCP listener on loopback that hands
//! each new connection to the next replica in turn and copies bytes both ways (TLS passes through; the
//! registrations' `caBundle` holds every replica's CA). Balancing is per connection, as kube-proxy's is: the
//! apiserver's long-lived (HTTP/2) connections decide how the calls spread, which each replica's own
//! `/metrics` shows.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};

/// A running balancer; stops accepting when dropped (open connections end with their peers).
pub struct Balancer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    /// Listens on 127.0.0.1 (a free port) in front of `backends`.
    pub async fn start(backends: Vec<SocketAddr>) -> anyhow::Result<Self> {
        anyhow::ensure!(!backends.is_empty(), "a balancer without backends");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let backend = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
                tokio::spawn(async move {
                    let _ = inbound.set_nodelay(true);
                    if let Ok(mut outbound) = TcpStream::connect(backend).await {
                        let _ = outbound.set_nodelay(true);
                        let mut inbound = inbound;
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Self { addr, task })
    }
}
