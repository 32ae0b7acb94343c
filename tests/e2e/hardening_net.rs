//! Attacks from the network, replayed against the real server: connections
//! that never finish their request (or never send one).

use crate::support::Server;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A hang guard, never a measure: every wait below ends far sooner.
const GUARD: Duration = Duration::from_secs(60);

/// A raw connection to the server, with a hang guard on reads.
fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream
}

/// Reads until the server closes the connection; returns what it sent.
/// Fails if it is still open when the hang guard runs out.
fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return String::from_utf8_lossy(&received).into_owned(),
            Err(e) => panic!("the server kept the connection open ({e}); received so far: {received:?}"),
        }
    }
}

/// Whether the server has closed `stream` by now (without waiting).
fn closed_now(mut stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    stream.set_nonblocking(false).unwrap();
    closed
}

/// A whole `GET /health` on a raw connection → the response head and body.
fn raw_health(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\n\r\n").unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("\"ok\"}") {
        let n = stream.read(&mut buf).expect("no answer to /health");
        assert!(n > 0, "the connection closed before /health was answered: {received:?}");
        received.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

#[test]
fn half_sent_request_heads_are_cut_off_after_the_header_timeout() {
    let server = Server::start(&["--header-read-timeout-secs", "2", "--idle-timeout-secs", "600"]);
    let mut slow: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = connect(&server);
            stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\nX-Slow: ").unwrap();
            stream
        })
        .collect();
    for stream in &mut slow {
        let answer = read_until_closed(stream);
        assert!(!answer.contains("200 OK"), "{answer}");
    }
    assert!(raw_health(&mut connect(&server)).starts_with("HTTP/1.1 200"));
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = Server::start(&["--idle-timeout-secs", "2", "--header-read-timeout-secs", "600"]);
    // One that never sends anything.
    let mut silent = connect(&server);
    // One kept alive after a request.
    let mut kept = connect(&server);
    let answer = raw_health(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200") && !answer.to_ascii_lowercase().contains("connection: close"));
    assert_eq!(read_until_closed(&mut silent), "");
    assert_eq!(read_until_closed(&mut kept), "");
}

#[test]
fn a_request_body_that_never_arrives_is_answered_408() {
    let server = Server::start(&["--request-body-timeout-secs", "2"]);
    let mut stream = connect(&server);
    stream
        .write_all(
            b"POST /cheq/transactions/abc?accept HTTP/1.1\r\nHost: plinth\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pay",
        )
        .unwrap();
    let answer = read_until_closed(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
}

#[test]
fn at_the_connection_cap_new_clients_wait_until_slow_ones_are_cut_off() {
    let server = Server::start(&["--max-connections", "8", "--header-read-timeout-secs", "3"]);
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut stream = connect(&server);
            stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\n").unwrap();
            stream
        })
        .collect();
    // The ninth waits in the backlog: it is answered only once a slow one
    // has been cut off, and then it is.
    let answer = raw_health(&mut connect(&server));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let cut_off = slow.iter().filter(|s| closed_now(s)).count();
    assert!(cut_off >= 1, "/health was served while all 8 slow connections were still open");
    for stream in &mut slow {
        read_until_closed(stream);
    }
    assert!(raw_health(&mut connect(&server)).starts_with("HTTP/1.1 200"));
}
