//! devmem TCP socket calls (being written).
