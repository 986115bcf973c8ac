//! Scorer faults made from outside, as a real outage would look to the frontend: a stopped process
//! (SIGSTOP: connections stay open, nothing answers), a killed one, or a slow network (a TCP proxy inside
//! loadgen that delays every chunk the scorer sends back).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Sends a signal (`STOP`, `CONT`) with the system's `kill`.
pub fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed: {status}");
    }
    Ok(())
}

/// Puts every thread of `pid` under SCHED_FIFO at `priority` (with the system's `chrt`).
pub fn set_realtime(pid: u32, priority: u32) -> Result<()> {
    let status = std::process::Command::new("chrt")
        .args(["-a", "-f", "-p", &priority.to_string(), &pid.to_string()])
        .status()
        .context("running chrt (util-linux)")?;
    if !status.success() {
        bail!("chrt -a -f -p {priority} {pid} failed: {status} (needs root or CAP_SYS_NICE)");
    }
    Ok(())
}

/// A proxy in front of `upstream` that delays what upstream sends by `delay` (per chunk, pipelined: the
/// added latency is `delay`, throughput is not limited). Returns its address; runs until the task is dropped.
pub async fn delay_proxy(
    upstream: SocketAddr,
    delay: Duration,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(up) = TcpStream::connect(upstream).await {
                    let _ = client.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut ur, uw) = up.into_split();
                    let mut uw = uw;
                    let to_up = async move {
                        let _ = tokio::io::copy(&mut cr, &mut uw).await;
                        let _ = uw.shutdown().await;
                    };
                    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
                    let read_up = async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = ur.read(&mut buf).await {
                            if n == 0
                                || tx
                                    .send((Instant::now() + delay, buf[..n].to_vec()))
                                    .is_err()
                            {
                                break;
                            }
                        }
                    };
                    let write_down = async move {
                        while let Some((at, chunk)) = rx.recv().await {
                            tokio::time::sleep_until(at.into()).await;
                            if cw.write_all(&chunk).await.is_err() {
                                break;
                            }
                        }
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(to_up, read_up, write_down);
                }
            });
        }
    });
    Ok((addr, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn proxy_delays_answers_and_passes_bytes_intact() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).await.unwrap();
            s.write_all(&buf[..n]).await.unwrap();
        });
        let (addr, _task) = delay_proxy(echo_addr, Duration::from_millis(80))
            .await
            .unwrap();
        let mut c = TcpStream::connect(addr).await.unwrap();
        let t0 = Instant::now();
        c.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(t0.elapsed() >= Duration::from_millis(80));
    }
}
