#!/usr/bin/env python3
"""Derives `throughput.csv` and `colocation.csv` (the `--truth gavel` of `loadgen learn`) from the published
throughput measurements of Gavel (OSDI'20), https://github.com/stanford-futuredata/gavel (MIT licence),
`scheduler/simulation_throughputs.json`.

That file holds, per GPU type (`k80`, `p100`, `v100`: one GPU each, consolidated on one server) and per
(job type, number of GPUs), the measured throughput in training iterations per second: `null` alone, and
for every other 1-GPU job type a pair [this job's, the other's] when both share the one GPU (space sharing).

What this script derives, for the 26 job types measured on one GPU of all three types:
- throughput.csv: `iters_per_sec_<class>` alone on one GPU (the runtime of a fixed number of iterations is
  proportional to its inverse; the benchmark draws the number, so only the ratios between classes matter),
  and `scaling` s: t(g) = t(1) / g^s from the measured 2-, 4- and 8-GPU throughputs, s = ln(thr_g /
  thr_1) / ln g, the mean over the three classes and the three g, clamped to [0.3, 1].
- colocation.csv: per (job type, class), its slowdown next to each other job type on the same GPU,
  null / paired - 1 (0.5 = 50 % longer). A pair Gavel records with throughput 0 (the two did not fit on
  the GPU together) gets 1.0: they take turns, and each runs twice as long.

Usage (reproducible: reads the file with `git show` at a fixed commit of a clone):
    git clone https://github.com/stanford-futuredata/gavel gavel
    python3 loadgen/data/gavel/derive.py gavel loadgen/data/gavel
"""
import ast
import csv
import json
import math
import os
import re
import subprocess
import sys

COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
PATH = "scheduler/simulation_throughputs.json"
# Gavel GPU type -> catalog class name of the benchmark's policy.
CLASSES = [("k80", "K80-12GB"), ("p100", "P100-16GB"), ("v100", "V100-16GB")]


def name(job):
    """'ResNet-18 (batch size 16)' -> ('resnet18-b16', 'resnet18'); 'A3C' -> ('a3c', 'a3c')."""
    m = re.fullmatch(r"(.*?)(?: \(batch size (\d+)\))?", job)
    model = re.sub(r"[^a-z0-9]", "", m.group(1).lower())
    return (f"{model}-b{m.group(2)}" if m.group(2) else model), model


def main():
    repo, out_dir = sys.argv[1], sys.argv[2]
    text = subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{PATH}"],
                          check=True, capture_output=True, text=True).stdout
    data = json.loads(text)
    table = {w: {ast.literal_eval(k): v for k, v in data[w].items()} for w, _ in CLASSES}
    jobs = [j for (j, g) in table["v100"] if g == 1 and all((j, 1) in table[w] for w, _ in CLASSES)]
    with open(os.path.join(out_dir, "throughput.csv"), "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["job_type", "model", "scaling"] + [f"iters_per_sec_{c}" for _, c in CLASSES])
        for j in jobs:
            exps = []
            for w, _ in CLASSES:
                one = table[w][(j, 1)]["null"]
                for g in (2, 4, 8):
                    many = table[w].get((j, g), {}).get("null")
                    if many and one:
                        exps.append(math.log(many / one) / math.log(g))
            scaling = min(1.0, max(0.3, sum(exps) / len(exps))) if exps else 0.9
            n, model = name(j)
            out.writerow([n, model, f"{scaling:.3f}"]
                         + [f"{table[w][(j, 1)]['null']:.6g}" for w, _ in CLASSES])
    with open(os.path.join(out_dir, "colocation.csv"), "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["job_type", "class"] + [name(k)[0] for k in jobs])
        for j in jobs:
            for w, c in CLASSES:
                entry = table[w][(j, 1)]
                alone = entry["null"]
                slow = {}
                for k in jobs:
                    paired = entry[str((k, 1))]
                    slow[k] = max(0.0, alone / paired[0] - 1.0) if paired[0] > 0 else 1.0
                out.writerow([name(j)[0], c] + [f"{slow[k]:.3f}" for k in jobs])


if __name__ == "__main__":
    main()
