"""The last mistakes and faults that escaped one line (issue 22): wrong value types in config
files, nested and non-UTF-8 files, the error prefix of every subcommand, a diverged run's files
and exit code, file modes under a umask, and a checkpoint whose progress disagrees with itself.

Each test failed on cf58684 (tracebacks, ``unhashable type: 'list'``, a missing metrics.csv, exit
2 for a divergence, mode 0600, a resume to "completed" without running a round)."""

import csv
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import decentlearn
from decentlearn.cli import main

SMALL = ["--peers", "4", "--rounds", "6", "--eval-every", "3", "--quiet"]
PREFIX = "decentlearn: error: "


def one_line(capsys, args, code=2):
    """Runs the command; asserts exit ``code`` and one stderr line with the error prefix."""
    got = main(args)
    out, err = capsys.readouterr()
    assert got == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(PREFIX), lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("text,needles", [
    ('topology = ["ring"]\n', ["topology", "string", "list"]),
    ("model = 3\n", ["model", "string", "int"]),
    ('dataset = ["digits"]\n', ["dataset", "string", "list"]),
    ("peers = 4.5\n", ["peers", "integer", "float"]),
    ('lr = "fast"\n', ["lr", "number", "str"]),
    ('clique_averaging = "yes"\n', ["clique_averaging", "true or false"]),
    ('network = 3\n', ["network", "string"]),
    ('algorithm = "choco"\ncompress = "topk:0.1"\ngamma = "big"\n', ["gamma", "number", "'big'"]),
    ('algorithm = "fedavg"\nparticipation = [0.5]\n', ["participation", "number", "[0.5]"]),
])
def test_config_value_of_the_wrong_type_is_one_line_naming_the_field(tmp_path, capsys, text,
                                                                       needles):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    line = one_line(capsys, ["run", "--config", str(cfg), "--quiet", "--out", str(tmp_path / "o")])
    for needle in needles:
        assert needle in line, line


def test_runconfig_type_errors_name_the_field():
    from decentlearn.sim import RunConfig
    with pytest.raises(TypeError, match=r"^topology must be a string, got list \['ring'\]$"):
        RunConfig(topology=["ring"])
    with pytest.raises(TypeError, match=r"^eval_samples must be an integer or unset, got str"):
        RunConfig(eval_samples="all")
    with pytest.raises(TypeError, match=r"^option of algorithm 'fedhisyn': speeds must be a "
                                        r"string, got int 3$"):
        RunConfig(algorithm="fedhisyn", speeds=3)  # its own check raised AttributeError
    RunConfig(lr=1, eval_samples=None, seed=3)  # an int where a float goes is fine


@pytest.mark.parametrize("content,needle", [
    (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    (b"peers = 4\n# caf\xe9 in latin-1\n", "not UTF-8"),
], ids=["nested", "latin-1"])
def test_config_file_nesting_and_encoding_are_one_line_naming_the_file(tmp_path, capsys,
                                                                        content, needle):
    cfg = tmp_path / "weird.toml"
    cfg.write_bytes(content)
    for args in (["run", "--config", str(cfg), *SMALL, "--out", str(tmp_path / "o")],
                 ["sweep", str(cfg), "--out", str(tmp_path / "s")]):
        line = one_line(capsys, args)
        assert str(cfg) in line and needle in line, line


def test_network_file_nesting_and_encoding_are_one_line(tmp_path, capsys):
    net = tmp_path / "net.toml"
    net.write_bytes(b"latency = " + b"[" * 50_000 + b"]" * 50_000 + b"\n")
    line = one_line(capsys, ["run", *SMALL, "--network", str(net), "--out", str(tmp_path / "o")])
    assert "net.toml" in line and "nested too deeply" in line
    net.write_bytes(b"latency = 0.001 # \xff\n")
    line = one_line(capsys, ["run", *SMALL, "--network", str(net), "--out", str(tmp_path / "o")])
    assert "net.toml" in line and "not UTF-8" in line


def test_every_subcommand_reports_mistakes_with_one_prefix(tmp_path, capsys):
    """One prefix for every user mistake, whichever command or layer finds it."""
    bad = tmp_path / "bad.toml"
    bad.write_text("peers = [\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        ["run", "--lr", "abc"],  # argparse
        ["run", "--peers", "0", "--quiet", "--out", str(tmp_path / "a")],  # RunConfig
        ["run", "--model", "nope", "--quiet", "--out", str(tmp_path / "b")],  # model check
        ["run", "--mpi-timeout", "3"],  # run's own checks
        ["run", "--config", str(bad)],  # config file
        ["run", "--resume", str(empty)],  # resume
        ["sweep", str(bad), "--out", str(tmp_path / "s")],
        ["sweep", str(bad), "--out", str(tmp_path / "s"), "--jobs", "0"],
        ["plot", str(empty), "--out", str(tmp_path / "p.png")],
        ["compare", str(empty)],
        ["bench", "gemm", "--shapes", "1x2"],
        ["bench", "--cpu-time", "--threads", "2"],
        ["download", "nope"],
        ["--import", "no_such_module_here", "run"],
        ["info", "--bogus"],
        ["frobnicate"],
    ]
    for args in cases:
        one_line(capsys, args)


def test_divergence_keeps_metrics_and_exits_3(tmp_path, capsys):
    """The issue's case: qsgd:4 diverges at round 10 with evaluations every 10 rounds; the round
    it diverged at is in metrics.csv (and summary.json), and the exit code is 3, not the 2 of a
    usage mistake."""
    out = tmp_path / "run"
    code = main(["run", "--compress", "qsgd:4", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith(PREFIX + "training diverged at round ")
    assert all(line.startswith("decentlearn: warning: ") for line in lines[:-1])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged"
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(rows[-1]["round"]) == summary["last_round"]
    # the row shows why: its consensus distance is past the bound the error names
    assert float(rows[-1]["consensus_distance"]) > 100.0


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_run_files_respect_the_umask(tmp_path, capsys, mask, mode):
    old = os.umask(mask)
    try:
        out = tmp_path / "run"
        assert main(["run", *SMALL, "--checkpoint-every", "3", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    names = ["metrics.csv", "summary.json", "config.toml", "checkpoint.npz", "curves.png"]
    modes = {n: stat.S_IMODE((out / n).stat().st_mode) for n in names if (out / n).exists()}
    assert set(modes) >= set(names) - {"curves.png"}
    assert modes == dict.fromkeys(modes, mode), modes


def test_checkpoint_progress_must_agree_with_itself(tmp_path, capsys):
    """A checkpoint rewritten with run.next_round = 10^18 (and its checksum recomputed) said
    "completed, last_round 10^18" on resume without running a round; it is refused."""
    from decentlearn.runner import checkpoint
    out = tmp_path / "run"
    assert main(["run", *SMALL, "--checkpoint-every", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    path = out / checkpoint.FILENAME
    state, meta = checkpoint.read(path)
    for key, value in (("run.next_round", 10**18), ("run.next_round", 2),
                       ("run.history", [{"round": 9}])):
        bad = dict(state, **{key: value})
        checkpoint.write(path, bad, fingerprint=meta["fingerprint"], n_peers=meta["n_peers"],
                         dim=meta["dim"], round=meta["round"], extra=meta.get("extra"))
        line = one_line(capsys, ["run", "--resume", str(out), "--rounds", "12"])
        assert "inconsistent" in line and str(path) in line, line
    assert json.loads((out / "summary.json").read_text())["last_round"] == 6


def test_exit_codes_are_documented():
    """The codes the CLI returns are the ones docs/getting-started.md lists."""
    from decentlearn.cli import parser
    # the checkout's docs (an installed package has none beside it)
    text = (Path(__file__).resolve().parents[1] / "docs" / "getting-started.md").read_text()
    for code in (parser.EXIT_OK, parser.EXIT_FAILED, parser.EXIT_USAGE, parser.EXIT_DIVERGED,
                 parser.EXIT_MPI, 130, 143):
        assert f"| {code} |" in text, code
    assert parser.ERROR_PREFIX.strip() in text


def _isa_paths(cwd) -> list[str]:
    # cwd away from the checkout, whose decentlearn/ (unbuilt when the package is installed)
    # would shadow the package under test through sys.path[0]
    env = dict(os.environ, PYTHONPATH=str(Path(decentlearn.__file__).parents[1]))
    text = subprocess.run([sys.executable, "-c", "import decentlearn; decentlearn.show_config()"],
                          capture_output=True, text=True, check=True, cwd=cwd, env=env).stdout
    line = next(ln for ln in text.splitlines() if "isa_supported" in ln)
    return [p.strip() for p in line.split(":", 1)[1].split(",")]


def test_every_isa_path_gives_the_documented_results(tmp_path):
    """A short default run on every ISA path this CPU has: the vector paths (avx2, avx512,
    avx512vnni, amx) agree bit for bit; generic, without FMA, agrees to float32 rounding (the
    difference docs/performance.md states)."""
    paths = _isa_paths(tmp_path)
    assert paths[0] == "generic"
    env = dict(os.environ, PYTHONPATH=str(Path(decentlearn.__file__).parents[1]))
    got = {}
    for isa in paths:
        out = tmp_path / isa
        proc = subprocess.run([sys.executable, "-m", "decentlearn", "run", "--peers", "8",
                               "--rounds", "20", "--eval-every", "10", "--quiet", "--out",
                               str(out)], env=dict(env, DECENTLEARN_ISA=isa),
                              capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        s = json.loads((out / "summary.json").read_text())
        got[isa] = {k: s[k] for k in ("test_accuracy_mean", "test_accuracy_avg_model",
                                      "consensus_distance", "final_train_loss")}
    vector = [p for p in paths if p != "generic"]
    for isa in vector[1:]:
        assert got[isa] == got[vector[0]], (isa, got)
    if vector:
        for k, v in got["generic"].items():
            assert v == pytest.approx(got[vector[0]][k], rel=1e-5), (k, got)


def test_run_help_groups_defaults_and_examples(capsys):
    """`run --help` (issue 22, item 7): flags in groups, a default for every flag that has one
    (read from RunConfig), the weight rules from their registry, and examples that parse into a
    valid configuration."""
    import dataclasses
    import shlex

    from decentlearn.cli.config import resolve_run_config
    from decentlearn.cli.parser import RUN_EXAMPLES, build_parser
    from decentlearn.sim import RunConfig
    from decentlearn.topology import available_weights
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    titles = [g.title for g in run._action_groups]
    for title in ("data", "model", "algorithm", "choco options", "training", "topology",
                  "network", "evaluation", "output", "MPI"):
        assert title in titles, titles
    assert titles.index("algorithm") < titles.index("choco options") < titles.index("training")
    actions = {a.option_strings[-1]: a for a in run._actions if a.option_strings}
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "asynchronous":
            flag = "--async"
        if flag not in actions or f.default is dataclasses.MISSING:
            continue
        help_text = " ".join(actions[flag].help.split())
        if f.default is None:
            assert "default" in help_text or "needs" in help_text, (flag, help_text)
        elif isinstance(f.default, bool):
            assert "default on" in help_text or "default off" in help_text \
                or "store_true" in type(actions[flag]).__name__.lower() \
                or actions[flag].nargs == 0, (flag, help_text)
        else:
            assert f"default {f.default}" in help_text, (flag, help_text)
    assert ", ".join(available_weights()) in actions["--weights"].help
    assert "clique" in available_weights()
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "examples:\n  decentlearn run" in text and "exit status:" in text
    examples = [line.split("#")[0].split("&&")[0] for line in RUN_EXAMPLES.splitlines()
                if line.startswith("  decentlearn run")]
    assert len(examples) >= 6
    for example in examples:
        args = parser.parse_args(shlex.split(example)[1:])
        if not (args.config or args.resume):
            resolve_run_config(args)  # a valid configuration


def test_kernels_agree_across_isa_paths_as_documented():
    """docs/performance.md, "ISA paths and which results agree": every kernel is bit-identical
    on the vector paths; generic matches them bit for bit except the three float multiply-add
    kernels (gossip, the float32 GEMMs, the int8 GEMM's float epilogue), which agree to float32
    rounding."""
    import importlib

    import numpy as np
    import scipy.sparse as sp

    from decentlearn import _core
    from decentlearn.ops import nn, quant
    from decentlearn.ops.gossip import gossip
    natural = importlib.import_module("decentlearn.ops.natural")
    topk = importlib.import_module("decentlearn.ops.topk")
    gemm_s8 = importlib.import_module("decentlearn.ops.gemm_s8")
    rng = np.random.default_rng(1)
    X = rng.standard_normal((16, 3000)).astype(np.float32)
    W = sp.diags([np.full(15, 1 / 3), np.full(16, 1 / 3), np.full(15, 1 / 3)], [-1, 0, 1],
                 format="csr")
    x = rng.standard_normal((4, 32, 64)).astype(np.float32)
    w = rng.standard_normal((4, 64, 10)).astype(np.float32)
    a8 = rng.integers(-127, 128, (64, 96)).astype(np.int8)
    b8 = rng.integers(-127, 128, (96, 40)).astype(np.int8)
    bias = rng.standard_normal(40).astype(np.float32)

    def outputs():
        return {"gossip": gossip(W, X), "dense_forward": nn.dense_forward(x, w),
                "gemm_s8_f32": gemm_s8.gemm_s8_f32(a8, gemm_s8.pack_b_s8(b8), 0.013, 0.007,
                                                   bias),
                "natural": natural.natural_encode(X, seed=3),
                "dither": natural.dither_encode(X, 4, seed=3)[1],
                "randk": topk.randk(X, 50, seed=2)[0], "topk": topk.topk(X, 50)[0],
                "qsgd": quant.qsgd_encode(X, 4, seed=1)[1],
                "int8": quant.int8_encode(X, seed=1)[1],
                "gemm_s8": gemm_s8.gemm_s8(a8, gemm_s8.pack_b_s8(b8))}

    paths = _core.config()["isa_supported"]
    default = _core.config()["isa"]
    got = {}
    try:
        for isa in paths:
            _core.set_isa(isa)
            got[isa] = {k: np.asarray(v) for k, v in outputs().items()}
    finally:
        _core.set_isa(default)
    fused = {"gossip", "dense_forward", "gemm_s8_f32"}
    vector = [p for p in paths if p != "generic"]
    for isa in vector[1:]:
        for k, v in got[isa].items():
            assert np.array_equal(v, got[vector[0]][k]), (isa, k)
    for isa in vector[:1]:
        for k, v in got[isa].items():
            if k in fused:
                np.testing.assert_allclose(got["generic"][k], v, rtol=1e-5, atol=1e-5)
            else:
                assert np.array_equal(got["generic"][k], v), k
