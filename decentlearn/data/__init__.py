"""Data sets, partitions of a training set among peers, and downloads.

``load_dataset("digits")`` gives the embedded UCI 8x8 digits (no network needed);
``make_partition("dirichlet:0.5", ds.y_train, n_peers)`` splits it among peers and
``skew_report`` describes how non-IID the split is; ``shakespeare`` reads LEAF's per-speaker
next-character data (decentlearn.data.shakespeare). See docs/data.md.
"""

# Every module that registers a data set or a partition, imported here so that both registries
# are complete whatever is imported first (the readers cifar, digits, idx and download register
# nothing).
from decentlearn.data import datasets, partition, shakespeare, synthetic  # noqa: F401
from decentlearn.data.arrays import ArrayDataset
from decentlearn.data.datasets import (
    Dataset,
    DatasetLoader,
    available_datasets,
    check_dataset_spec,
    download_dir,
    load_dataset,
    register_dataset,
    standardize_images,
)
from decentlearn.data.download import (
    DATASET_FILES,
    ChecksumError,
    DownloadError,
    RemoteFile,
    download,
)
from decentlearn.data.idx import read_idx
from decentlearn.data.partition import (
    Partition,
    PartitionContext,
    available_partitions,
    check_partition_spec,
    label_skew,
    make_partition,
    register_partition,
    skew_report,
)
from decentlearn.data.synthetic import make_synthetic

__all__ = [
    "ArrayDataset",
    "DATASET_FILES",
    "ChecksumError",
    "Dataset",
    "DatasetLoader",
    "DownloadError",
    "Partition",
    "PartitionContext",
    "RemoteFile",
    "available_datasets",
    "available_partitions",
    "check_dataset_spec",
    "check_partition_spec",
    "download",
    "download_dir",
    "label_skew",
    "load_dataset",
    "make_partition",
    "make_synthetic",
    "read_idx",
    "register_dataset",
    "register_partition",
    "skew_report",
    "standardize_images",
]
