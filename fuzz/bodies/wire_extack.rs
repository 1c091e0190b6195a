//! NLMSG_ERROR / NLMSG_DONE payloads with extended ACKs, and whole reply datagrams through
//! the collector (sequence checks, error naming against a request).
//! Shared by fuzz/fuzz_targets/wire_extack.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::conn::ReplyCollector;
use zcnet_netlink::netdev::OP_BIND_RX;
use zcnet_netlink::wire::{parse_done, parse_error, Extack};

pub fn run(data: &[u8]) {
    let flags = data.first().map_or(0, |f| u16::from(*f) << 8);
    let body = data.get(1..).unwrap_or(&[]);
    let _ = parse_error(flags, body);
    let _ = parse_done(flags, body);
    let _ = Extack::parse(body);
    let (req, dgram) = body.split_at(body.len().min(64));
    let mut c = ReplyCollector::new(OP_BIND_RX, "ifindex 1", req, 1, 20, flags & 0x100 != 0);
    if let Err(e) = c.feed(dgram) {
        let _ = e.to_string();
    }
}
