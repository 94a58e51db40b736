"""Inputs read in chunks: a ``.npy`` file of any size or a zarr store, as a dask array whose
tasks read one chunk each (bounded memory; nothing is read until the result is computed).

A ``.npy`` chunk is a slab of whole rows (C order; whole columns in Fortran order): one
contiguous run of the file. Each task memory-maps the file, copies its slab and drops the map,
so a task holds one chunk and the graph pickles as a path (process and cluster workers read the
file themselves: it must be on a file system they share).

zarr stores are read with ``zarr.open`` in either format (v2 or v3; zarr-python 3 reads both);
chunks are whole multiples of the store's own chunks, about ``chunk_bytes`` each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserError, one_line, shown

#: Files that mark a directory as a zarr store (v3, then v2 array and group metadata).
ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup")

#: What zarr raises for a damaged or unreadable store (metadata that does not parse or lies).
_ZARR_ERRORS = (ValueError, TypeError, KeyError, OSError, NotImplementedError, IndexError)


def is_zarr(path: Path) -> bool:
    """Whether ``path`` names a zarr store: a ``.zarr`` suffix or a directory holding zarr
    metadata."""
    path = Path(path)
    if path.suffix.lower() == ".zarr":
        return True
    try:
        return path.is_dir() and any((path / name).exists() for name in ZARR_MARKERS)
    except OSError:  # a name the system refuses (too long): not a store; the reader says why
        return False


@dataclass(frozen=True)
class NpySlabs:
    """The array of a ``.npy`` file, read on demand: ``reader[index]`` copies those elements
    out of a fresh memory map (so nothing stays mapped between tasks), in ``dtype`` (the file's
    in the machine's byte order: the kernels read native numbers)."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index: object) -> np.ndarray:
        mapped = np.load(self.path, mmap_mode="r", allow_pickle=False)
        try:
            return np.array(mapped[index], dtype=self.dtype, copy=True)
        finally:
            del mapped


def open_npy_chunks(path: Path, data: np.memmap | np.ndarray, chunk_bytes: int):
    """``data`` (the memory map of ``path``, already checked) as a dask array of slabs of
    about ``chunk_bytes``."""
    import dask.array as da

    chunks = slab_chunks(data.shape, data.dtype.itemsize, chunk_bytes,
                         fortran=_is_fortran(data))
    native = data.dtype.newbyteorder("=")
    reader = NpySlabs(str(Path(path).resolve()), tuple(data.shape), native)
    return da.from_array(reader, chunks=chunks, asarray=False, fancy=False,
                         name=f"npy-{_token(path)}")


def slab_chunks(
    shape: tuple[int, ...], itemsize: int, chunk_bytes: int, *, fortran: bool = False
) -> tuple[int, ...]:
    """Chunk sizes along each axis: whole trailing axes (leading ones in Fortran order) as long
    as they fit ``chunk_bytes``, then a split of the next axis; one element at least.

    >>> slab_chunks((1000, 100, 10), 8, 80_000)
    (10, 100, 10)
    >>> slab_chunks((1000, 100, 10), 8, 800)
    (1, 10, 10)
    >>> slab_chunks((1000, 100), 8, 80_000, fortran=True)
    (1000, 10)
    >>> slab_chunks((0, 10**17), 8, 800)  # no elements: one chunk (not 10**15 empty ones)
    (1, 100000000000000000)
    """
    if math.prod(shape) == 0:
        return tuple(max(s, 1) for s in shape)
    order = range(len(shape)) if fortran else range(len(shape) - 1, -1, -1)
    chunks = list(shape)
    room = max(chunk_bytes // max(itemsize, 1), 1)
    for axis in order:
        size = max(shape[axis], 1)
        if size <= room:
            room //= size
            continue
        chunks[axis] = max(room, 1)
        for outer in (a for a in order if (a > axis if fortran else a < axis)):
            chunks[outer] = 1
        break
    return tuple(max(min(c, s), 1) for c, s in zip(chunks, shape, strict=True))


def in_memory_chunks(data: np.ndarray, chunk_bytes: int):
    """An array already in memory (a decoded ``.pb``) as a dask array of slabs."""
    import dask.array as da

    native = np.asarray(data, dtype=data.dtype.newbyteorder("="))
    return da.from_array(native, chunks=slab_chunks(native.shape, native.itemsize, chunk_bytes))


def _is_fortran(data: np.ndarray) -> bool:
    return data.ndim > 1 and bool(data.flags.f_contiguous) and not data.flags.c_contiguous


def _token(path: Path) -> str:
    from dask.base import tokenize

    stat = Path(path).stat()
    return tokenize(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


def open_zarr(path: Path, chunk_bytes: int):
    """The zarr array at ``path`` as a dask array of chunks of about ``chunk_bytes``."""
    import dask.array as da

    array = _zarr_array(Path(path))
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "biuf":
        raise UserError(f"{shown(path)}: unsupported zarr dtype {dtype.str!r} "
                        "(onnx-reduce reduces booleans, integers and floats)")
    chunks = zarr_chunks(tuple(array.shape), dtype.itemsize, tuple(array.chunks), chunk_bytes)
    reader = ZarrChunks(shown(path), array, dtype.newbyteorder("="))
    return da.from_array(reader, chunks=chunks, asarray=False, fancy=False,
                         name=f"zarr-{_token(path)}")


@dataclass(frozen=True)
class ZarrChunks:
    """A zarr array read on demand, in the machine's byte order; a chunk that cannot be read
    or decoded (damaged, truncated, gone) raises ``ValueError`` naming the store."""

    name: str
    array: object
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def ndim(self) -> int:
        return len(self.array.shape)

    def __getitem__(self, index: object) -> np.ndarray:
        try:
            block = self.array[index]
        except MemoryError:
            raise
        except Exception as error:  # codecs raise RuntimeError, ValueError, OSError...
            raise ValueError(f"{self.name}: cannot read a chunk "
                             f"({one_line(str(error)) or type(error).__name__})") from None
        return np.asarray(block, dtype=self.dtype)


def _zarr_array(path: Path):
    import zarr

    if not path.exists():
        raise UserError(f"{shown(path)}: no such zarr store")
    if not path.is_dir():
        raise UserError(f"{shown(path)}: not a zarr store (a zarr store is a directory)")
    try:
        node = zarr.open(store=str(path), mode="r")
    except _ZARR_ERRORS as error:
        raise UserError(f"{shown(path)}: not a readable zarr store "
                        f"({one_line(str(error)) or type(error).__name__})") from error
    if not isinstance(node, zarr.Array):
        names = ", ".join(sorted(node.array_keys())[:5]) if hasattr(node, "array_keys") else ""
        hint = f" (its arrays: {names}; pass DIR/NAME)" if names else ""
        raise UserError(f"{shown(path)}: is a zarr group, not an array{shown(hint)}")
    return node


def zarr_chunks(
    shape: tuple[int, ...], itemsize: int, stored: tuple[int, ...], chunk_bytes: int
) -> tuple[int, ...]:
    """Whole multiples of the store's chunks, grown along the trailing axes first up to about
    ``chunk_bytes`` (never beyond the array).

    >>> zarr_chunks((1000, 1000), 8, (10, 10), 80_000)
    (10, 1000)
    >>> zarr_chunks((1000, 1000), 8, (100, 1000), 80_000)
    (100, 1000)
    """
    chunks = [max(min(c, s), 1) for c, s in zip(stored, shape, strict=True)]
    for axis in range(len(shape) - 1, -1, -1):
        others = math.prod(chunks) // chunks[axis] * itemsize
        fit = max(chunk_bytes // max(others, 1), 1)
        grown = max(fit // chunks[axis], 1) * chunks[axis]
        chunks[axis] = max(min(grown, shape[axis]), 1)
        if math.prod(chunks) * itemsize >= chunk_bytes:
            break
    return tuple(chunks)
