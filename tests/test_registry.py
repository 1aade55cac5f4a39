"""The shared Registry: registration, lookup with closest-name suggestions, and every family on it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import decentlearn

from decentlearn import algorithms, compress, topology
from decentlearn.data import load_dataset, make_partition
from decentlearn.registry import Registry, closest


def test_register_get_make_available():
    reg = Registry("widget")

    @reg.register("pair", form="pair:A:B")
    def pair(prefix, a, b, scale=1):
        return (prefix, a, b, scale)

    reg.register("solo")(lambda: "solo")
    assert reg.available() == ["pair", "solo"] and "pair" in reg and len(reg) == 2
    assert reg.forms() == ["pair:A:B", "solo"]
    assert reg.get("pair") is pair
    assert reg.make("pair:1:2", "x", scale=3) == ("x", "1", "2", 3)
    with pytest.raises(ValueError, match="widget 'pair' is already registered"):
        reg.register("pair")
    with pytest.raises(ValueError, match="without ':'"):
        reg.register("a:b")
    with pytest.raises(TypeError, match="name must be a str"):
        reg.register(3)
    with pytest.raises(ValueError, match="non-empty"):
        reg.make("")
    other = reg.copy()
    other.register("extra")(lambda: 0)
    assert "extra" in other and "extra" not in reg


def test_unknown_name_suggests_the_closest():
    reg = Registry("topology")
    for name in ("ring", "torus", "exponential", "complete"):
        reg.register(name)(object)
    with pytest.raises(ValueError) as info:
        reg.get("rnig")
    assert str(info.value) == ("unknown topology 'rnig'; did you mean 'ring'? expected one of "
                               "complete, exponential, ring, torus")
    with pytest.raises(ValueError, match="did you mean 'exponential'"):
        reg.get("exp")  # a unique prefix
    with pytest.raises(ValueError, match=r"^unknown topology 'zzzzz'; expected one of"):
        reg.get("zzzzz")  # nothing close: no guess
    with pytest.raises(ValueError, match="in spec 'tors:4'; did you mean 'torus'"):
        reg.make("tors:4")
    assert closest("--peer", ["--peers", "--precision"]) == "--peers"


@pytest.mark.parametrize("call,message", [
    (lambda: algorithms.make("choko"), "unknown algorithm 'choko'; did you mean 'choco'?"),
    (lambda: compress.make("tpok:0.1"), "unknown compressor 'tpok' in spec 'tpok:0.1'; did you mean 'topk'?"),
    (lambda: compress.make("ef:qsdg:4"), "did you mean 'qsgd'?"),
    (lambda: topology.make("rign", 8), "unknown topology 'rign'; did you mean 'ring'?"),
    (lambda: load_dataset("digts"), "unknown dataset 'digts'; did you mean 'digits'?"),
    (lambda: make_partition("dirichlett:0.5", [0, 1, 2, 3], 2),
     "unknown partition 'dirichlett' in spec 'dirichlett:0.5'; did you mean 'dirichlet'?"),
])
def test_every_family_suggests(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_public_functions_still_work():
    assert {"dpsgd", "choco"} <= set(algorithms.available())
    assert {"topk", "qsgd", "none"} <= set(compress.available())
    assert "ring" in topology.available()
    ef = compress.make("ef:topk:0.5")
    assert isinstance(ef, compress.ErrorFeedback) and ef.spec == "ef:topk:0.5" and ef.biased
    with pytest.raises(ValueError, match="once"):
        compress.make("ef:ef:topk:0.5")


def test_lazy_package_attributes_and_no_heavy_imports(tmp_path):
    """`import decentlearn as dl` gives every public submodule lazily (PEP 562) and imports none
    of matplotlib, networkx, torch, mpi4py (fresh interpreter), even after
    importing the main submodules."""
    code = (
        "import sys\n"
        "import decentlearn as dl\n"
        "heavy = [m for m in ('matplotlib', 'networkx', 'scipy', 'torch', 'mpi4py', 'decentlearn.sim')\n"
        "         if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "t = dl.topology.make('ring', 8)\n"
        "assert t.n == 8\n"
        "for name in ('compress', 'ops', 'data', 'sim', 'algorithms', 'comm', 'metrics', 'nn',\n"
        "             'optim', 'registry', 'outputs'):\n"
        "    assert getattr(dl, name).__name__ == 'decentlearn.' + name, name\n"
        "assert dl.RunConfig is dl.sim.RunConfig and dl.simulate is dl.sim.simulate\n"
        "assert {'topology', 'simulate', 'RunConfig'} <= set(dir(dl))\n"
        "assert not {'matplotlib', 'networkx', 'torch', 'mpi4py'} & set(sys.modules)\n"
        "try:\n"
        "    dl.nonexistent\n"
        "except AttributeError as e:\n"
        "    assert 'nonexistent' in str(e)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "# Every public module is an attribute (last: a torch or MPI bridge may import its library).\n"
        "import pkgutil\n"
        "public = [m.name for m in pkgutil.iter_modules(dl.__path__) if not m.name.startswith('_')]\n"
        "for name in public:\n"
        "    try:\n"
        "        assert getattr(dl, name).__name__ == 'decentlearn.' + name, name\n"
        "    except ModuleNotFoundError as e:  # a bridge to an optional library not installed\n"
        "        assert e.name in ('torch', 'mpi4py'), e\n"
        "print('ok')\n"
    )
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    # cwd: not the checkout, whose decentlearn/ (without a built extension when the package is
    # installed) would shadow the one under test through sys.path[0] = ''.
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# A family's listing after importing only its package must equal the listing after importing every
# decentlearn module: a registry filled by import side effects elsewhere (cnn-bn registered by a
# module outside nn, say) fails here.
FAMILIES = {
    "compressors": ("decentlearn.compress", "available()"),
    "models": ("decentlearn.nn", "available_models()"),
    "datasets": ("decentlearn.data", "available_datasets()"),
    "partitions": ("decentlearn.data", "available_partitions()"),
    "optimizers": ("decentlearn.optim", "available()"),
}

_LISTING = """
import importlib, json, pkgutil, sys
import decentlearn
families, import_all = json.loads(sys.argv[1]), sys.argv[2] == "all"
modules = {package: importlib.import_module(package) for package, _ in families.values()}
if import_all:
    for info in pkgutil.walk_packages(decentlearn.__path__, "decentlearn."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # would run the CLI
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:  # a bridge to an optional library not installed
            if e.name not in ("torch", "mpi4py"):
                raise
print(json.dumps({family: sorted(eval(call, vars(modules[package])))
                  for family, (package, call) in families.items()}))
"""


def _listings(families: dict, import_all: bool, cwd) -> dict[str, list[str]]:
    """Each family's names in a fresh interpreter that imports the families' packages, then
    (``import_all``) every decentlearn module."""
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _LISTING, json.dumps(families),
                           "all" if import_all else "one"],
                          capture_output=True, text=True, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def listed_after_importing_everything(tmp_path_factory):
    return _listings(FAMILIES, True, tmp_path_factory.mktemp("registry"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_registry_is_complete_whatever_the_import_order(family, tmp_path,
                                                        listed_after_importing_everything):
    """A fresh interpreter importing only the family's package lists exactly the names it lists
    after every decentlearn module is imported."""
    package, _ = FAMILIES[family]
    alone = _listings({family: FAMILIES[family]}, False, tmp_path)[family]
    everything = listed_after_importing_everything[family]
    assert alone, f"{family}: nothing registered"
    assert alone == everything, (f"{family}: importing {package} alone lists {alone}, after "
                                 f"importing every module {everything}")
