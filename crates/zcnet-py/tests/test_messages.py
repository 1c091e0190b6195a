"""Error messages speak Python: the keyword arguments that carry a remedy out, never the
library's Rust names (`RxConfig::iface`, `TxMode::Uring`, `MemoryKind::Anonymous`)."""

import re

import pytest

import zcnet

RUST_NAME = re.compile(r"\w::\w")


@pytest.mark.parametrize(
    "kw",
    [
        dict(mode="zcrx"),
        dict(mode="devmem"),
        dict(mode="bogus"),
        dict(mode="zcrx", iface="nosuch0"),
        dict(mode="zcrx", iface="lo", queue=99),
        dict(mode="zcrx", iface="lo"),
        dict(mode="devmem", iface="lo"),
    ],
)
def test_a_refused_receiver_names_keywords_not_rust_types(kw):
    with pytest.raises(zcnet.Error) as e:
        zcnet.Receiver(**kw).close()
    msg = str(e.value)
    assert not RUST_NAME.search(msg), msg
