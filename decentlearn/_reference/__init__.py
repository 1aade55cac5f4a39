"""NumPy references of the C kernels: the twins of decentlearn.ops, written for clarity.

The reference is the specification: tests compare every C kernel against the function of the same
name and signature here, across dtypes, awkward shapes, peer counts and thread counts. One module
per kernel family, named like its C file in ``csrc/`` and its wrapper in ``decentlearn.ops``
(``gossip``, ``rng``, ``bitpack``, ``natural``, ``topk``, ``stc``, ``quant``, ``gemm_s8``, ``nn``,
``optim``, ``conv``, ``pool``, ``copy``, ``consensus``, ``peak``), plus ``wire``: the decoders of
every compressor's wire format. Nothing here imports ``decentlearn.ops`` or ``decentlearn._core``.
"""
