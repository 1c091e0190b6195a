//! Helpers shared by zcnet-sys's unit tests.

pub(crate) use zcnet_testkit::ip;
