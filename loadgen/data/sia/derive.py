#!/usr/bin/env python3
"""Derives `throughput.csv` (the `--truth sia` of `loadgen learn`) from the published measurements of
Sia (SOSP'23), https://github.com/siasosp23/artifacts, `sia-simulator/traces/<model>/placements-<cluster>.csv`.

Each of those files is a profile measured by the Sia authors on one cluster: for a placement (one digit
per node, the number of GPUs used on it; "1" = one GPU, "2" = two GPUs on one node) and a per-GPU batch
size (`local_bsz`), the measured time of one step (`step_time`, the forward and backward pass) and of the
gradient synchronisation (`sync_time`), in seconds.

What this script derives, for every (model, local batch size) measured on one GPU of all five clusters:
- `sec_per_sample_<class>`: (step_time + sync_time) / local_bsz on one GPU of that class: the time one
  training sample costs. A job type's runtime on a class is its number of samples times this; the
  benchmark draws the number of samples, so only the ratios between classes come from here.
- `scaling`: how the runtime falls with the GPU count, t(g) = t(1) / g^s: for g = 2 and 4 GPUs on one
  node at the same local batch size, speedup = g (step_1 + sync_1) / (step_g + sync_g) (no overlap of
  computation and synchronisation assumed), s = ln(speedup) / ln(g), the mean over the classes and g that
  were measured, clamped to [0.3, 1].
Batch sizes: the ones measured on all five clusters, at most four per model, spread evenly over that
list (first, last and in between). The job type is named `<model>-b<local_bsz>`.

Clusters (sia-simulator/simulator_config.py of the same commit): aws = g4dn.12xlarge (NVIDIA T4 16 GB),
azure = ND40rs_v2 (V100 32 GB), dgx-ext = DGX-A100 (A100 40 GB), quad = Quadro RTX 6000 (24 GB),
rtx = GeForce RTX 2080 Ti (11 GB). gpt_pmp is measured on two clusters only and left out.

Usage (reproducible: reads the files with `git show` at a fixed commit of a clone of the artifact):
    git clone https://github.com/siasosp23/artifacts sia-artifacts
    python3 loadgen/data/sia/derive.py sia-artifacts > loadgen/data/sia/throughput.csv
"""
import csv
import io
import math
import subprocess
import sys

COMMIT = "aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70"
MODELS = ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]
# Sia cluster name -> catalog class name of the benchmark's policy.
CLUSTERS = [
    ("aws", "T4-16GB"),
    ("azure", "V100-32GB"),
    ("dgx-ext", "A100-40GB"),
    ("quad", "RTX6000-24GB"),
    ("rtx", "RTX2080Ti-11GB"),
]
PER_MODEL = 4


def read(repo, path):
    text = subprocess.run(
        ["git", "-C", repo, "show", f"{COMMIT}:{path}"],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = {}
    for r in csv.DictReader(io.StringIO(text)):
        key = (r["placement"].strip(), int(float(r["local_bsz"])))
        rows[key] = float(r["step_time"]) + float(r["sync_time"])
    return rows


def spread(values, n):
    if len(values) <= n:
        return values
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["job_type", "model", "local_bsz", "scaling"]
                 + [f"sec_per_sample_{name}" for _, name in CLUSTERS])
    for model in MODELS:
        profiles = [read(repo, f"sia-simulator/traces/{model}/placements-{c}.csv") for c, _ in CLUSTERS]
        common = sorted(set.intersection(*[{b for (p, b) in prof if p == "1"} for prof in profiles]))
        for bsz in spread(common, PER_MODEL):
            exps = []
            for prof in profiles:
                for g in (2, 4):
                    if (str(g), bsz) in prof:
                        speedup = g * prof[("1", bsz)] / prof[(str(g), bsz)]
                        exps.append(math.log(speedup) / math.log(g))
            scaling = min(1.0, max(0.3, sum(exps) / len(exps))) if exps else 0.9
            per_sample = [prof[("1", bsz)] / bsz for prof in profiles]
            out.writerow([f"{model}-b{bsz}", model, bsz, f"{scaling:.3f}"]
                         + [f"{x:.6g}" for x in per_sample])


if __name__ == "__main__":
    main()
