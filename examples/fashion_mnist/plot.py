#!/usr/bin/env python3
"""Plots the Fashion-MNIST example's CSV log: loss and accuracy against time.

Usage: plot.py LOG.csv OUT.png [TITLE]
       plot.py --check      (exit status 0 when matplotlib can be imported, else 3)

The log has one row per epoch with the columns epoch, seconds, train_loss,
train_accuracy, test_loss, test_accuracy and samples_per_second (train_* are worker 0's
mini-batches during the epoch, test_* the model after the epoch). Exit status: 0 when the
plot is written, 2 for a bad command line or log, 3 when matplotlib is missing.
"""

import csv
import sys


def read_log(path):
    columns = ("epoch", "seconds", "train_loss", "train_accuracy", "test_loss",
               "test_accuracy", "samples_per_second")
    rows = {c: [] for c in columns}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                for c in columns:
                    rows[c].append(float(row[c]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: not a number") from None
    if not rows["epoch"]:
        raise ValueError(f"{path}: no epochs logged")
    return rows


def main(argv):
    if argv[1:] == ["--check"]:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return 3
        return 0
    if len(argv) not in (3, 4):
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    log_path, out_path = argv[1], argv[2]
    title = argv[3] if len(argv) == 4 else "Fashion-MNIST"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed (Debian: python3-matplotlib)",
              file=sys.stderr)
        return 3
    try:
        log = read_log(log_path)
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2

    t = log["seconds"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_loss.plot(t, log["train_loss"], "o-", label="train (worker 0's batches)")
    ax_loss.plot(t, log["test_loss"], "s-", label="test")
    ax_loss.set_xlabel("time since start [s]")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.set_title("Loss")
    ax_loss.grid(True, alpha=0.3)
    ax_loss.legend()

    ax_acc.plot(t, log["train_accuracy"], "o-", label="train (worker 0's batches)")
    ax_acc.plot(t, log["test_accuracy"], "s-", label="test")
    ax_acc.set_xlabel("time since start [s]")
    ax_acc.set_ylabel("accuracy")
    ax_acc.set_title(f"Accuracy (final test {log['test_accuracy'][-1]:.4f})")
    ax_acc.grid(True, alpha=0.3)
    ax_acc.legend(loc="lower right")

    for ax in (ax_loss, ax_acc):
        for e, x in zip(log["epoch"], t):
            ax.annotate(f"{int(e)}", (x, 0), xycoords=("data", "axes fraction"),
                        xytext=(0, 2), textcoords="offset points", ha="center",
                        fontsize=7, color="gray")
    rate = sum(log["samples_per_second"]) / len(log["samples_per_second"])
    fig.suptitle(f"{title} ({rate:,.0f} samples/s on average; epochs marked)")
    fig.tight_layout()
    try:
        fig.savefig(out_path, dpi=110)
    except OSError as e:
        print(f"plot.py: cannot write {out_path}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
