//! `zcnet bench rx` (being written).
