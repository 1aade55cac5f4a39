"""Decentralized learning algorithms and their server baselines, one file per named method.

Every algorithm is a subclass of :class:`~decentlearn.algorithms.base.Algorithm` registered under
its name; this package imports every one of them here, so ``available()`` lists them all whatever
was imported before. Where is NGC? ``decentlearn/algorithms/ngc.py``. The server baselines
(FedAvg, STC-FL, FedHiSyn, exact all-reduce) are in ``decentlearn/algorithms/server/``.
"""

from decentlearn.algorithms.base import (Algorithm, NoOptions, Sampler, available, get, make,
                                         mixing_hints, option, option_fields, register)
from decentlearn.algorithms import (  # noqa: F401 - each registers itself
    adpsgd,
    choco,
    compngc,
    d2,
    dacfl,
    dpsgd,
    dsgt,
    epidemic,
    ngc,
    pushsum,
    skewscout,
)
from decentlearn.algorithms.server import allreduce, fedavg, fedhisyn, stc_fl  # noqa: F401
from decentlearn.algorithms.adpsgd import ADPSGD
from decentlearn.algorithms.choco import CHOCO
from decentlearn.algorithms.compngc import CompNGC
from decentlearn.algorithms.d2 import D2
from decentlearn.algorithms.dacfl import DACFL
from decentlearn.algorithms.dpsgd import DPSGD
from decentlearn.algorithms.dsgt import DSGT
from decentlearn.algorithms.epidemic import EpidemicLearning
from decentlearn.algorithms.ngc import NGC
from decentlearn.algorithms.pushsum import PushSum
from decentlearn.algorithms.server.allreduce import AllReduce
from decentlearn.algorithms.server.fedavg import FedAvg
from decentlearn.algorithms.server.fedhisyn import FedHiSyn
from decentlearn.algorithms.server.stc_fl import STCFL
from decentlearn.algorithms.skewscout import SkewScout

__all__ = [
    "ADPSGD", "CHOCO", "D2", "DACFL", "DPSGD", "DSGT", "NGC", "STCFL", "Algorithm", "AllReduce",
    "CompNGC", "EpidemicLearning", "FedAvg", "FedHiSyn", "NoOptions", "PushSum", "Sampler",
    "SkewScout", "available", "get", "make", "mixing_hints", "option", "option_fields",
    "register",
]
