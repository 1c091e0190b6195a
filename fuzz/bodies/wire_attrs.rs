//! Attribute iteration with every typed accessor, nests, and message splitting.
//! Shared by fuzz/fuzz_targets/wire_attrs.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::wire::{attr_path_at, messages, Attrs};

pub fn run(data: &[u8]) {
    for a in Attrs::new(data).flatten() {
        let _ = (
            a.u8(),
            a.u16(),
            a.u32(),
            a.u64(),
            a.uint(),
            a.str(),
            a.u32_array(),
        );
        for n in a.nested().flatten() {
            let _ = n.nested().count();
        }
    }
    let _ = attr_path_at(data, 20, data.len() / 2);
    for m in messages(data).flatten() {
        let _ = Attrs::new(m.payload).count();
    }
}
