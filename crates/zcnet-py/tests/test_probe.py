"""zcnet.probe() is `zcnet probe --json` as a dict, from the library (no subprocess)."""

import json
import subprocess

import zcnet


def test_probe_is_a_dict_with_the_reports_sections():
    p = zcnet.probe()
    assert isinstance(p, dict)
    for key in ("kernel", "interfaces", "notes", "active"):
        assert key in p
    assert p["active"] is False
    assert any(i.get("name") == "lo" for i in p["interfaces"])


def test_probe_matches_the_command(zcnet_bin):
    ours = zcnet.probe()
    out = subprocess.run([zcnet_bin, "probe", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = json.loads(out.stdout)
    assert ours.keys() == theirs.keys()
    assert ours["kernel"] == theirs["kernel"]
    assert [i["name"] for i in ours["interfaces"]] == [i["name"] for i in theirs["interfaces"]]


def test_probe_bad_argument():
    import pytest

    # The library's words (ProbeOptions::active), not the command line's --active.
    with pytest.raises(zcnet.ArgumentError, match="active"):
        zcnet.probe(queue=1)


def test_pattern_is_the_commands_pattern():
    # byte i of the stream is byte i % 8 of splitmix64(seed ^ (i / 8)), little-endian
    def splitmix64(z):
        m = (1 << 64) - 1
        z = (z + 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    expect = b"".join(splitmix64(1 ^ w).to_bytes(8, "little") for w in range(4))
    assert zcnet.pattern(1, 0, 32) == expect
    assert zcnet.pattern(1, 5, 20) == expect[5:25]
