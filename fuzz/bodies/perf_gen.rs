//! Messages for the `perf_server` and `perf_client` bodies, built from the fuzzer's bytes:
//! mostly well-formed (so that the machines get far into a test), with the fuzzer choosing
//! values, lengths and damage.
#![allow(dead_code)]

use crate::input::Input;
use zcnet_tools::perf::proto::{Protocol, StreamResults, TestParams, TestResults};

/// Parameters with small, mostly valid values.
pub fn params(inp: &mut Input<'_>) -> TestParams {
    let flags = inp.u8();
    let mut p = TestParams {
        protocol: if flags & 1 != 0 {
            Protocol::Udp
        } else {
            Protocol::Tcp
        },
        parallel: u32::from(inp.u8() % 6),
        time: u32::from(inp.u8() % 4),
        omit: u32::from(inp.u8() % 3),
        reverse: flags & 2 != 0,
        bidirectional: flags & 4 != 0,
        udp_counters_64bit: flags & 8 != 0,
        ..TestParams::default()
    };
    p.len = match inp.u8() % 4 {
        0 => 0,
        1 => 1460,
        2 => 8,
        _ => inp.u32(),
    };
    if flags & 16 != 0 {
        p.title = Some("t".repeat(inp.index(40)));
    }
    if flags & 32 != 0 {
        p.num = inp.u64() >> 8;
    }
    p
}

/// The JSON text of a parameter block: `params` printed, or raw bytes.
pub fn params_json(inp: &mut Input<'_>) -> Vec<u8> {
    if inp.one_in(8) {
        inp.small_bytes(48).to_vec()
    } else {
        params(inp).to_json().to_string().into_bytes()
    }
}

/// Results naming `ids` (or, sometimes, other ids), with fuzzer-chosen numbers.
pub fn results(inp: &mut Input<'_>, ids: &[i64]) -> TestResults {
    let mut ids = ids.to_vec();
    match inp.u8() % 8 {
        0 => ids.push(i64::from(inp.u8())),
        1 => {
            ids.pop();
        }
        _ => {}
    }
    TestResults {
        cpu_util_total: f64::from(inp.u8()) / 3.0,
        sender_has_retransmits: i64::from(inp.u8() % 3) - 1,
        streams: ids
            .iter()
            .map(|&id| StreamResults {
                id,
                bytes: inp.u64() >> 16,
                retransmits: -1,
                packets: i64::from(inp.u16()),
                ..StreamResults::default()
            })
            .collect(),
        ..TestResults::default()
    }
}

/// A frame around `body`: its true length, or (sometimes) a wrong one.
pub fn frame(inp: &mut Input<'_>, body: &[u8]) -> Vec<u8> {
    let mut len = body.len() as u32;
    if inp.one_in(16) {
        len = match inp.u8() % 3 {
            0 => 0,
            1 => len + 1 + u32::from(inp.u8()),
            _ => u32::MAX - u32::from(inp.u8()),
        };
    }
    let mut f = len.to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}
