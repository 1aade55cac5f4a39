"""The communicator seam is declared (decentlearn.comm.protocol) and kept: both transports implement
every member with the declared parameters, the layered communicators keep it, and no algorithm
calls anything on its communicator that the protocol does not declare."""

import ast
import inspect
from pathlib import Path

import pytest

import decentlearn.algorithms
from decentlearn.comm import (Communicator, EventComm, EventCommunicator, FiniteTimeComm,
                              NonlinearGossipComm, SimComm)
from decentlearn.comm.local import CommState
from decentlearn.mpi.comm import MPIComm
from decentlearn.topology import make as make_topology


def _members(proto) -> dict[str, object]:
    """name -> the protocol's function/property, or None for a plain attribute."""
    out = {}
    for klass in reversed(proto.__mro__):
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        out.update({n: None for n in getattr(klass, "__annotations__", {})})
        out.update({n: v for n, v in vars(klass).items()
                    if not n.startswith("_") and (callable(v) or isinstance(v, property))})
    return out


def _assigned_attributes(cls) -> set[str]:
    """Attributes a class (or its bases) assigns on self or declares on the class."""
    names = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        names.update(vars(klass))
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and isinstance(node.ctx, ast.Store)):
                names.add(node.attr)
    return names


def _params(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("cls", [SimComm, MPIComm], ids=lambda c: c.__name__)
def test_each_transport_implements_every_member_with_the_declared_parameters(cls):
    have = _assigned_attributes(cls)
    for name, declared in _members(Communicator).items():
        impl = inspect.getattr_static(cls, name, None)
        assert impl is not None or name in have, f"{cls.__name__} lacks {name}"
        if callable(declared) and not isinstance(declared, property):
            assert callable(impl), f"{cls.__name__}.{name} is not a method"
            mine, theirs = _params(impl), _params(declared)
            extra = list(inspect.signature(impl).parameters.values())[len(theirs):]
            # the declared parameters, in order; more only if optional (still compatible)
            assert mine[:len(theirs)] == theirs and all(
                p.default is not inspect.Parameter.empty for p in extra), (
                f"{cls.__name__}.{name}{inspect.signature(impl)} differs from the protocol's "
                f"{inspect.signature(declared)}")
        if isinstance(declared, property):
            assert isinstance(impl, property) or name in have, f"{cls.__name__}.{name}"


def _has_members(obj, proto) -> bool:
    """Every member of ``proto`` reachable on ``obj`` by attribute access. A layer provides most of
    them by delegation (``__getattr__``), which isinstance() against a runtime protocol saw until
    Python 3.11 (hasattr) and no longer sees from 3.12 (inspect.getattr_static): 3.12 on the lent
    machine failed these tests, the layers themselves unchanged."""
    return all(hasattr(obj, name) for name in _members(proto))


def test_a_built_communicator_and_its_layers_satisfy_the_protocol():
    comm = SimComm(make_topology("ring", 6, seed=0))
    assert isinstance(comm, Communicator)
    for layer in (FiniteTimeComm(comm), NonlinearGossipComm(comm)):
        assert _has_members(layer, Communicator)
        for name, declared in _members(Communicator).items():
            if callable(declared) and not isinstance(declared, property):
                assert _params(getattr(layer, name))[:len(_params(declared)) - 1] == \
                    _params(declared)[1:], name


def test_the_asynchronous_runs_communicator_has_the_event_clock():
    from decentlearn.sim import RunConfig, Simulator
    sim = Simulator(RunConfig(peers=6, rounds=1, network="edge", asynchronous=True))
    assert isinstance(sim.comm, EventComm) and _has_members(sim.comm, EventCommunicator)
    plain = SimComm(make_topology("ring", 6, seed=0))
    assert not isinstance(plain, EventCommunicator) and not _has_members(plain, EventCommunicator)


def _comm_attributes_used(path: Path) -> set[str]:
    """Attributes read or written on ``comm`` / ``self.comm`` / ``alg.comm`` in one module."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "comm":
            used.add(node.attr)
        elif isinstance(owner, ast.Attribute) and owner.attr == "comm":
            used.add(node.attr)
    return used


def test_algorithms_use_only_declared_members():
    import decentlearn.comm as comm_package
    root = Path(decentlearn.algorithms.__file__).parent
    declared = set(_members(EventCommunicator))
    modules = sorted(root.rglob("*.py"))
    assert len(modules) > 10
    for path in modules:
        # ``from decentlearn import comm``: the package's names are not the seam
        used = _comm_attributes_used(path) - set(dir(comm_package))
        assert used <= declared, f"{path.name} uses {sorted(used - declared)} on its " \
                                 "communicator, which decentlearn.comm.protocol does not declare"


def test_the_scan_finds_an_undeclared_member(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f(self):\n    return self.comm.secret_backdoor(1)\n")
    assert "secret_backdoor" in _comm_attributes_used(planted)
    assert "secret_backdoor" not in _members(Communicator)


def test_comm_state_is_shared_not_twinned():
    assert issubclass(SimComm, CommState) and issubclass(MPIComm, CommState)
