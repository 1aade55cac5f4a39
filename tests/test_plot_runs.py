"""decentlearn plot / compare: several run directories read back, overlaid and tabulated; the
topology drawing helper."""

import csv
import io
import json

import pytest

from decentlearn.cli import main
from decentlearn.outputs.format import compare_rows, differing_fields
from decentlearn.outputs.plot import draw_topology, plot_runs, run_labels
from decentlearn.outputs.rundir import RunDirError, load_run

SMALL = ["--peers", "4", "--rounds", "4", "--eval-every", "2", "--quiet"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for name, extra in (("ring", ["--topology", "ring"]),
                        ("complete", ["--topology", "complete"]),
                        ("ring-s1", ["--topology", "ring", "--seed", "1"])):
        out = root / name
        assert main(["run", *SMALL, *extra, "--out", str(out)]) == 0
        dirs.append(out)
    return dirs


def test_differing_fields_and_labels():
    configs = [{"topology": "ring", "seed": 0, "threads": 1, "lr": 0.1},
               {"topology": "ring", "seed": 1, "threads": 2, "lr": 0.1},
               {"topology": "torus", "seed": 0, "lr": 0.1, "gamma": 0.5}]
    # threads never changes results: it is not a difference; a missing key is "unset"
    assert differing_fields(configs) == ["topology", "seed", "gamma"]
    assert differing_fields(configs[:1]) == []


def test_load_run_reads_the_files(three_runs):
    run = load_run(three_runs[0])
    summary = json.loads((three_runs[0] / "summary.json").read_text())
    with open(three_runs[0] / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert run.status == "completed" and run.config["topology"] == "ring"
    assert run.column("round") == [float(r["round"]) for r in rows] == [2.0, 4.0]
    assert run.column("test_accuracy_mean")[-1] == pytest.approx(summary["test_accuracy_mean"])
    assert run.column("sim_seconds") is None


def test_plot_three_runs_legend_from_differences(three_runs, tmp_path, capsys):
    out = tmp_path / "three.png"
    assert main(["plot", *map(str, three_runs), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG
    labels = run_labels([load_run(d) for d in three_runs])
    assert labels == ["topology=ring, seed=0", "topology=complete, seed=0",
                      "topology=ring, seed=1"]
    assert "topology=complete, seed=0" in capsys.readouterr().out


def test_same_config_falls_back_to_names(three_runs):
    assert run_labels([load_run(three_runs[0]), load_run(three_runs[0])]) == ["ring", "ring"]
    assert run_labels([load_run(three_runs[0]), load_run(three_runs[2])]) == ["seed=0", "seed=1"]


def test_plot_with_simulated_time(three_runs, tmp_path):
    timed = tmp_path / "timed"
    assert main(["run", *SMALL, "--network", "datacenter", "--out", str(timed)]) == 0
    run = load_run(timed)
    assert run.column("sim_seconds") is not None and all(v > 0 for v in run.column("sim_seconds"))
    labels = plot_runs([load_run(three_runs[0]), run], tmp_path / "t.png")
    assert labels == ["network=unset", "network=datacenter"]


def test_compare_table_and_formats(three_runs, tmp_path, capsys):
    # an interrupted run: summary.json says so and has no final summary
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "summary.json").write_text(json.dumps({"status": "interrupted", "last_round": 3}))
    assert main(["compare", *map(str, three_runs), str(cut)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["run", "topology", "seed"]
    assert [line.split()[0] for line in out[2:]] == ["ring", "complete", "ring-s1", "cut"]
    assert "interrupted" in out[-1] and "completed" in out[2]
    assert main(["compare", *map(str, three_runs), "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    summary = json.loads((three_runs[1] / "summary.json").read_text())
    assert rows[2][rows[0].index("test_accuracy_mean")] == repr(summary["test_accuracy_mean"])
    header, table = compare_rows([load_run(d) for d in three_runs])
    assert header[:3] == ["run", "topology", "seed"] and len(table) == 3


@pytest.mark.parametrize("make", ["missing", "file", "empty-dir", "bad-json"])
def test_bad_run_dirs_one_line_exit_2(make, tmp_path, three_runs, capsys):
    bad = tmp_path / "bad"
    if make == "file":
        bad.write_text("x")
    elif make == "empty-dir":
        bad.mkdir()
    elif make == "bad-json":
        bad.mkdir()
        (bad / "summary.json").write_text("{not json")
    for cmd in (["plot", str(three_runs[0]), str(bad), "--out", str(tmp_path / "x.png")],
                ["compare", str(bad)]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    with pytest.raises(RunDirError):
        load_run(bad)
    assert not (tmp_path / "x.png").exists()


def test_plot_refuses_a_run_without_rows(tmp_path, three_runs, capsys):
    empty = tmp_path / "started"
    empty.mkdir()
    (empty / "summary.json").write_text(json.dumps({"status": "running", "last_round": 0}))
    assert main(["plot", str(three_runs[0]), str(empty), "--out", str(tmp_path / "y.png")]) == 2
    assert "no evaluation rows" in capsys.readouterr().err


def test_draw_topology_edges_match_the_graph():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from decentlearn import topology

    fig, axes = plt.subplots(1, 2)
    try:
        for ax, (spec, n) in zip(axes, (("ring", 8), ("exponential", 16))):
            topo = topology.make(spec, n)
            draw_topology(topo, ax=ax)
            (edges,) = [c for c in ax.collections if hasattr(c, "get_segments")]
            assert len(edges.get_segments()) == topo.edge_count()
            assert f"n={n}" in ax.get_title()
        with pytest.raises(ValueError, match="layout"):
            draw_topology(("ring", 4), ax=axes[0], layout="grid")
        with pytest.raises(TypeError, match="topology"):
            draw_topology("ring", ax=axes[0])
    finally:
        plt.close(fig)


def test_accuracy_axis_zooms_on_the_top_only_when_every_value_is_high():
    from decentlearn.outputs.plot import accuracy_limits
    assert accuracy_limits([0.94, 0.98, None, float("nan")]) == (0.9, 1.0)
    assert accuracy_limits([0.51, 0.97]) == (0.4, 1.0)
    assert accuracy_limits([0.12, 0.97]) == (0.0, 1.0)  # a run that starts low keeps the full axis
    assert accuracy_limits([]) == (0.0, 1.0)
