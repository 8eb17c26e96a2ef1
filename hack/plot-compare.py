#!/usr/bin/env python3
"""Plots `make bench-compare` series (written by tests/bench/compare/report.rs) to PNG.

For every workload: objects done over time (one line per tool), the tool's CPU seconds,
its RSS and the API server's CPU seconds over time, from the median run of each tool.
Usage: plot-compare.py bench/results
"""
import csv
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"kwok": "kwok v0.8.0", "kwok-pools": "kwok-pools", "bare": "bare writer"}
COLORS = {"kwok": "tab:orange", "kwok-pools": "tab:green", "bare": "tab:gray"}
PANELS = [
    ("done", "objects done"),
    ("tool_cpu_s", "tool CPU seconds"),
    ("tool_rss_mib", "tool RSS (MiB)"),
    ("apiserver_cpu_s", "kube-apiserver CPU seconds"),
]


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows] for k in (["t"] + [p for p, _ in PANELS])}


def main(out):
    machine = ""
    try:
        with open(os.path.join(out, "machine.json")) as f:
            meta = json.load(f)
            machine = f"{meta.get('machine', '')}; median of {meta.get('runs', '?')} run(s)"
    except OSError:
        pass
    series = {}
    for path in sorted(glob.glob(os.path.join(out, "series-*.csv"))):
        name = os.path.basename(path)[len("series-"):-len(".csv")]
        for tool in ("kwok-pools", "bare", "kwok"):  # longest suffix first
            if name.endswith("-" + tool):
                workload = name[: -len(tool) - 1]
                series.setdefault(workload, {})[tool] = load(path)
                break
    for workload, tools in series.items():
        fig, axes = plt.subplots(2, 2, figsize=(12, 8))
        for ax, (key, title) in zip(axes.flat, PANELS):
            for tool, data in sorted(tools.items()):
                if key.startswith("tool_") and tool == "bare":
                    continue  # the bare writer is the bench's own client: no process of its own
                ax.plot(data["t"], data[key], label=LABELS[tool], color=COLORS[tool])
            ax.set_title(title)
            ax.set_xlabel("seconds")
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle(f"{workload} — {machine}")
        fig.tight_layout()
        target = os.path.join(out, f"{workload}.png")
        fig.savefig(target, dpi=90)
        plt.close(fig)
        print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
