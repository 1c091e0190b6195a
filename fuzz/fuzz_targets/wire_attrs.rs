#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::wire::{attr_path_at, messages, Attrs};

// Attribute iteration with every typed accessor, nests, and message splitting.
fuzz_target!(|data: &[u8]| {
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
});
