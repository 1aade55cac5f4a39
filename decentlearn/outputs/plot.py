"""Plots of runs (matplotlib, Agg backend: files, never windows).

``plot_curves`` draws one run's curves (the run directory's curves.png); ``plot_runs`` overlays
several runs read back by ``rundir.load_run`` (``decentlearn plot``), with legends from
``run_labels``; ``draw_topology`` draws a gossip graph. matplotlib and networkx are imported only
by the functions that need them.
"""

from __future__ import annotations

import os
from typing import Any

from decentlearn.atomic import atomic_writer
from decentlearn.outputs.format import config_cell, differing_fields
from decentlearn.outputs.rundir import Run, RunDirError


def accuracy_limits(values) -> tuple[float, float]:
    """y limits of an accuracy axis: (0, 1), or a zoom on the top when every value is 0.5 or more
    (to the tenth below the smallest value less 0.02), so curves that end within a few points of
    each other stay apart."""
    vals = [float(v) for v in values if v is not None and v == v]
    if not vals or min(vals) < 0.5:
        return 0.0, 1.0
    return max(0.0, int(10 * (min(vals) - 0.02)) / 10), 1.0


def plot_curves(history: list[dict], path: str | os.PathLike, title: str = "") -> bool:
    """Saves test accuracy and consensus distance against round to ``path`` (PNG).

    Returns False without writing anything when matplotlib is not installed. The file is written
    atomically (atomic.atomic_writer): a failure leaves no partial PNG.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rounds = [r["round"] for r in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    ax1.fill_between(rounds, [r["test_accuracy_min"] for r in history],
                     [r["test_accuracy_max"] for r in history], alpha=0.25, label="peers min-max")
    ax1.plot(rounds, [r["test_accuracy_mean"] for r in history], label="peers mean")
    ax1.plot(rounds, [r["test_accuracy_avg_model"] for r in history], "--", label="average model")
    ax1.set(xlabel="round", ylabel="test accuracy", ylim=accuracy_limits(
        [r[k] for r in history for k in ("test_accuracy_min", "test_accuracy_avg_model")]))
    ax1.grid(alpha=0.3)
    ax1.legend(loc="lower right")
    cd = [max(r["consensus_distance"], 1e-12) for r in history]
    ax2.semilogy(rounds, cd, color="C3")
    ax2.set(xlabel="round", ylabel="consensus distance  (1/n) Σ‖xᵢ − x̄‖²")
    ax2.grid(alpha=0.3, which="both")
    try:
        if title:
            fig.suptitle(title, fontsize=10)
        with atomic_writer(path) as f:  # never a truncated PNG
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return True


# --- several runs: legends, overlays ------------------------------------------------------------

def run_labels(runs: list[Run]) -> list[str]:
    """One legend label per run: ``field=value`` for each field that differs between the runs'
    configs (``seed=1, topology=ring``), the directory name when nothing differs or names are
    needed to tell two runs apart (a run without a config is named by its directory). A run that
    did not complete says how it stands: ``(running)``, ``(stale)`` (its process is gone),
    ``(interrupted)``, ``(diverged)``..., so a partial curve is never read as a finished one."""
    fields = differing_fields([r.config for r in runs if r.config])
    labels = []
    for r in runs:
        parts = [f"{k}={config_cell(r.config, k)}" for k in fields] if r.config else []
        labels.append(", ".join(parts) if parts else r.name)
    if len(set(labels)) < len(labels):
        labels = [f"{r.name}: {lab}" if lab != r.name else lab for r, lab in zip(runs, labels)]
    return [lab if r.status == "completed" else f"{lab} ({r.status})"
            for r, lab in zip(runs, labels)]


def _common_title(runs: list[Run]) -> str:
    """What the runs share (data set, peers, model, ...), for the figure's title."""
    fields = set(differing_fields([r.config for r in runs]))
    c = runs[0].config
    parts = [f"{k}={c[k]}" for k in ("dataset", "peers", "topology", "partition", "model",
                                     "algorithm", "compress", "rounds", "seed")
             if k in c and k not in fields]
    return ", ".join(parts)


def plot_runs(runs: list[Run], path: str | os.PathLike, title: str | None = None) -> list[str]:
    """Overlays runs in one PNG at ``path``: test accuracy (peers' mean solid, average model
    dashed) against round, against bytes sent (``bytes_sent_total``: peer to peer, client to
    server and server to client), and against simulated seconds
    when some run has ``sim_seconds`` (else the training loss against round); the consensus
    distance against round. One color and marker per run (earlier runs drawn wider, so identical
    curves stay visible), one legend below the panels built from the
    config fields that differ (run_labels). Returns the labels. Written atomically; raises
    ImportError without matplotlib and RunDirError when a run has no evaluation rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter

    if not runs:
        raise ValueError("runs must hold at least one run")
    for r in runs:
        if not r.rows:
            raise RunDirError(f"{r.path}: metrics.csv has no evaluation rows to plot")
    labels = run_labels(runs)
    timed = any(r.column("sim_seconds") is not None for r in runs)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6), constrained_layout=True)
    (a_round, a_bytes), (a_time, a_cons) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    markers = "os^DvP*Xh<>"

    # Runs with identical curves must stay visible: each run has its own marker, and earlier
    # runs are drawn wider, so a later run on top leaves their edges showing.
    def width(k: int) -> float:
        return 1.4 + 1.6 * (len(runs) - 1 - k) / max(1, len(runs) - 1)

    def curve(ax, x, y, k, dashed=False):
        pts = [(a, b) for a, b in zip(x, y) if a is not None and b is not None]
        if not pts:
            return
        xs, ys = zip(*pts)
        style = dict(color=colors[k % len(colors)], lw=1.0 if dashed else width(k),
                     ls="--" if dashed else "-", alpha=0.75 if dashed else 1.0)
        if not dashed:
            style.update(marker=markers[k % len(markers)], ms=2.5 + width(k),
                         markevery=max(1, len(xs) // 12))
        ax.plot(xs, ys, **style)

    exact, positive_bytes = 0, []
    for k, r in enumerate(runs):
        rounds = r.column("round") or []
        acc = r.column("test_accuracy_mean") or []
        avg = r.column("test_accuracy_avg_model") or []
        sent = r.column("bytes_sent_total") or []
        curve(a_round, rounds, acc, k)
        curve(a_round, rounds, avg, k, dashed=True)
        curve(a_bytes, sent, acc, k)
        curve(a_bytes, sent, avg, k, dashed=True)
        if timed:
            sim = r.column("sim_seconds") or [None] * len(rounds)
            curve(a_time, sim, acc, k)
            curve(a_time, sim, avg, k, dashed=True)
        else:
            curve(a_time, rounds, r.column("train_loss") or [], k)
        cons = r.column("consensus_distance") or []
        exact += sum(1 for v in cons if v is not None and v <= 0)
        curve(a_cons, rounds, [v if v is not None and v > 0 else None for v in cons], k)
        positive_bytes += [v for v in sent if v is not None and v > 0]
    a_round.set(xlabel="round", ylabel="test accuracy", title="accuracy vs round")
    a_bytes.set(xlabel="bytes sent: peers, clients and server", ylabel="test accuracy",
                title="accuracy vs communication")
    if positive_bytes and max(positive_bytes) > 100 * min(positive_bytes):
        a_bytes.set_xscale("log")  # compressed and uncompressed runs differ by orders of magnitude
    a_bytes.xaxis.set_major_formatter(EngFormatter(unit="B"))
    if timed:
        a_time.set(xlabel="simulated time (s)", ylabel="test accuracy",
                   title="accuracy vs simulated time (--network)")
    else:
        a_time.set(xlabel="round", ylabel="training loss (peers' mean)",
                   title="training loss (no simulated time: runs without --network)")
    a_cons.set(xlabel="round", ylabel="(1/n) Σ‖xᵢ − x̄‖²", yscale="log",
               title="consensus distance" + (" (zeros, exact consensus, not drawn)" if exact
                                             else ""))
    for ax in axes.flat:
        ax.grid(alpha=0.3, which="major")
    limits = accuracy_limits([v for r in runs for name in ("test_accuracy_mean",
                                                           "test_accuracy_avg_model")
                              for v in (r.column(name) or [])])
    for ax in (a_round, a_bytes) + ((a_time,) if timed else ()):
        ax.set_ylim(*limits)
    style_legend = [Line2D([], [], color="0.3", lw=1.8, label="peers' mean"),
                    Line2D([], [], color="0.3", lw=1.0, ls="--", label="average model")]
    a_round.legend(handles=style_legend, loc="lower right", fontsize=8)
    handles = [Line2D([], [], color=colors[k % len(colors)], lw=2, marker=markers[k % len(markers)],
                      ms=5, label=lab)
               for k, lab in enumerate(labels)]
    fig.legend(handles=handles, loc="outside lower center",
               ncols=1 if max(len(s) for s in labels) > 45 else min(3, len(labels)),
               fontsize=9, frameon=False)
    fig.suptitle(title if title is not None else _common_title(runs), fontsize=10)
    try:
        with atomic_writer(path) as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return labels


def draw_topology(topology: Any, ax: Any = None, t: int = 0, layout: str = "auto",
                  node_size: float | None = None, with_labels: bool | None = None) -> Any:
    """Draws round ``t``'s communication graph of a topology (``topology.make(...)`` result, or
    a spec string such as ``"exponential"`` with ``n`` given as ``topology=(spec, n)``) on a
    matplotlib Axes with a networkx layout; edge width follows the mixing weight W_t[i, j].
    ``layout``: "circular", "spring", "kamada-kawai" or "auto" (circular up to 64 peers, else
    spring). Returns the Axes. Directed graphs get arrows."""
    import matplotlib.pyplot as plt
    import networkx as nx

    from decentlearn import topology as topo_mod

    if isinstance(topology, tuple):
        topology = topo_mod.make(*topology)
    if not hasattr(topology, "mixing_matrix") or not hasattr(topology, "n"):
        raise TypeError("topology must be a decentlearn Topology (topology.make(spec, n)) or a "
                        f"(spec, n) tuple, got {type(topology).__name__}")
    layouts = {"circular": nx.circular_layout, "spring": nx.spring_layout,
               "kamada-kawai": nx.kamada_kawai_layout}
    if layout != "auto" and layout not in layouts:
        raise ValueError(f"layout must be 'auto' or one of {sorted(layouts)}, got {layout!r}")
    import scipy.sparse as sp
    indptr, indices, data = topology.csr(t)
    w = sp.csr_array((data, indices, indptr), shape=(topology.n, topology.n))
    directed = bool(getattr(topology, "directed", False))
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(range(topology.n))
    coo = w.tocoo()
    for i, j, v in zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()):
        if i != j and (directed or i < j):
            graph.add_edge(j, i, weight=v)  # W[i, j] != 0: i receives from j
    if layout == "auto":
        layout = "circular" if topology.n <= 64 else "spring"
    pos = (layouts[layout](graph, seed=0) if layout == "spring" else layouts[layout](graph))
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    n = topology.n
    node_size = node_size if node_size is not None else max(8.0, 300.0 / (1 + n / 16))
    with_labels = with_labels if with_labels is not None else n <= 32
    weights = [d["weight"] for _, _, d in graph.edges(data=True)]
    top = max(weights) if weights else 1.0
    nx.draw_networkx_edges(graph, pos, ax=ax, width=[0.4 + 2.0 * x / top for x in weights],
                           alpha=0.6, edge_color="0.35", arrows=directed,
                           node_size=node_size)
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=node_size, node_color="C0")
    if with_labels:
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=7, font_color="white")
    gap = topology.spectral_gap(t) if n <= 2048 else None
    ax.set_title(f"{topology.name}, n={n}" + (f", spectral gap {gap:.3g}" if gap is not None
                                               else ""), fontsize=9)
    ax.set_axis_off()
    return ax
