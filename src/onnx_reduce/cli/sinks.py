"""Outputs written from a lazy (dask) result without holding it whole: a ``.npy`` file filled
chunk by chunk through a memory map, or a zarr v3 store; both atomic (a temporary next to the
destination, renamed into place on success, removed on failure) and never over an existing
output unless ``force``.

Each task opens the temporary itself (the target pickles as a path), so process and cluster
workers write in parallel: the destination must be on a file system they share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..spec.dtypes import bfloat16
from .errors import UserError
from .files import atomic_directory, atomic_path
from .sources import slab_chunks
from .tensors import refuse_npy_bfloat16, save_npy

#: Computes a dask collection (the scheduler and progress bar chosen on the command line).
Compute = Callable[[Any], Any]


@dataclass(frozen=True)
class NpyRegions:
    """A ``.npy`` file whose header and size are written: ``target[index] = block`` writes
    that region through a memory map opened for the call."""

    path: str

    def __setitem__(self, index: object, block: np.ndarray) -> None:
        if np.size(block) == 0:
            return
        mapped = np.load(self.path, mmap_mode="r+", allow_pickle=False)
        try:
            mapped[index] = block
            mapped.flush()
        finally:
            del mapped


def write_npy(path: Path, result, *, force: bool, compute: Compute) -> None:
    """Stream the dask array ``result`` into the ``.npy`` file ``path``."""
    import dask.array as da

    refuse_npy_bfloat16(path, result.dtype)
    with atomic_path(path, force=force) as temporary:
        if result.size == 0:  # (numpy cannot memory-map an empty file)
            save_npy(temporary, np.empty(result.shape, result.dtype))
            return
        header_and_space = np.lib.format.open_memmap(
            temporary, mode="w+", dtype=result.dtype, shape=result.shape)
        del header_and_space  # (the file has its header and full size, sparse; unmapped)
        compute(da.store(result, NpyRegions(str(temporary)), lock=False, compute=False))


def write_zarr(path: Path, result, *, force: bool, compute: Compute, chunk_bytes: int) -> None:
    """Stream the dask array ``result`` into a new zarr v3 store at ``path``, in regular chunks
    of about ``chunk_bytes``."""
    import dask.array as da
    import zarr

    if result.dtype == bfloat16:
        raise UserError(f"{path}: zarr has no bfloat16 data type; write a .pb file instead")
    chunks = slab_chunks(result.shape, result.dtype.itemsize, chunk_bytes)
    with atomic_directory(path, force=force) as temporary:
        target = zarr.create_array(store=str(temporary), shape=result.shape, dtype=result.dtype,
                                   chunks=chunks, zarr_format=3, overwrite=True)
        if result.size:
            compute(da.store(result.rechunk(chunks), target, lock=False, compute=False))
