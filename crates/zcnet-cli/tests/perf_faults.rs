//! The server against a scripted client (no iperf3 needed): every fault ends that client's test
//! with one line on stderr and a `SERVER_ERROR` or `ACCESS_DENIED` where iperf3 sends one, and
//! the server then serves the next, good client. And the client against things that are not
//! iperf3 servers: it fails within seconds with a clear line, never hangs.

mod perf_common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use perf_common::{zcnet_perf, Proc};
use zcnet_tools::perf::proto::{encode_frame, Cookie, State, TestParams, MAX_PARAMS_LEN};

const LIMIT: Duration = Duration::from_secs(30);

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

fn read_byte(s: &mut TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    s.read_exact(&mut b).ok().map(|()| b[0])
}

/// Reads a `SERVER_ERROR` and its error number.
fn read_server_error(s: &mut TcpStream) -> i32 {
    assert_eq!(
        read_byte(s),
        Some(State::ServerError.to_byte()),
        "no SERVER_ERROR"
    );
    let mut n = [0u8; 8];
    s.read_exact(&mut n).expect("the error number and errno");
    i32::from_be_bytes([n[0], n[1], n[2], n[3]])
}

fn cookie() -> Cookie {
    Cookie::from_random(&[7; 36])
}

/// Sends the cookie and waits for `PARAM_EXCHANGE`.
fn hello(s: &mut TcpStream, c: &Cookie) {
    s.write_all(c.as_bytes()).expect("cookie");
    assert_eq!(read_byte(s), Some(State::ParamExchange.to_byte()));
}

/// A good test against the server must still work: zcnet perf -n 1M.
fn good_client(port: u16) {
    let port = port.to_string();
    let args = ["-c", "127.0.0.1", "-p", &port, "-n", "1M"];
    let (client, st) = perf_common::run(&zcnet_perf(), &args, LIMIT);
    assert!(st.success(), "the next client failed: {}", client.stderr());
    assert!(
        client.stdout().contains("iperf Done."),
        "{}",
        client.stdout()
    );
}

/// Waits until the server's stderr has `n` lines, and returns them.
fn lines(server: &Proc, n: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let err = server.stderr();
        let got: Vec<String> = err.lines().map(str::to_string).collect();
        if got.len() >= n || Instant::now() > until {
            assert_eq!(got.len(), n, "stderr:\n{err}");
            return got;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `fault` against a fresh server, checks the server's one line contains `says`, then
/// serves a good client.
fn survives(server_args: &[&str], says: &str, fault: impl FnOnce(u16)) {
    let (server, port) = perf_common::zcnet_server(server_args);
    fault(port);
    let line = lines(&server, 1).remove(0);
    assert!(line.contains(says), "{line:?} does not say {says:?}");
    assert!(
        line.starts_with("zcnet perf: test #1 from 127.0.0.1"),
        "{line}"
    );
    good_client(port);
    assert_eq!(server.stderr().lines().count(), 1, "{}", server.stderr());
}

#[zcnet_testkit::test]
fn wrong_cookie() {
    survives(&[], "bad cookie", |port| {
        let mut s = connect(port);
        s.write_all(&[b'A'; 37]).expect("write");
        assert_eq!(read_server_error(&mut s), 106, "IERECVCOOKIE");
    });
}

#[zcnet_testkit::test]
fn garbage_on_the_control_port() {
    survives(&[], "bad cookie", |port| {
        let mut s = connect(port);
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n")
            .expect("write");
        assert_eq!(read_server_error(&mut s), 106);
    });
}

#[zcnet_testkit::test]
fn half_sent_cookie_times_out() {
    survives(
        &["--step-timeout", "0.5"],
        "timed out waiting for the cookie",
        |port| {
            let mut s = connect(port);
            s.write_all(b"abcdefgh").expect("write");
            assert_eq!(read_server_error(&mut s), 106);
        },
    );
}

#[zcnet_testkit::test]
fn parameter_block_too_long() {
    survives(&[], "over the limit", |port| {
        let mut s = connect(port);
        hello(&mut s, &cookie());
        s.write_all(&100_000u32.to_be_bytes()).expect("write");
        assert_eq!(read_server_error(&mut s), 114, "IERECVPARAMS");
    });
}

#[zcnet_testkit::test]
fn parameter_block_not_json() {
    survives(&[], "not JSON", |port| {
        let mut s = connect(port);
        hello(&mut s, &cookie());
        s.write_all(&[0, 0, 0, 5]).expect("write");
        s.write_all(b"hello").expect("write");
        assert_eq!(read_server_error(&mut s), 114);
    });
}

#[zcnet_testkit::test]
fn unsupported_option_is_named() {
    survives(&[], "window", |port| {
        let mut s = connect(port);
        hello(&mut s, &cookie());
        let p = TestParams {
            window: 1 << 20,
            ..TestParams::default()
        };
        s.write_all(&p.to_frame().expect("frame")).expect("write");
        assert_eq!(read_server_error(&mut s), 13, "IEUNIMP");
    });
}

/// Sends a valid parameter block for one stream and waits for `CREATE_STREAMS`.
fn params(s: &mut TcpStream) {
    let p = TestParams {
        time: 1,
        ..TestParams::default()
    };
    let frame = encode_frame(&p.to_json(), MAX_PARAMS_LEN).expect("frame");
    s.write_all(&frame).expect("write");
    assert_eq!(read_byte(s), Some(State::CreateStreams.to_byte()));
}

#[zcnet_testkit::test]
fn data_stream_without_cookie_is_denied() {
    let (server, port) = perf_common::zcnet_server(&[]);
    let mut ctrl = connect(port);
    hello(&mut ctrl, &cookie());
    params(&mut ctrl);
    let mut data = connect(port);
    data.shutdown(std::net::Shutdown::Write).expect("shutdown");
    assert_eq!(read_byte(&mut data), Some(State::AccessDenied.to_byte()));
    let mut wrong = connect(port);
    wrong
        .write_all(Cookie::from_random(&[9; 36]).as_bytes())
        .expect("write");
    assert_eq!(read_byte(&mut wrong), Some(State::AccessDenied.to_byte()));
    drop(ctrl);
    let got = lines(&server, 3);
    assert!(got[0].contains("sent no cookie"), "{got:?}");
    assert!(got[1].contains("not this test's"), "{got:?}");
    assert!(
        got[2].contains("peer closed the control connection"),
        "{got:?}"
    );
    good_client(port);
}

#[zcnet_testkit::test]
fn client_vanishing_mid_test() {
    let (server, port) = perf_common::zcnet_server(&[]);
    let port_s = port.to_string();
    let mut client = Proc::spawn(
        &zcnet_perf(),
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port_s,
            "-t",
            "20",
            "-i",
            "0.2",
            "-R",
        ],
    );
    server.wait_for(" sec ", Duration::from_secs(10));
    client.kill();
    let line = lines(&server, 1).remove(0);
    assert!(line.contains("test #1"), "{line}");
    good_client(port);
}

/// `-s -J`: a test that fails still prints its one JSON document, with `"error"`, as iperf3
/// does (scripts read one document per test), and the server goes on.
#[zcnet_testkit::test]
fn a_failed_test_still_prints_its_json_document() {
    let (server, port) = perf_common::zcnet_server(&["-J"]);
    let port_s = port.to_string();
    let mut client = Proc::spawn(
        &zcnet_perf(),
        &["-c", "127.0.0.1", "-p", &port_s, "-t", "20", "-R"],
    );
    // The test runs once the server has its streams; then the client vanishes.
    std::thread::sleep(Duration::from_millis(1500));
    client.kill();
    lines(&server, 1);
    let until = Instant::now() + Duration::from_secs(10);
    let doc = loop {
        let out = server.stdout();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(out.trim()) {
            break v;
        }
        assert!(
            Instant::now() < until,
            "no JSON document on stdout: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        doc["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{doc}"
    );
    assert!(
        doc.get("start").is_some() && doc["intervals"].is_array(),
        "{doc}"
    );
}

#[zcnet_testkit::test]
fn second_client_while_a_test_runs_is_denied() {
    let (server, port) = perf_common::zcnet_server(&[]);
    let port_s = port.to_string();
    let mut first = Proc::spawn(
        &zcnet_perf(),
        &["-c", "127.0.0.1", "-p", &port_s, "-t", "2", "-i", "0.2"],
    );
    server.wait_for(" sec ", Duration::from_secs(10));
    let mut second = connect(port);
    assert_eq!(read_byte(&mut second), Some(State::AccessDenied.to_byte()));
    // And a zcnet client says so.
    let (busy, st) = perf_common::run(&zcnet_perf(), &["-c", "127.0.0.1", "-p", &port_s], LIMIT);
    assert_eq!(st.code(), Some(1));
    assert!(busy.stderr().contains("busy"), "{}", busy.stderr());
    assert!(
        first.wait(LIMIT).success(),
        "the running test was disturbed"
    );
    assert!(server.stderr().contains("ACCESS_DENIED"));
}

/// Runs the client against `port`; it must fail within `within` with `says` on stderr.
fn client_fails(port: u16, within: Duration, says: &str) {
    let t = Instant::now();
    let port = port.to_string();
    let (client, st) = perf_common::run(&zcnet_perf(), &["-c", "127.0.0.1", "-p", &port], LIMIT);
    let took = t.elapsed();
    assert_eq!(st.code(), Some(1), "{}", client.stdout());
    let err = client.stderr();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(says), "{err:?} does not say {says:?}");
    assert!(took < within, "took {took:?}");
}

#[zcnet_testkit::test]
fn client_to_a_closed_port_fails_fast() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    client_fails(port, Duration::from_secs(3), "nothing listens there");
}

/// A service that accepts, then answers every connection with `reply` (or nothing).
fn fake_service(reply: &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.write_all(reply);
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

/// `-c -J` against a service that is not iperf3: the document that reports the failure still
/// has its `start` (whom it connected to), as iperf3's does, not `null`.
#[zcnet_testkit::test]
fn a_client_that_fails_early_still_says_whom_it_connected_to() {
    let port = fake_service(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n").to_string();
    let (client, st) = perf_common::run(
        &zcnet_perf(),
        &["-c", "127.0.0.1", "-p", &port, "-J"],
        LIMIT,
    );
    assert_eq!(st.code(), Some(1));
    let doc: serde_json::Value =
        serde_json::from_str(client.stdout().trim()).expect("one JSON document");
    assert!(doc["error"].as_str().is_some(), "{doc}");
    assert_eq!(doc["start"]["connecting_to"]["host"], "127.0.0.1", "{doc}");
    assert!(doc["start"]["connected"].is_array(), "{doc}");
}

#[zcnet_testkit::test]
fn client_to_a_service_that_is_not_iperf3_fails_fast() {
    let ssh = fake_service(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n");
    client_fails(ssh, Duration::from_secs(3), "no iperf3 control message");
}

#[zcnet_testkit::test]
fn client_to_a_silent_service_gives_up() {
    let silent = fake_service(b"");
    client_fails(
        silent,
        Duration::from_secs(8),
        "timed out waiting for PARAM_EXCHANGE",
    );
}

zcnet_testkit::main!();
