//! A TCP proxy in front of the API server that a test can stall or slow: while paused, bytes
//! stop flowing both ways on every connection (new ones wait too), as a congested or
//! partitioned network would do to one replica; resumed, they flow again. With a delay, every
//! chunk arrives that much later each way (a slow API server as its client sees it: each
//! request takes longer, so bounded writers queue). TLS passes through untouched.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

pub struct Proxy {
    pub addr: SocketAddr,
    paused: watch::Sender<bool>,
    delay: watch::Sender<Duration>,
}

/// Waits while `paused` says so.
async fn flowing(paused: &mut watch::Receiver<bool>) {
    while *paused.borrow_and_update() {
        if paused.changed().await.is_err() {
            return;
        }
    }
}

/// Copies `from` to `to`, stopping (without closing anything) while paused, each chunk
/// delivered `delay` (as it was when read) after it was read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    paused: watch::Receiver<bool>,
    delay: watch::Receiver<Duration>,
) {
    let (line, mut arriving) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut reading = paused.clone();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            flowing(&mut reading).await;
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let due = Instant::now() + *delay.borrow();
            if line.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let mut writing = paused;
    let write = async move {
        while let Some((due, bytes)) = arriving.recv().await {
            tokio::time::sleep_until(due).await;
            flowing(&mut writing).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(read, write);
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (paused, watching) = watch::channel(false);
        let (delay, delays) = watch::channel(Duration::ZERO);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (mut gate, delays) = (watching.clone(), delays.clone());
                tokio::spawn(async move {
                    flowing(&mut gate).await;
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, gate.clone(), delays.clone()), pipe(sr, cw, gate, delays));
                });
            }
        });
        Self { addr, paused, delay }
    }

    /// Delays every chunk by `each_way` in both directions from now on (zero: none).
    pub fn slow_down(&self, each_way: Duration) {
        self.delay.send_replace(each_way);
    }

    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// A copy of `kubeconfig` (in `dir`) whose server is this proxy.
    pub fn kubeconfig(&self, kubeconfig: &Path, dir: &Path) -> PathBuf {
        let mut kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
        for cluster in kc["clusters"].as_sequence_mut().unwrap() {
            cluster["cluster"]["server"] = format!("https://{}", self.addr).into();
        }
        let path = dir.join("kubeconfig-via-proxy");
        std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
        path
    }
}

/// The API server's address in `kubeconfig` (its first cluster).
pub fn api_server(kubeconfig: &Path) -> SocketAddr {
    let kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let server = kc["clusters"][0]["cluster"]["server"].as_str().unwrap().trim_start_matches("https://").to_string();
    server.parse().unwrap()
}
