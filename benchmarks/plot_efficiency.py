#!/usr/bin/python3
"""Plots petrel_bench's efficiency cases: bytes on the wire and throughput of the sparse
push with key caching, compression and filters, on loopback and on shaped links.

    petrel_bench --case sparse_push > loopback.jsonl
    sudo benchmarks/shaped_network.sh build/release/benchmarks/petrel_bench 1gbit 0.1ms \\
        --case sparse_push > shaped.jsonl
    benchmarks/plot_efficiency.py efficiency.png loopback.jsonl shaped.jsonl

Reads JSON lines (other cases are ignored; lines with a "network" field are grouped by
it, the others are "loopback") and writes a PNG with two panels: bytes on the wire per
push, and keys pushed per second, one bar per variant and network.
"""
import json
import sys


def read(paths):
    groups = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if not str(r.get("case", "")).startswith("sparse_push_1M"):
                    continue
                groups.setdefault(r.get("network", "loopback"), []).append(r)
    return groups


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups = read(argv[2:])
    if not groups:
        print("no sparse_push_1M cases in " + ", ".join(argv[2:]), file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = []
    for rows in groups.values():
        for r in rows:
            if r["case"] not in variants:
                variants.append(r["case"])
    labels = [v.replace("sparse_push_1M", "plain").replace("plain_", "") for v in variants]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    width = 0.8 / len(groups)
    for g, (network, rows) in enumerate(sorted(groups.items())):
        by_case = {r["case"]: r for r in rows}
        xs = [i + (g - (len(groups) - 1) / 2) * width for i in range(len(variants))]
        wire = [by_case[v]["bytes_on_wire"] / 1e6 if v in by_case else 0 for v in variants]
        rate = [by_case[v]["keys_per_second"] / 1e6 if v in by_case else 0 for v in variants]
        top.bar(xs, wire, width, label=network)
        bottom.bar(xs, rate, width, label=network)
    top.set_ylabel("MB on the wire per push")
    top.set_title("1 M random keys per push: what each stage saves")
    top.legend()
    bottom.set_ylabel("million keys pushed per second")
    bottom.set_xticks(range(len(variants)))
    bottom.set_xticklabels(labels, rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=120)
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
