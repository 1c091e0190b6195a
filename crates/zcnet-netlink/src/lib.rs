//! # zcnet-netlink: the control plane
//!
//! (being written)
#![forbid(unsafe_code)]
#![warn(missing_docs)]
