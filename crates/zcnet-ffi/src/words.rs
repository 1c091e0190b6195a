//! The C ABI's voice: the terms of the library's messages as a C caller acts on them. A setting
//! is the field of `zcnet_rx_config` or `zcnet_tx_config` that sets it (`zcnet_rx_config.area_len`),
//! a mode is its constant (`ZCNET_TX_URING_ZC`), a kind of memory is the `kind` of
//! `zcnet_region_new`, and a NIC change (which the ABI does not make) is the `zcnet` command
//! that makes it. Settings the ABI has no field for keep the library's names.

use zcnet::text::{Call, Field, Library, Term, Words};
use zcnet::Voice;

/// The C caller's words ([`zcnet_last_error`](crate::zcnet_last_error),
/// [`zcnet_last_remedy`](crate::zcnet_last_remedy), the receiver's fallbacks, the probe's JSON).
#[derive(Debug, Clone, Copy, Default)]
pub struct C;

impl Words for C {
    fn term(&self, t: &Term) -> String {
        match t {
            Term::Field(f) => match field(*f) {
                Some(s) => s.to_string(),
                None => Library.term(t),
            },
            Term::TxMode { name, .. } => constant("ZCNET_TX_", name),
            Term::RxMode { name, .. } => constant("ZCNET_RX_", name),
            Term::Memory(m) => format!("zcnet_region_new(\"{}\", ...)", m.name()),
            Term::Call(c) => call(c).unwrap_or_else(|| Library.term(t)),
            other => Library.term(other),
        }
    }
}

impl Voice for C {}

/// `ZCNET_TX_` and `uring-zc` give `ZCNET_TX_URING_ZC`.
fn constant(prefix: &str, name: &str) -> String {
    format!("{prefix}{}", name.to_uppercase().replace('-', "_"))
}

fn field(f: Field) -> Option<&'static str> {
    Some(match f {
        Field::RxAreaLen => "zcnet_rx_config.area_len",
        Field::RxIface => "zcnet_rx_config.iface",
        Field::RxQueue => "zcnet_rx_config.queue (with ZCNET_RX_QUEUE in flags)",
        Field::RxBuffers => "zcnet_rx_config.buffers",
        Field::RxBufSize => "zcnet_rx_config.buf_size",
        Field::RxMode => "zcnet_rx_config.mode",
        Field::RxDmabuf => "a region of kind \"cuda\" or \"udmabuf\" (zcnet_receiver_new's area)",
        Field::TxBuffers | Field::TxInflight => "zcnet_tx_config.inflight",
        Field::TxBufSize => "zcnet_tx_config.buf_size",
        Field::TxMode => "zcnet_tx_config.mode",
        Field::TxDmabuf => "a region of kind \"cuda\" or \"udmabuf\"",
        Field::ProbeIface => "zcnet_probe_json's iface",
        Field::ProbeActive => "zcnet_probe_json's active",
        _ => return None,
    })
}

fn call(c: &Call) -> Option<String> {
    Some(match c {
        Call::NicSetup {
            iface: Some(i),
            queue: Some(q),
        } => format!("'zcnet nic setup --iface {i} --queue {q} --port PORT'"),
        Call::NicSetup { iface: Some(i), .. } => format!("'zcnet nic setup --iface {i}'"),
        Call::NicSetup { .. } => "'zcnet nic setup --iface IFACE'".into(),
        Call::NicSetupFlow => "'zcnet nic setup --iface IFACE --queue Q --port P'".into(),
        Call::NicRestore { iface: Some(i) } => format!("'zcnet nic restore --iface {i}'"),
        Call::NicRestore { iface: None } => "'zcnet nic restore'".into(),
        Call::SetChannels {
            iface: Some(i),
            change: Some((kind, n)),
        } => format!("'zcnet nic channels --iface {i} --{kind} {n}'"),
        Call::SetChannels { .. } => "'zcnet nic channels'".into(),
        Call::Probe => "zcnet_probe_json".into(),
        Call::RegionAnonymous => "zcnet_region_new(\"host\", ...)".into(),
        Call::RegionHuge => "zcnet_region_new(\"hugepage\", ...)".into(),
        Call::RegionCuda => "zcnet_region_new(\"cuda\", ...)".into(),
        Call::RegionForSender => "zcnet_region_new(\"auto\", ...)".into(),
        Call::RegionReadAt => "zcnet_region_read".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet::text::{IfName, Text};

    #[zcnet_testkit::test]
    fn terms_are_the_fields_constants_and_calls_of_the_abi() {
        let t = zcnet::text!(
            "use ",
            zcnet::TxMode::UringZc.term(),
            " or a smaller ",
            Field::RxAreaLen,
            "; then ",
            Call::NicSetup {
                iface: Some(IfName::new("eth1")),
                queue: Some(3)
            },
        );
        assert_eq!(
            t.render(&C),
            "use ZCNET_TX_URING_ZC or a smaller zcnet_rx_config.area_len; then 'zcnet nic setup --iface eth1 --queue 3 --port PORT'"
        );
        assert_eq!(
            Text::from(zcnet::rx::RxMode::Zcrx.term()).render(&C),
            "ZCNET_RX_ZCRX"
        );
        // A setting the ABI has no field for keeps the library's name.
        assert_eq!(
            Text::from(Field::RxLowWater).render(&C),
            "RxConfig::low_water"
        );
    }
}
