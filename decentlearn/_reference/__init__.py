"""NumPy references of the C kernels: same signatures as decentlearn.ops, written for clarity.

The reference is the specification: tests compare every C kernel against the function of the same
name here, across dtypes, awkward shapes, peer counts and thread counts.
"""

from decentlearn._reference.gossip import gossip

__all__ = ["gossip"]
