#!/usr/bin/env python3
"""Plots a bench/soak.py CSV: router RSS, open fds, client and worker connections, and answered
requests per second against time, in four panels.

    python3 bench/soak_plot.py soak.csv soak.png

Uses matplotlib when it is installed (Debian: python3-matplotlib), else gnuplot (Debian: gnuplot-nox);
exits 2 with a message when neither is there.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    t = [float(r["t_s"]) for r in rows]
    series = {
        "RSS (MiB)": [int(r["rss_kb"]) / 1024 for r in rows],
        "open fds": [int(r["fds"]) for r in rows],
        "client conns": [int(r["client_conns"]) for r in rows],
        "worker conns": [int(r["worker_conns"]) for r in rows],
    }
    ans = [int(r["answered"]) for r in rows]
    series["answered/s"] = [0.0] + [(ans[i] - ans[i - 1]) / (t[i] - t[i - 1]) if t[i] > t[i - 1] else 0.0
                                    for i in range(1, len(rows))]
    return t, series


PANELS = (("RSS (MiB)",), ("open fds",), ("client conns", "worker conns"), ("answered/s",))


def with_matplotlib(t, series, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(PANELS), 1, sharex=True, figsize=(9, 9))
    for ax, names in zip(axes, PANELS):
        for n in names:
            ax.plot(t, series[n], label=n)
        ax.set_ylabel(", ".join(names))
        ax.grid(True, alpha=0.3)
        if len(names) > 1:
            ax.legend(loc="upper left")
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def with_gnuplot(t, series, out, gnuplot):
    with tempfile.TemporaryDirectory() as td:
        data = os.path.join(td, "soak.dat")
        names = [n for p in PANELS for n in p]
        with open(data, "w") as f:
            for i, x in enumerate(t):
                f.write(" ".join([str(x)] + [str(series[n][i]) for n in names]) + "\n")
        script = ["set terminal pngcairo size 900,900" if "pngcairo" in terminals(gnuplot) else
                  "set terminal png size 900,900", "set output '%s'" % out, "set multiplot layout 4,1",
                  "set grid", "set key left top"]
        for p in PANELS:
            plots = ", ".join("'%s' using 1:%d with lines title '%s'" % (data, names.index(n) + 2, n) for n in p)
            script += ["set ylabel '%s'" % ", ".join(p), "plot " + plots]
        script += ["unset multiplot"]
        subprocess.run([gnuplot], input="\n".join(script) + "\n", text=True, check=True)


def terminals(gnuplot):
    r = subprocess.run([gnuplot, "-e", "set terminal"], capture_output=True, text=True)
    return r.stdout + r.stderr


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    t, series = load(sys.argv[1])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        gp = shutil.which("gnuplot")
        if gp is None:
            print("neither matplotlib (python3-matplotlib) nor gnuplot is installed", file=sys.stderr)
            return 2
        with_gnuplot(t, series, sys.argv[2], gp)
    else:
        with_matplotlib(t, series, sys.argv[2])
    print("wrote %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
