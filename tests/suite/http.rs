//! The server tests' HTTP/1.1 client over `TcpStream` (one request per connection), and the
//! server they drive: `llama31_tiny` with the `llama3_style` tokenizer on Flex, in process.
//! The `try_` forms report a broken answer as an error (the fuzz counts them); the others panic.

use burn::tensor::{DType, Device};
use burn_rope_pool::serve::{ServeOptions, ServedModel, Server};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The tiny model and its tokenizer, on Flex in f32.
pub fn tiny_model() -> ServedModel {
    ServedModel::load(
        &root().join("tests/models/llama31_tiny"),
        Some(&root().join("tests/text/tokenizers/llama3_style")),
        &Device::flex(),
        DType::F32,
    )
    .unwrap()
}

/// The tiny model served on a free port of 127.0.0.1 with `options`.
pub fn server(options: ServeOptions) -> Server {
    Server::start(tiny_model(), ServeOptions { port: 0, ..options }).unwrap()
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn io_err(what: &str) -> std::io::Error {
    std::io::Error::other(what.to_string())
}

/// Writes a request (`Connection: close`) with a raw body.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    Ok(stream)
}

/// Reads the status line and headers.
pub fn read_head(reader: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io_err("connection closed before the status line"));
    }
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io_err(&format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(io_err("connection closed in the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l
            .split_once(':')
            .ok_or_else(|| io_err(&format!("bad header {l:?}")))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    Ok((status, headers))
}

/// Reads one chunk of a chunked body (`None`: the last).
pub fn read_chunk(reader: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io_err("connection closed in a chunked body"));
    }
    let size = usize::from_str_radix(line.trim(), 16)
        .map_err(|_| io_err(&format!("bad chunk size {line:?}")))?;
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data)?;
    data.truncate(size);
    Ok((size > 0).then_some(data))
}

/// One request and its whole answer (a chunked body joined).
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut reader = BufReader::new(send(addr, method, path, headers, body)?);
    let (status, headers) = read_head(&mut reader)?;
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut bytes = Vec::new();
    match chunked {
        true => {
            while let Some(chunk) = read_chunk(&mut reader)? {
                bytes.extend(chunk);
            }
        }
        false => {
            reader.read_to_end(&mut bytes)?;
        }
    }
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8(bytes).map_err(|e| io_err(&e.to_string()))?,
    })
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    try_request(addr, method, path, headers, body.as_bytes()).unwrap()
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    request(addr, "POST", path, &[], &body.to_string())
}

pub fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[], "")
}

/// A metric's value (the first line of that name and labels).
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let text = get(addr, "/metrics").body;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Waits until `metric == value` (10 s at most).
pub fn wait_for(addr: SocketAddr, name: &str, value: f64) {
    let start = Instant::now();
    while metric(addr, name) != value {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name} stayed at {}, not {value}",
            metric(addr, name)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
