#!/usr/bin/env python3
"""Minimises a working corpus into the kept one, fuzz/corpus/<target>/ (replacing it).

libFuzzer's -merge=1 picks the inputs that reach every feature of the working corpus; its
control file lists each input's edges (COV) and features (FT). Of those inputs, this keeps at
most --cap: greedily, first the fewest that reach every edge the merged set reaches, then the
ones adding the most features; ties go to the smaller input. It prints the merged and the kept
coverage (libFuzzer's INITED line: edges "cov", features "ft").

    python3 keep_corpus.py <target> <working corpus dir>... [--cap 200] [--bin DIR]

--bin is where cargo fuzz put the target binaries (default: target/<triple>/release next to
this file; use your --target-dir's if you gave one).
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("target")
ap.add_argument("work", nargs="+")
ap.add_argument("--cap", type=int, default=200)
ap.add_argument("--bin", default=os.path.join(here, "target", "x86_64-unknown-linux-gnu", "release"))
a = ap.parse_args()
exe = os.path.join(a.bin, a.target)
dst = os.path.join(here, "corpus", a.target)

tmp = tempfile.mkdtemp(prefix=f"keep-{a.target}-")
merged = os.path.join(tmp, "merged")
os.mkdir(merged)
ctl = os.path.join(tmp, "control")
subprocess.run([exe, "-merge=1", f"-merge_control_file={ctl}", merged, *a.work],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
lines = open(ctl).read().split("\n")
n = int(lines[0])
files = lines[2:2 + n]
sets = {"COV": {}, "FT": {}}
for line in lines[2 + n:]:
    p = line.split()
    if p and p[0] in sets:
        sets[p[0]][int(p[1])] = set(p[2:])
size = {i: os.path.getsize(files[i]) for i in sets["FT"]}
chosen = []
for kind in ("COV", "FT"):
    have = set().union(*(sets[kind].get(i, set()) for i in chosen))
    left = {i: sets[kind].get(i, set()) for i in size if i not in chosen}
    while len(chosen) < a.cap and left:
        best = max(left, key=lambda i: (len(left[i] - have), -size[i]))
        if not left[best] - have:
            break
        chosen.append(best)
        have |= left.pop(best)

# Keep hand-written regression inputs (regress-*) of the old corpus. The chosen inputs are
# copied aside first: some may be files of the old corpus, which is about to be replaced.
keep = [os.path.join(dst, f) for f in sorted(os.listdir(dst))
        if f.startswith("regress-")] if os.path.isdir(dst) else []
saved = os.path.join(tmp, "kept")
os.mkdir(saved)
for f in keep + [files[i] for i in chosen]:
    shutil.copy(f, saved)
if os.path.isdir(dst):
    shutil.rmtree(dst)
shutil.copytree(saved, dst)


def inited(d):
    r = subprocess.run([exe, "-runs=0", d], capture_output=True, text=True)
    m = re.search(r"INITED cov: (\d+) ft: (\d+)", r.stderr)
    return m.groups() if m else ("?", "?")


mc, mf = inited(merged)
kc, kf = inited(dst)
kept = os.listdir(dst)
kib = sum(os.path.getsize(os.path.join(dst, f)) for f in kept) / 1024
print(f"{a.target}: merged {len(os.listdir(merged))} inputs (cov {mc}, ft {mf}); "
      f"kept {len(kept)} inputs, {kib:.1f} KiB (cov {kc}, ft {kf})")
shutil.rmtree(tmp)
