"""Reproduction: simulated time to reach a target accuracy, D-PSGD on a ring against all-reduce SGD
(and a parameter server), across bandwidths and latencies (Lian et al., NeurIPS 2017, Fig. 2-3).

    python benchmarks/reproduce/network_time.py [--out DIR] [--target 0.92] [--rounds 250]

Statistical efficiency comes from real runs on the embedded digits data (IID, 16 and 64 peers,
batch 16, lr 0.05, momentum 0.9, seed 0): the first evaluated round (every 2) whose mean peer test
accuracy reaches the target, for D-PSGD on a ring (``--algorithm dpsgd``) and for all-reduce SGD
(``--algorithm allreduce``: every round the exact average of the peers' models, what a ring
all-reduce computes, timed by the ring all-reduce cost model of decentlearn.network, a barrier of
2(n-1)/n * S / B + 2(n-1) * latency).

System cost comes from decentlearn.network on a uniform network for every (bandwidth, latency)
cell: one D-PSGD round on the ring is compute + latency + 2 S / B (shared NIC, 2 neighbours),
one all-reduce round compute + 2(n-1)/n S / B + 2(n-1) latency, one parameter-server round
compute + 2 latency + 2 n S / B. Two payloads: the MLP actually trained (9,610 float32 = 38 KB,
2,000 samples/s) and a ResNet-50-sized one (25.6 M float32 = 102 MB, 160 samples/s, the same
rounds to target), whose time is simulated, not trained. Writes network_time.png and
network_time.json to --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from decentlearn import topology  # noqa: E402
from decentlearn.comm import FLOAT32_BYTES, SimComm  # noqa: E402
from decentlearn.network import NetworkConfig, NetworkModel, server_round_time  # noqa: E402
from decentlearn.sim import RunConfig, Simulator  # noqa: E402

BANDWIDTHS_MBPS = [10_000, 1_000, 100, 10]
LATENCIES_MS = [0.1, 1.0, 10.0, 100.0]
PEERS = [16, 64]
BATCH = 16
PAYLOADS = {  # name: (parameters, samples/s)
    "MLP (9.6 k params)": (None, 2_000.0),
    "ResNet-50-sized (25.6 M params)": (25_600_000, 160.0),
}


def rounds_to_target(n: int, allreduce: bool, target: float,
                     rounds: int) -> tuple[int | None, list]:
    cfg = RunConfig(peers=n, topology="ring", partition="iid", rounds=rounds, eval_every=2,
                    eval_samples=400, batch_size=BATCH, lr=0.05, momentum=0.9, seed=0)
    if allreduce:
        cfg = cfg.replace(algorithm="allreduce")
    result = Simulator(cfg).run()
    curve = [(row["round"], row["test_accuracy_mean"]) for row in result.history]
    hit = next((r for r, acc in curve if acc >= target), None)
    return hit, curve


def uniform_network(bandwidth_mbps: float, latency_ms: float, sps: float) -> NetworkConfig:
    return NetworkConfig(name="grid", latency_ms=latency_ms, bandwidth_mbps=bandwidth_mbps,
                         compute_sps=sps)


def round_seconds(n: int, nbytes: float, net: NetworkConfig) -> dict:
    """One round of each scheme on the simulated clock (the simulator's own code paths)."""
    model = NetworkModel(net, n)
    ring = SimComm(topology.make("ring", n), network=model, samples_per_round=BATCH)
    ring.count(0, nbytes)  # one D-PSGD exchange: every peer sends S bytes to its 2 neighbours
    ring.round_done(0)
    ar = SimComm(topology.make("ring", n), network=model, samples_per_round=BATCH)
    ar.clock.allreduce(0, nbytes)  # what --algorithm allreduce's comm.allreduce charges
    ar.round_done(0)
    ps = server_round_time(model, nbytes, nbytes, samples=BATCH)
    return {"dpsgd": ring.sim_seconds, "allreduce": ar.sim_seconds, "server": ps}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "reproduce" / "results"))
    p.add_argument("--target", type=float, default=0.92)
    p.add_argument("--rounds", type=int, default=250)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    stats = {}
    for n in PEERS:
        for name, allreduce in (("dpsgd", False), ("allreduce", True)):
            hit, curve = rounds_to_target(n, allreduce, args.target, args.rounds)
            if hit is None:
                print(f"{name} with {n} peers did not reach {args.target} in {args.rounds} rounds",
                      file=sys.stderr)
                return 1
            stats[(n, name)] = {"rounds": hit, "curve": curve}
            print(f"{name:>9}, {n} peers: {hit} rounds to {args.target:.0%} mean peer accuracy")
    dim = Simulator(RunConfig(peers=2, rounds=1)).model.dim

    grid = []
    for payload, (params, sps) in PAYLOADS.items():
        nbytes = FLOAT32_BYTES * (params or dim)
        for n in PEERS:
            for bw in BANDWIDTHS_MBPS:
                for lat in LATENCIES_MS:
                    per_round = round_seconds(n, nbytes, uniform_network(bw, lat, sps))
                    cell = {"payload": payload, "peers": n, "bandwidth_mbps": bw,
                            "latency_ms": lat}
                    for scheme, key in (("dpsgd", "dpsgd"), ("allreduce", "allreduce"),
                                        ("server", "allreduce")):
                        # The server computes the same average as all-reduce: same rounds.
                        cell[f"{scheme}_s"] = per_round[scheme] * stats[(n, key)]["rounds"]
                    grid.append(cell)

    lines = [f"target: {args.target:.0%} mean peer test accuracy (digits, IID); rounds to target: "
             + ", ".join(f"{k[1]} n={k[0]}: {v['rounds']}" for k, v in stats.items()), "",
             "| payload | peers | bandwidth | latency | D-PSGD ring (s) | all-reduce (s) | "
             "param. server (s) | all-reduce / D-PSGD |", "|---|---|---|---|---|---|---|---|"]
    for c in grid:
        lines.append(f"| {c['payload']} | {c['peers']} | {c['bandwidth_mbps']:g} Mbit/s | "
                     f"{c['latency_ms']:g} ms | {c['dpsgd_s']:.3g} | {c['allreduce_s']:.3g} | "
                     f"{c['server_s']:.3g} | {c['allreduce_s'] / c['dpsgd_s']:.2f} |")
    table = "\n".join(lines)
    print(table)
    (out / "network_time.json").write_text(json.dumps(
        {"target": args.target, "rounds_to_target": {f"{k[1]}:{k[0]}": v["rounds"]
                                                     for k, v in stats.items()},
         "curves": {f"{k[1]}:{k[0]}": v["curve"] for k, v in stats.items()},
         "grid": grid}, indent=1) + "\n")
    (out / "network_time.md").write_text(table + "\n")
    plot(grid, stats, out / "network_time.png", args.target)
    print(f"wrote {out / 'network_time.png'} ({time.perf_counter() - start:.0f} s)")
    return 0


def plot(grid, stats, path, target) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    fig, axes = plt.subplots(len(PEERS), len(PAYLOADS) + 1, figsize=(15, 8.5),
                             constrained_layout=True)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-1.0, vmax=1.5)
    for r, n in enumerate(PEERS):
        ax = axes[r, 0]
        for name, style in (("dpsgd", "-"), ("allreduce", "--")):
            rounds, acc = zip(*stats[(n, name)]["curve"])
            ax.plot(rounds, acc, style, label={"dpsgd": "D-PSGD, ring",
                                               "allreduce": "all-reduce SGD"}[name])
        ax.axhline(target, color="grey", lw=0.8)
        ax.set_ylim(0.5, 1.0)
        ax.set_xlabel("round")
        ax.set_ylabel("mean peer test accuracy")
        ax.set_title(f"{n} peers: accuracy per round")
        ax.legend()
        for c, payload in enumerate(PAYLOADS):
            ax = axes[r, c + 1]
            cells = [g for g in grid if g["peers"] == n and g["payload"] == payload]
            ratio = np.array([[next(g for g in cells if g["bandwidth_mbps"] == bw
                                    and g["latency_ms"] == lat)
                               for lat in LATENCIES_MS] for bw in BANDWIDTHS_MBPS])
            logr = np.vectorize(lambda g: np.log10(g["allreduce_s"] / g["dpsgd_s"]))(ratio)
            im = ax.imshow(logr, cmap="RdBu_r", norm=norm)
            for i in range(len(BANDWIDTHS_MBPS)):
                for j in range(len(LATENCIES_MS)):
                    ax.text(j, i, f"{10 ** logr[i, j]:.2g}x", ha="center", va="center",
                            fontsize=9)
            ax.set_xticks(range(len(LATENCIES_MS)), [f"{v:g} ms" for v in LATENCIES_MS])
            ax.set_yticks(range(len(BANDWIDTHS_MBPS)),
                          [f"{v / 1000:g} Gbit/s" if v >= 1000 else f"{v:g} Mbit/s"
                           for v in BANDWIDTHS_MBPS])
            ax.set_xlabel("link latency")
            ax.set_title(f"{n} peers, {payload}:\n(all-reduce time) / (D-PSGD time) to target",
                         fontsize=10)
    fig.colorbar(im, ax=axes[:, 1:], label="log10 speed-up of D-PSGD (red: D-PSGD faster)")
    fig.suptitle(f"Simulated time to {target:.0%} accuracy: D-PSGD on a ring vs all-reduce SGD")
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
