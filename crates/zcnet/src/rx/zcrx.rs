//! `zcrx` backend (being written).

use super::{ConnId, Ctx, RxBackend, RxConfig, RxMode};
use crate::error::{Error, Result};
use std::os::fd::RawFd;
use std::time::Duration;

#[derive(Debug)]
pub(super) struct ZcrxBackend {}

impl ZcrxBackend {
    pub fn new(_cfg: &RxConfig) -> Result<ZcrxBackend> {
        Err(Error::Unsupported {
            what: "zcrx receive".into(),
            source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            fix: "not built yet",
        })
    }
}

impl RxBackend for ZcrxBackend {
    fn mode(&self) -> RxMode {
        RxMode::Zcrx
    }
    fn add(&mut self, _conn: ConnId, _fd: RawFd) -> Result<()> {
        Ok(())
    }
    fn remove(&mut self, _conn: ConnId) -> bool {
        true
    }
    fn release(&mut self, _key: u64, _len: usize) {}
    fn poll(&mut self, _ctx: &mut Ctx<'_>, _timeout: Duration) -> Result<()> {
        Ok(())
    }
    fn bytes(&self, _key: u64, _len: usize) -> Option<&[u8]> {
        None
    }
    fn held(&self) -> usize {
        0
    }
}
