"""The MPI backend's exchange plan, checked in one process (no MPI needed): for every rank, the
rows it receives are exactly the rows the others send it, and the C gossip kernel on its rows of
W_t over the halo buffer [own rows, received rows] reproduces those rows of the whole W_t X bit
for bit, for static, time-varying and random graphs and any number of ranks."""

import numpy as np
import pytest

from decentlearn import ops
from decentlearn import topology as topo
from decentlearn.comm.plan import RoundPlan
from decentlearn.mpi.comm import block_bounds
from decentlearn.topology import make as make_topology


@pytest.mark.parametrize("spec", ["ring", "one-peer-exponential", "complete",
                                  "random-regular:3", "epidemic:2"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
def test_plan_reproduces_the_whole_gossip(spec, ranks):
    n, dim = 10, 33
    graph = make_topology(spec, n, seed=4, weights="metropolis",
                          mixing=("row", "doubly") if spec.startswith("epidemic") else ("doubly",))
    X = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    bounds = block_bounds(n, ranks)
    for t in range(3):
        whole = ops.gossip(graph, X, t=t)
        plans = [RoundPlan(*graph.csr(t), bounds, r) for r in range(ranks)]
        for r, plan in enumerate(plans):
            lo, hi = bounds[r], bounds[r + 1]
            # What r receives from s is what s sends to r, in increasing peer order.
            for s, peers in plan.recv.items():
                assert s != r and np.array_equal(plans[s].send[r] + bounds[s], peers)
            assert sorted(plan.send) == [d for d in range(ranks) if r in plans[d].recv]
            received = np.concatenate([peers for _, peers in sorted(plan.recv.items())]) \
                if plan.recv else np.zeros(0, np.int64)
            assert np.array_equal(received, plan.halo_peers)
            halo = np.concatenate([X[lo:hi], X[plan.halo_peers]])
            mine = ops.gossip((plan.indptr, plan.indices, plan.data), halo, t=t,
                              n_cols=plan.n_cols)
            assert np.array_equal(mine, whole[lo:hi])


def test_block_bounds_and_gossip_n_cols_checks():
    assert block_bounds(10, 3).tolist() == [0, 4, 7, 10]
    assert block_bounds(4, 4).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="peers must be >= the number of MPI ranks"):
        block_bounds(2, 3)
    graph = topo.make("ring", 4)
    X = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match="n_cols is only for W given as"):
        ops.gossip(graph, X, n_cols=4)
    indptr, indices, data = graph.csr(0)
    with pytest.raises(ValueError):  # a block's rows must match the declared columns
        ops.gossip((indptr[:2], indices[:3], data[:3]), X, n_cols=5)


@pytest.mark.parametrize("spec", ["mlp:16", "cnn"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_block_of_peers_computes_what_the_whole_batch_does(spec, precision):
    """What lets a rank train only its peers: losses and gradients of rows [2, 5) computed alone
    (model.peer0 = 2) equal those rows of the whole batch, int8 stochastic rounding included."""
    from decentlearn.nn import make_model
    model = make_model(spec, (1, 8, 8) if spec == "cnn" else (64,), 10, precision=precision,
                       seed=5)
    rng = np.random.default_rng(0)
    P = 6
    params = (model.init(1)[None] + 0.01 * rng.standard_normal((P, model.dim))).astype(np.float32)
    x = rng.standard_normal((P, 4, *model.input_shape)).astype(np.float32)
    y = rng.integers(0, 10, (P, 4))
    twin = make_model(spec, model.input_shape, 10, precision=precision, seed=5)
    twin.peer0 = 2
    for _ in range(2):  # two steps: the step counter keys the rounding too
        losses, grad = model.loss_and_grad(params, x, y)
        part_l, part_g = twin.loss_and_grad(np.ascontiguousarray(params[2:5]), x[2:5], y[2:5])
        assert np.array_equal(part_l, losses[2:5]) and np.array_equal(part_g, grad[2:5])
