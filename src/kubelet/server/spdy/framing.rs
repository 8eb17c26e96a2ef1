//! SPDY/3.1, the server side, as Kubernetes' streams use it (moby/spdystream): the API server
//! upgrades `kubectl exec`, `attach` and `port-forward` to SPDY towards a kubelet and opens
//! streams on it. [`Decoder`]/[`Encoder`] are the framing (pure); [`session`] runs a
//! connection: every stream the client opens is answered (SYN_REPLY) and handed over with its
//! headers, its data arrives on a channel, its writes go out in order, pings are echoed.
//!
//! Header blocks are zlib-compressed, one stream per direction for the whole connection; the
//! client's use the SPDY/3 dictionary (`dictionary.bin`, the spec's bytes as spdystream
//! has them), ours are plain zlib (a reader with a dictionary accepts a stream without one).
//! No flow control: spdystream neither sends nor honours WINDOW_UPDATE.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::collections::HashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

const DICTIONARY: &[u8] = include_bytes!("dictionary.bin");
/// The most a header block may decompress to, and the most frames a stream may have waiting.
const MAX_HEADERS: usize = 64 * 1024;
const MAX_PAIRS: usize = 64;
/// The largest frame read (SPDY allows 16 MiB; the API server sends 32 KiB chunks).
const MAX_FRAME: usize = 1024 * 1024;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status CANCEL.
pub const CANCEL: u32 = 5;

/// A frame as the server cares about it.
#[derive(Debug, PartialEq)]
pub enum Frame {
    SynStream {
        id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    Data {
        id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    RstStream {
        id: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    /// SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY from a client: nothing to do.
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("a frame of {0} bytes is more than this server takes")]
    TooLarge(usize),
    #[error("a header block is malformed: {0}")]
    Headers(String),
    #[error("an unsupported SPDY version {0}")]
    Version(u16),
}

/// Reads frames, with the connection's one decompressor.
pub struct Decoder {
    inflate: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self { inflate: Decompress::new(true) }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Decoder {
    /// One frame from the front of `buf` and how many bytes it took (`None`: not all there yet).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, Error> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let len = (u32_at(buf, 4) & 0x00ff_ffff) as usize;
        if len > MAX_FRAME {
            return Err(Error::TooLarge(len));
        }
        if buf.len() < 8 + len {
            return Ok(None);
        }
        let flags = buf[4];
        let payload = &buf[8..8 + len];
        let frame = if buf[0] & 0x80 == 0 {
            Frame::Data { id: u32_at(buf, 0) & 0x7fff_ffff, fin: flags & FLAG_FIN != 0, data: payload.to_vec() }
        } else {
            let version = u16::from_be_bytes([buf[0] & 0x7f, buf[1]]);
            if version != 3 {
                return Err(Error::Version(version));
            }
            match u16::from_be_bytes([buf[2], buf[3]]) {
                SYN_STREAM if payload.len() >= 10 => Frame::SynStream {
                    id: u32_at(payload, 0) & 0x7fff_ffff,
                    headers: self.headers(&payload[10..])?,
                    fin: flags & FLAG_FIN != 0,
                },
                RST_STREAM if payload.len() >= 8 => Frame::RstStream { id: u32_at(payload, 0) & 0x7fff_ffff },
                PING if payload.len() >= 4 => Frame::Ping { id: u32_at(payload, 0) },
                GOAWAY => Frame::GoAway,
                // A header block we must still feed through the shared decompressor.
                SYN_REPLY | 8 if payload.len() >= 4 => {
                    self.headers(&payload[4..])?;
                    Frame::Ignored
                }
                _ => Frame::Ignored,
            }
        };
        Ok(Some((frame, 8 + len)))
    }

    /// Decompresses and decodes a name/value block.
    fn headers(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::with_capacity(512);
        let mut input = block;
        loop {
            let before = (self.inflate.total_in(), self.inflate.total_out());
            out.reserve(4096);
            let result = self.inflate.decompress_vec(input, &mut out, FlushDecompress::Sync);
            // What was read counts even when the stream stops to ask for its dictionary.
            let used = (self.inflate.total_in() - before.0) as usize;
            input = &input[used.min(input.len())..];
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(DICTIONARY).map_err(|e| Error::Headers(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(Error::Headers(e.to_string())),
            }
            if out.len() > MAX_HEADERS {
                return Err(Error::Headers("too large".into()));
            }
            let progressed = used > 0 || self.inflate.total_out() > before.1;
            if input.is_empty() || !progressed {
                break;
            }
        }
        pairs(&out)
    }
}

/// A decompressed name/value block: count, then (length, name, length, value) each.
fn pairs(b: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let bad = |what: &str| Error::Headers(what.to_string());
    if b.len() < 4 {
        return Err(bad("no count"));
    }
    let count = u32_at(b, 0) as usize;
    if count > MAX_PAIRS {
        return Err(bad("too many headers"));
    }
    let mut at = 4;
    let read = |at: &mut usize| -> Result<String, Error> {
        if b.len() < *at + 4 {
            return Err(bad("truncated"));
        }
        let n = u32_at(b, *at) as usize;
        *at += 4;
        if b.len() < *at + n {
            return Err(bad("truncated"));
        }
        let s = String::from_utf8_lossy(&b[*at..*at + n]).into_owned();
        *at += n;
        Ok(s)
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let name = read(&mut at)?;
        let value = read(&mut at)?;
        out.push((name.to_ascii_lowercase(), value));
    }
    Ok(out)
}

/// Writes frames, with the connection's one compressor.
pub struct Encoder {
    deflate: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self { deflate: Compress::new(Compression::default(), true) }
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&(0x8003u16).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(&((u32::from(flags) << 24) | payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

impl Encoder {
    /// SYN_REPLY for stream `id`, with no headers.
    fn syn_reply(&mut self, id: u32) -> Vec<u8> {
        let mut block = Vec::with_capacity(64);
        let empty = 0u32.to_be_bytes();
        let _ = self.deflate.compress_vec(&empty, &mut block, FlushCompress::Sync);
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&block);
        control(SYN_REPLY, 0, &payload)
    }

    /// DATA on stream `id` (FIN with `fin`).
    pub fn data(id: u32, data: &[u8], fin: bool) -> Vec<u8> {
        let mut f = Vec::with_capacity(8 + data.len());
        f.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
        let flags = if fin { FLAG_FIN } else { 0 };
        f.extend_from_slice(&((u32::from(flags) << 24) | data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        f
    }

    fn rst(id: u32, status: u32) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&status.to_be_bytes());
        control(RST_STREAM, 0, &payload)
    }

    fn ping(id: u32) -> Vec<u8> {
        control(PING, 0, &id.to_be_bytes())
    }
}

/// Frames queued for the connection's writer at most: a client that does not read holds the
/// writers back (they await room) instead of filling memory.
const OUT_FRAMES: usize = 64;
/// Streams one connection may have open at once (exec opens five, port-forward two per port);
/// more are reset.
pub const MAX_STREAMS: usize = 128;

/// What the writer sends, in order.
enum Out {
    Reply(u32),
    Data(u32, Vec<u8>, bool),
    Reset(u32),
    Ping(u32),
}

/// A stream the client opened: its headers, its data, and a way to answer on it.
pub struct Stream {
    pub id: u32,
    pub headers: HashMap<String, String>,
    /// The client's data; closed when it finishes (FIN) or resets the stream.
    pub inbound: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Out>,
}

/// Writes on a stream (cloneable, so a reader and a writer of one stream can split).
#[derive(Clone)]
pub struct Outbound {
    id: u32,
    out: mpsc::Sender<Out>,
}

impl Stream {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn outbound(&self) -> Outbound {
        Outbound { id: self.id, out: self.out.clone() }
    }
}

impl Outbound {
    /// Sends `data` (in frames of at most 32 KiB, as spdystream does), waiting while the
    /// connection's queue is full (false: the connection is gone).
    pub async fn write(&self, data: &[u8]) -> bool {
        for chunk in data.chunks(32 * 1024) {
            if self.out.send(Out::Data(self.id, chunk.to_vec(), false)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Half-closes the stream (an empty DATA with FIN).
    pub async fn finish(&self) {
        let _ = self.out.send(Out::Data(self.id, Vec::new(), true)).await;
    }

    pub async fn reset(&self) {
        let _ = self.out.send(Out::Reset(self.id)).await;
    }
}

/// Runs a SPDY connection on `io`: returns the streams the client opens, in order; the channel
/// closes when the connection ends.
pub fn session<IO>(io: IO) -> mpsc::Receiver<Stream>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(OUT_FRAMES);
    let (streams_tx, streams_rx) = mpsc::channel::<Stream>(64);
    tokio::spawn(async move {
        let mut enc = Encoder::default();
        while let Some(o) = out_rx.recv().await {
            let bytes = match o {
                Out::Reply(id) => enc.syn_reply(id),
                Out::Data(id, d, fin) => Encoder::data(id, &d, fin),
                Out::Reset(id) => Encoder::rst(id, CANCEL),
                Out::Ping(id) => Encoder::ping(id),
            };
            if writer.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    tokio::spawn(async move {
        let mut dec = Decoder::default();
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut inbound: HashMap<u32, mpsc::Sender<Vec<u8>>> = HashMap::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            // Every whole frame in the buffer first.
            loop {
                match dec.parse(&buf) {
                    Ok(Some((frame, used))) => {
                        buf.drain(..used);
                        if !dispatch(frame, &out_tx, &streams_tx, &mut inbound).await {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "SPDY connection refused a frame; closing it");
                        return;
                    }
                }
            }
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    streams_rx
}

/// Acts on one frame; false when the connection is over.
async fn dispatch(
    frame: Frame,
    out: &mpsc::Sender<Out>,
    streams: &mpsc::Sender<Stream>,
    inbound: &mut HashMap<u32, mpsc::Sender<Vec<u8>>>,
) -> bool {
    match frame {
        Frame::SynStream { id, headers, fin } => {
            if inbound.len() >= MAX_STREAMS {
                tracing::debug!(id, "SPDY connection has too many streams open; resetting a new one");
                return out.send(Out::Reset(id)).await.is_ok();
            }
            if out.send(Out::Reply(id)).await.is_err() {
                return false;
            }
            let (tx, rx) = mpsc::channel(64);
            if !fin {
                inbound.insert(id, tx);
            }
            let stream = Stream { id, headers: headers.into_iter().collect(), inbound: rx, out: out.clone() };
            streams.send(stream).await.is_ok()
        }
        Frame::Data { id, fin, data } => {
            if let Some(tx) = inbound.get(&id) {
                if !data.is_empty() && tx.send(data).await.is_err() {
                    inbound.remove(&id);
                }
                if fin {
                    inbound.remove(&id);
                }
            }
            true
        }
        Frame::RstStream { id } => {
            inbound.remove(&id);
            true
        }
        Frame::Ping { id } => {
            let _ = out.send(Out::Ping(id)).await;
            true
        }
        Frame::GoAway => false,
        Frame::Ignored => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's SYN_STREAM as spdystream writes it: headers compressed with the dictionary.
    fn syn_stream(deflate: &mut Compress, id: u32, headers: &[(&str, &str)], fin: bool) -> Vec<u8> {
        let mut block = (headers.len() as u32).to_be_bytes().to_vec();
        for (n, v) in headers {
            block.extend_from_slice(&(n.len() as u32).to_be_bytes());
            block.extend_from_slice(n.as_bytes());
            block.extend_from_slice(&(v.len() as u32).to_be_bytes());
            block.extend_from_slice(v.as_bytes());
        }
        let mut compressed = Vec::with_capacity(1024);
        deflate.compress_vec(&block, &mut compressed, FlushCompress::Sync).unwrap();
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&0u32.to_be_bytes());
        payload.extend_from_slice(&[0, 0]);
        payload.extend_from_slice(&compressed);
        control(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &payload)
    }

    fn client_deflate() -> Compress {
        let mut c = Compress::new(Compression::best(), true);
        c.set_dictionary(DICTIONARY).unwrap();
        c
    }

    #[test]
    fn a_clients_streams_decode_with_the_shared_dictionary_context() {
        let mut deflate = client_deflate();
        let mut wire = syn_stream(&mut deflate, 1, &[("streamtype", "error")], false);
        wire.extend(syn_stream(&mut deflate, 3, &[("streamType", "stdout"), ("port", "80")], false));
        wire.extend(Encoder::data(3, b"hello", true));
        wire.extend(Encoder::ping(1));
        let mut dec = Decoder::default();
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some((f, used)) = dec.parse(&wire[at..]).unwrap() {
            frames.push(f);
            at += used;
        }
        assert_eq!(at, wire.len());
        assert_eq!(
            frames[0],
            Frame::SynStream { id: 1, headers: vec![("streamtype".into(), "error".into())], fin: false }
        );
        assert_eq!(
            frames[1],
            Frame::SynStream {
                id: 3,
                headers: vec![("streamtype".into(), "stdout".into()), ("port".into(), "80".into())],
                fin: false
            },
            "names are lowercased; the second block reuses the first's context"
        );
        assert_eq!(frames[2], Frame::Data { id: 3, fin: true, data: b"hello".to_vec() });
        assert_eq!(frames[3], Frame::Ping { id: 1 });
        // Half a frame waits for the rest.
        assert!(Decoder::default().parse(&wire[..5]).unwrap().is_none());
    }

    #[test]
    fn our_replies_decode_with_a_dictionary_reader() {
        let mut enc = Encoder::default();
        let mut inflate = Decompress::new(true);
        for id in [1u32, 3] {
            let reply = enc.syn_reply(id);
            assert_eq!(u32_at(&reply, 8), id);
            let mut out = Vec::with_capacity(64);
            inflate.decompress_vec(&reply[12..], &mut out, FlushDecompress::Sync).unwrap();
            assert_eq!(out, 0u32.to_be_bytes(), "an empty header block");
        }
    }

    #[test]
    fn hostile_frames_are_refused_not_allocated() {
        let mut huge = control(SYN_STREAM, 0, &[]);
        huge[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(Decoder::default().parse(&huge), Err(Error::TooLarge(_))));
        let mut deflate = client_deflate();
        let many: Vec<(String, String)> = (0..100).map(|i| (format!("h{i}"), "v".into())).collect();
        let refs: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert!(Decoder::default().parse(&syn_stream(&mut deflate, 1, &refs, false)).is_err());
    }

    #[tokio::test]
    async fn a_session_answers_streams_routes_data_and_echoes_pings() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut streams = session(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut deflate = client_deflate();
        cw.write_all(&syn_stream(&mut deflate, 1, &[("streamtype", "stdin")], false)).await.unwrap();
        cw.write_all(&Encoder::data(1, b"abc", true)).await.unwrap();
        cw.write_all(&Encoder::ping(7)).await.unwrap();
        let mut s = streams.recv().await.unwrap();
        assert_eq!(s.header("streamtype"), Some("stdin"));
        assert_eq!(s.inbound.recv().await, Some(b"abc".to_vec()));
        assert_eq!(s.inbound.recv().await, None, "FIN closes it");
        s.outbound().write(b"out").await;
        s.outbound().finish().await;
        // What the client reads: SYN_REPLY, the ping back, then the data.
        let mut got = vec![0u8; 4096];
        let mut all = Vec::new();
        while all.len() < 12 + 12 + 8 + 3 + 8 {
            let n = cr.read(&mut got).await.unwrap();
            all.extend_from_slice(&got[..n]);
        }
        assert_eq!(&all[0..4], &[0x80, 0x03, 0x00, 0x02], "SYN_REPLY first");
        assert!(all.windows(4).any(|w| w == [0x80, 0x03, 0x00, 0x06]), "the ping echoed");
        assert!(all.windows(3).any(|w| w == b"out"));
    }
}
