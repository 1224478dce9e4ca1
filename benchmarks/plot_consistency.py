#!/usr/bin/python3
"""Plots petrel_bench's straggler cases: iterations per second against the delay bound.

    petrel_bench --case straggler > straggler.jsonl
    benchmarks/plot_consistency.py straggler.jsonl straggler.png

Reads JSON lines (other cases are ignored) and writes a PNG bar chart, one bar per
consistency model, with the spread of the runs as error bars.
"""
import json
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = []
    with open(argv[1], encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if str(r.get("case", "")).startswith("straggler_"):
                rows.append(r)
    if not rows:
        print(f"{argv[1]}: no straggler cases", file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["policy"] for r in rows]
    rate = [r["iterations_per_second"] for r in rows]
    low = [r["iterations_per_second"] - r["min_iterations_per_second"] for r in rows]
    high = [r["max_iterations_per_second"] - r["iterations_per_second"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(range(len(rows)), rate, yerr=[low, high], capsize=4, color="#3b6ea8")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=20, ha="right")
    ax.set_ylabel("iterations per second (4 workers, median)")
    ax.set_title("A straggler at a time: throughput by consistency model")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['speedup_vs_tau0']:.2f}x", (i, rate[i]), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points", fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
