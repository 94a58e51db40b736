"""Shared pieces of the compiled (numba) kernels. Importing this module imports numba.

The API, kept small and stable (also used by :mod:`.log_sum_exp`):

* ``storage_view(a)`` / ``storage_dtype(dtype)``: the array numba reads, a view (never a copy):
  float16 is viewed as uint16 and bfloat16 as int16 (numba has neither type; the integer type
  tells the two apart). Every other dtype is returned as is.
* ``entry_for(kernel, *args)`` / ``frozen(dtype)``: a kernel's compiled code for the types of
  ``args``, called directly (bound calls: :func:`entry_for`'s docstring says why), and the
  read-only example array that types an input as every other path hands it to the kernels.
* ``is_float64(arr)`` (njit-callable): whether ``arr`` holds float64, a compile-time constant
  (float64 inputs are the ones summed with compensation: there is no wider type to hide in);
  ``is_bfloat16(arr)`` the same for bfloat16 storage.
* ``only_for(dtype, kernel)``: an njit-callable ``kernel(base, ...)`` that compiles (and runs)
  for ``base`` arrays of ``dtype`` only, doing nothing for the others.
* ``widen(x)`` (njit-callable): one storage element -> float64 for the float types (exact),
  int64/uint64 for the integers. ``widen32(x)``: -> float32 for float16/bfloat16/float32 (exact).
  ``widen_bf16_pair(pair_bits(arr, i))``: bfloat16 ``arr[i]`` and ``arr[i + 1]`` -> two
  float64, from one 4-byte load (no shuffle to zero-extend each element).
* ``store(out, i, v)`` (njit-callable): ``out[i] = v`` rounded once to ``out``'s storage dtype
  (float64 ``v``; float16/bfloat16 via a round-to-odd float32, i.e. one correct rounding;
  integer ``v`` wraps to the integer dtype).
* ``canonical(data, axes) -> Canonical | None``: the plan stage's canonical layout
  (:func:`onnx_reduce.plan.layout.canonical_layout`: a flat read-only base view plus kept and
  reduced dims with non-negative element strides, outermost first, no data moved) with the base
  viewed as the storage dtype; None when numba cannot read the array (non-native byte order,
  unaligned, strides not a multiple of the item size, other dtypes).
* ``parallel_section()``: the lock every caller of a ``parallel=True`` kernel holds (``with``); a
  process-wide re-entrant lock (numba's workqueue layer aborts on concurrent launches). Every
  fork (any thread, any moment) takes it and numba's compiler lock and waits for TBB's workers
  to sleep (``hold_across_fork``, called by the package's fork hook; ``release_after_fork``,
  ``release_in_child``): a child never inherits a lock held by a thread it does not have, so
  it never hangs and can launch kernels itself. ``choose_threading_layer()``, called by the
  first ``parallel_section()``: if nobody chose a threading layer yet (no
  NUMBA_THREADING_LAYER, none launched), numba's ``"forksafe"`` choice is made (TBB if
  installed, else workqueue; numba documents GNU OpenMP, its default pick here, as unsafe in
  a forked child), after making pip's TBB loadable (``tbb`` is a dependency on Linux x86-64:
  the workqueue layer launches far slower). ``num_threads()``: numba's thread
  count; ``threads_now()`` (njit-callable, in ``parallel=True`` kernels) the same, without
  keeping the kernel from the disk cache. ``chunk_counters(threads)`` and ``next_chunk(...)``
  (njit-callable): a parallel loop's chunks for whichever thread is free (its own share first).
* the packed geometries of :mod:`onnx_reduce.plan.geometry` (``packed``, ``c_packed``,
  ``memory_order_geometry``) and their accessors ``kept_dims``, ``reduced_dims``,
  ``merged_dims`` (njit-callable too); ``next_outer(idx, sizes, ost, last, o)``
  (njit-callable): an odometer over a memory-order geometry's outer dims.
* ``neumaier(s, c, x)`` / ``two_sum(a, b)`` / ``exact_add(a, b)`` (njit-callable):
  compensated adds, for callers
  compiled without fast-math (which would cancel the error terms).
* ``prefetch(arr, index)`` (njit-callable): hint the cache line of ``arr[index]`` into L2
  (``llvm.prefetch``: no fault, no effect on results).
* importing this module makes numba's on-disk cache saves safe for processes saving at once
  (:mod:`._cache_file`).
* ``REASSOC``: the fastmath flags for vectorized reductions (reassociation only: full fastmath
  breaks inf/NaN handling).

>>> v = storage_view(np.array([1.5, -2.0], np.float16))
>>> v.dtype, float(_widen_f16(v[0])), float(_widen_f16(v[1]))
(dtype('uint16'), 1.5, -2.0)
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import math
import os
import sys
import threading
import time
from typing import Any

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic, overload, register_jitable
from numba.np.ufunc import parallel as _parallel

from ...plan.geometry import (
    c_packed,
    kept_dims,
    memory_order_geometry,
    merged_dims,
    packed,
    reduced_dims,
)
from ...plan.layout import Canonical, canonical_layout
from ...spec.dtypes import bfloat16
from ._cache_file import install as _install_locked_cache_saves
from ._exp import float32_to_half, half_to_float32

__all__ = [
    "CHUNKS_PER_THREAD",
    "CPU_NAME",
    "REASSOC",
    "Canonical",
    "c_packed",
    "canonical",
    "chunk_counters",
    "entry_for",
    "frozen",
    "is_bfloat16",
    "is_float64",
    "kept_dims",
    "memory_order_geometry",
    "merged_dims",
    "neumaier",
    "next_chunk",
    "next_outer",
    "num_threads",
    "packed",
    "pair_bits",
    "parallel_section",
    "prefetch",
    "reduced_dims",
    "storage_dtype",
    "storage_view",
    "store",
    "threads_now",
    "wide_vectors",
    "wide_vectors_for",
    "widen",
    "widen32",
    "widen_bf16_pair",
]

_install_locked_cache_saves()

REASSOC = {"reassoc"}  # a set: numba rejects a frozenset
#: Parallel loops are cut in this many chunks per thread (the units a kernel finishes
#: together), taken by whichever thread is free (:func:`next_chunk`).
CHUNKS_PER_THREAD = 16

# the geometries' accessors, callable in compiled code too (inlined: slices of the array)
for _accessor in (kept_dims, reduced_dims, merged_dims):
    register_jitable(inline="always")(_accessor)

# ----------------------------------------------------------------------------- threading


def _load_pip_tbb() -> bool:
    """Make a pip-installed TBB visible to numba (Linux); whether ``libtbb.so.12`` now loads.

    The ``tbb`` wheel puts ``libtbb.so.12`` in ``<prefix>/lib``, where the dynamic loader does
    not look (numba issue #6108), so numba silently falls back to its workqueue layer, whose
    launches are far slower (docs/kernel-design.md, "From any array to two loops"). Loading
    the library once by its path makes the name resolve for numba's own ``dlopen``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL("libtbb.so.12")
        return True
    except OSError:
        pass
    try:
        files = importlib.metadata.files("tbb") or ()
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in files:
        if file.name == "libtbb.so.12":
            try:
                ctypes.CDLL(str(file.locate()))
                return True
            except OSError:
                return False
    return False


_lock = threading.RLock()
_forking = threading.local()  # .held: this thread's fork holds the locks
_TASKS = "/proc/self/task"
_SETTLE_SECONDS = 1.0
_layer_chosen = False
# threads that are not TBB's: those alive before numba's threading layer started (set when the
# layer is chosen; empty, i.e. every native thread a possible TBB worker, until then)
_not_tbb: set[int] = set()


def choose_threading_layer() -> None:
    """Once per process, before the first parallel kernel compiles, loads or runs (the first
    :func:`parallel_section` calls it): unless someone chose already (NUMBA_THREADING_LAYER,
    numba's config, a parallel launch), numba's ``"forksafe"`` choice, with pip's TBB made
    loadable; importing the kernels changes nothing in the process."""
    global _layer_chosen, _not_tbb
    with _lock:
        if _layer_chosen:
            return
        if not _parallel._is_initialized:
            _not_tbb = _task_ids()
            if "NUMBA_THREADING_LAYER" not in os.environ and config.THREADING_LAYER == "default":
                _load_pip_tbb()
                config.THREADING_LAYER = "forksafe"
        _layer_chosen = True


def _task_ids() -> set[int]:
    """The kernel thread ids of this process's threads (empty where /proc is missing)."""
    try:
        return {int(name) for name in os.listdir(_TASKS)}
    except OSError:
        return set()


def _tbb_thread_ids() -> set[int]:
    """The threads that may be TBB workers (a superset: native threads started after this
    module was imported that are not Python threads)."""
    python = {thread.native_id for thread in threading.enumerate()}
    return _task_ids() - _not_tbb - python - {threading.get_native_id()}


def _activity(tid: int) -> tuple[str, ...]:
    """A thread's state letter and context-switch counts; empty once the thread is gone."""
    try:
        with open(f"{_TASKS}/{tid}/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return ()
    wanted = ("State:", "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
    return tuple(line.split()[1] for line in lines if line.startswith(wanted))


def _all_asleep(activity: dict[int, tuple[str, ...]]) -> bool:
    return all(fields and fields[0] == "S" for fields in activity.values())


def _wait_for_tbb_to_sleep(timeout: float = _SETTLE_SECONDS) -> bool:
    """Wait until every possible TBB worker sleeps and stays asleep between two looks (no
    context switch in between): TBB takes its locks only while running, and with no kernel
    launched (the caller holds the lock) nothing wakes a sleeping worker, so none holds a lock
    a forked child would wait on forever. Whether it happened within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        tids = _tbb_thread_ids()
        before = {tid: _activity(tid) for tid in tids}
        if _all_asleep(before):
            time.sleep(0.0005)
            if {tid: _activity(tid) for tid in tids} == before and _tbb_thread_ids() == tids:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def hold_across_fork() -> None:
    """Before any fork (called by this package's fork hook, after it has taken the import
    lock): no parallel kernel runs and no kernel compiles across it, and TBB's workers are
    asleep, so the child inherits no lock held by a thread it does not have (it would wait for
    it forever). The locks are re-entrant: a fork from code holding them (a signal handler, a
    callback) goes ahead, no kernel being in flight on that thread."""
    _lock.acquire()
    global_compiler_lock.acquire()
    _forking.held = True
    if _parallel._threading_layer == "tbb":
        _wait_for_tbb_to_sleep()


def release_after_fork() -> None:
    """Release what :func:`hold_across_fork` took for this thread's fork (nothing when this
    module was loaded after it ran)."""
    if not getattr(_forking, "held", False):
        return
    _forking.held = False
    global_compiler_lock.release()
    _lock.release()


def release_in_child() -> None:
    """In the child, the forking thread (the only one) releases the locks it took and the
    threads that are not TBB's are counted afresh."""
    global _not_tbb
    _not_tbb = _task_ids()
    release_after_fork()


def parallel_section() -> threading.RLock:
    """The process-wide lock every caller of a ``parallel=True`` kernel holds around the call
    (``with parallel_section():``; the lock itself, not a generator-made context manager:
    with cold caches, as after streaming a large input, that costs tens of microseconds).

    Scheduling is numba's: each thread gets one contiguous block of the prange iterations,
    its reads in order; with TBB the calling thread runs a block whose worker has not started
    yet. Smaller blocks handed out as threads come free were up to 9% slower on 1 MiB inputs
    and, with the other core busy, faster in one cell of twelve (docs/kernel-design.md,
    "Scheduling")."""
    if not _layer_chosen:
        choose_threading_layer()
    return _lock


def num_threads() -> int:
    """How many threads numba's parallel kernels use now. Asking starts numba's threading
    layer, so the layer is chosen first (:func:`choose_threading_layer`): numba's own pick,
    GNU OpenMP here, kills every forked child."""
    if not _layer_chosen:
        choose_threading_layer()
    return numba.get_num_threads()


@intrinsic
def threads_now(typingctx):  # type: ignore[no-untyped-def]
    """njit-only (inside ``parallel=True`` kernels): :func:`num_threads`, read by calling the
    threading layer's ``get_num_threads`` by its symbol name. numba's own ``get_num_threads``
    compiles in the address of a ctypes function, which keeps a kernel from being cached on
    disk; a symbol is resolved when the kernel is loaded (parallel kernels start the threading
    layer, which registers it, before they are linked)."""
    num_threads()  # starts the (chosen) threading layer: the symbol exists from here on

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        # declared as numba's own parallel code declares it (one declaration per module),
        # returning intp; the C function returns an ``int``: keep its low 32 bits only
        fnty = ir.FunctionType(cgutils.intp_t, [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads")
        low = builder.trunc(builder.call(fn, []), ir.IntType(32))
        return builder.sext(low, ir.IntType(64))

    return types.int64(), codegen


#: int64 slots between two threads' chunk counters (128 bytes: no two share a cache line, nor
#: a pair of lines the hardware fetches together).
COUNTER_SLOTS = 16


@intrinsic
def _claim(typingctx, counters, i):  # type: ignore[no-untyped-def]
    """njit-only: ``counters[i]`` before adding 1 to it, atomically."""
    if not (isinstance(counters, types.Array) and counters.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        slot = builder.gep(array.data, [args[1]])
        one = context.get_constant(types.int64, 1)
        return builder.atomic_rmw("add", slot, one, "monotonic")

    return types.int64(counters, types.int64), codegen


@njit(cache=True, inline="always")
def chunk_counters(threads):
    """The shared state of :func:`next_chunk` for ``threads`` threads."""
    return np.zeros(threads * COUNTER_SLOTS, np.int64)


@njit(cache=True, inline="always")
def next_chunk(counters, thread, turn, threads, chunks):
    """``(c, turn)``: the next of ``chunks`` for iteration ``thread`` of a ``prange(threads)``
    (``turn`` 0 at first, then as returned; ``c == chunks`` once none is left).

    Each iteration takes the chunks of its own share (``chunks * thread // threads`` on) in
    order, then those left in the other shares: a thread that starts late, or runs slower, does
    fewer, where numba's schedule gives each thread a fixed share and the other waits for it. A
    share's counter is touched by its own thread alone until then (no cache line moves between
    the cores a chunk). The results must depend on the chunk alone, never on the thread::

        counters = chunk_counters(threads)
        for thread in prange(threads):
            c, turn = next_chunk(counters, thread, 0, threads, chunks)
            while c < chunks:
                work(c)
                c, turn = next_chunk(counters, thread, turn, threads, chunks)
    """
    thread = np.int64(thread)  # prange indices may be unsigned
    while turn < threads:
        k = (thread + turn) % threads
        c = chunks * k // threads + _claim(counters, k * COUNTER_SLOTS)
        if c < chunks * (k + 1) // threads:
            return c, turn
        turn += 1
    return chunks, turn


# ----------------------------------------------------------------------------- dtypes

_STORAGE = {np.dtype(np.float16): np.dtype(np.uint16), bfloat16: np.dtype(np.int16)}
_SERVED = frozenset(
    np.dtype(t)
    for t in (np.float32, np.float64, np.float16, bfloat16, np.int32, np.int64, np.uint32,
              np.uint64)
)


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype numba reads for ``dtype`` (float16 -> uint16, bfloat16 -> int16)."""
    dtype = np.dtype(dtype)
    return _STORAGE.get(dtype, dtype)


def storage_view(a: np.ndarray) -> np.ndarray:
    """``a`` as numba can read it: a view, never a copy."""
    storage = _STORAGE.get(a.dtype)
    return a if storage is None else a.view(storage)


def frozen(dtype: np.dtype) -> np.ndarray:
    """An empty read-only 1-D array of ``dtype``: the type of an input as the kernels take it."""
    example = np.empty(0, dtype)
    example.setflags(write=False)
    return example


def entry_for(kernel: Any, *args: Any) -> Any:
    """``kernel`` compiled for the types of ``args`` (from numba's disk cache when there), as a
    function that takes arrays of those dtypes and ranks without asking numba to type them.

    Bound calls run their kernel this way, with the read-only variant every other path runs
    (``args`` typing the input with :func:`frozen`): numba types a read-only array apart from
    a writeable one, so a call through the dispatcher would compile every kernel twice, and
    making each input read-only costs time on every call. The compiled entry checks only the item
    size of the arrays it is given; the kernels never write to their input. So bound calls pass
    float16, bfloat16 and signed integer arrays as they are where their storage dtype is typed
    (a numpy view costs ~150 ns, a tenth of a small call)."""
    return kernel.compile(tuple(numba.typeof(arg) for arg in args))


_U42 = np.uint64(42)
_F16_NORMAL_BIAS = np.uint64((1023 - 15) << 52)
_F16_SUB_BIAS = np.uint64((1023 - 14) << 52)
_F64_EXP = np.uint64(0x7FF << 52)
_F16_MIN_NORMAL = 2.0**-14


@njit
def _widen_f16(x):
    """float16 bits -> float64, exact, branch-free, by hand (``widen`` uses the hardware
    conversion :func:`._exp.half_to_float32`; kept as an independent decoder for tests)."""
    h = np.uint64(x)
    a = h & np.uint64(0x7FFF)
    sign = (h >> np.uint64(15)) << np.uint64(63)
    mag = a << _U42
    normal = np.uint64(mag + _F16_NORMAL_BIAS).view(np.float64)
    sub = np.uint64(mag + _F16_SUB_BIAS).view(np.float64) - _F16_MIN_NORMAL
    special = np.uint64((mag & np.uint64(0x3FF << 42)) | _F64_EXP).view(np.float64)
    e = a >> np.uint64(10)
    v = sub if e == 0 else (special if e == 31 else normal)
    return np.uint64(np.float64(v).view(np.uint64) | sign).view(np.float64)


@njit
def _widen_bf16(x):
    bits = np.uint32(np.uint16(x)) << np.uint32(16)
    return np.uint32(bits).view(np.float32)


def is_float64(arr):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: whether ``arr`` holds float64 (a compile-time constant)."""
    raise NotImplementedError


def is_float32(arr):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: whether ``arr`` holds float32 (a compile-time constant)."""
    raise NotImplementedError


def is_bfloat16(arr):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: whether ``arr`` holds bfloat16 storage (int16; a compile-time constant)."""
    raise NotImplementedError


def _holds(dtype):  # type: ignore[no-untyped-def]
    """The overload of a test whether an array holds ``dtype``."""
    def impl(arr):  # type: ignore[no-untyped-def]
        flag = arr.dtype == dtype
        return lambda arr: flag
    return impl


overload(is_float64, inline="always")(_holds(types.float64))
overload(is_float32, inline="always")(_holds(types.float32))
overload(is_bfloat16, inline="always")(_holds(types.int16))


def only_for(dtype: types.Type, kernel: Any) -> Any:
    """An njit-only stand-in for ``kernel(base, *args)``: ``kernel`` where ``base`` holds
    ``dtype``, nothing (None) for any other array. For a branch only that dtype takes: behind
    a run-time test every dtype would compile it."""
    def stand_in(base, *args):  # type: ignore[no-untyped-def]  # pragma: no cover - njit only
        raise NotImplementedError

    @overload(stand_in)
    def impl(base, *args):  # type: ignore[no-untyped-def]
        if base.dtype != dtype:
            return lambda base, *args: None
        return lambda base, *args: kernel(base, *args)

    stand_in.__name__ = stand_in.__qualname__ = f"{kernel.__name__}_for_{dtype}"
    return stand_in


def widen(x):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: storage element -> float64 (floats) or int64/uint64 (integers)."""
    raise NotImplementedError


def widen32(x):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: float16/bfloat16/float32 storage element -> float32."""
    raise NotImplementedError


@overload(widen)
def _widen_impl(x):
    if x == types.uint16:  # the hardware conversions, exact; why the +0.0: half_to_float32
        return lambda x: np.float64(half_to_float32(x) + np.float32(0.0))
    if x == types.int16:
        return lambda x: np.float64(_widen_bf16(x))
    if x in (types.float32, types.float64):
        return lambda x: np.float64(x)
    if x in (types.int32, types.int64):
        return lambda x: np.int64(x)
    if x in (types.uint32, types.uint64):
        return lambda x: np.uint64(x)
    return None


@overload(widen32)
def _widen32_impl(x):
    if x == types.uint16:
        return lambda x: half_to_float32(x)
    if x == types.int16:
        return lambda x: _widen_bf16(x)
    if x == types.float32:
        return lambda x: x
    return None


@njit
def _round_to_odd_f32(v):
    """float64 -> float32 rounded to odd: a later rounding to a format with at least two bits
    less precision (float16, bfloat16) then equals one correct rounding of ``v``."""
    y = np.float32(v)
    bits = np.float32(y).view(np.uint32)
    if np.float64(y) != v and not math.isnan(v) and not math.isinf(v) and (bits & 1) == 0:
        if abs(np.float64(y)) < abs(v):
            bits += np.uint32(1)
        else:
            bits -= np.uint32(1)
    return bits


@njit
def _f64_to_bf16_bits(v):
    bits = _round_to_odd_f32(v)
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN
        return np.int16(np.uint16((bits >> np.uint32(16)) | np.uint32(0x40)))
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return np.int16(np.uint16(rounded >> np.uint32(16)))


@njit
def _f64_to_f16_bits(v):
    """float64 -> float16 bits, one correct rounding: round to odd in float32, then the
    hardware's round to nearest even (:func:`._exp.float32_to_half`, faster than by hand)."""
    return float32_to_half(np.uint32(_round_to_odd_f32(v)).view(np.float32))


@njit
def _f64_to_f16_bits_by_hand(v):
    """:func:`_f64_to_f16_bits` decoded bit by bit (the former implementation, kept as an
    independent check for tests)."""
    f = _round_to_odd_f32(v)
    sign = np.uint32((f >> np.uint32(16)) & np.uint32(0x8000))
    f &= np.uint32(0x7FFFFFFF)
    if f >= np.uint32(0x7F800000):
        return np.uint16(sign | (np.uint32(0x7C00) if f == np.uint32(0x7F800000) else 0x7E00))
    if f >= np.uint32(0x477FF000):  # >= 65520: rounds to inf
        return np.uint16(sign | np.uint32(0x7C00))
    if f < np.uint32(0x38800000):  # below the smallest normal float16
        if f <= np.uint32(0x33000000):  # <= 2**-25: rounds to zero (the tie goes to even 0)
            return np.uint16(sign)
        e = f >> np.uint32(23)
        m = (f & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
        shift = np.uint32(126) - e
        q = m >> shift
        rem = m & ((np.uint32(1) << shift) - np.uint32(1))
        half = np.uint32(1) << (shift - np.uint32(1))
        if rem > half or (rem == half and (q & np.uint32(1))):
            q += np.uint32(1)
        return np.uint16(sign | q)
    e = (f >> np.uint32(23)) - np.uint32(112)
    q = (e << np.uint32(10)) | ((f & np.uint32(0x7FFFFF)) >> np.uint32(13))
    rem = f & np.uint32(0x1FFF)
    if rem > np.uint32(0x1000) or (rem == np.uint32(0x1000) and (q & np.uint32(1))):
        q += np.uint32(1)
    return np.uint16(sign | q)


def store(out, i, v):  # pragma: no cover - replaced by the overload inside njit code
    """njit-only: ``out[i] = v`` with one rounding to ``out``'s storage dtype."""
    raise NotImplementedError


@overload(store)
def _store_impl(out, i, v):
    dt = out.dtype
    if dt == types.uint16:
        def impl(out, i, v):
            out[i] = _f64_to_f16_bits(v)
    elif dt == types.int16:
        def impl(out, i, v):
            out[i] = _f64_to_bf16_bits(v)
    elif dt in (types.float32, types.float64):
        def impl(out, i, v):
            out[i] = v
    elif isinstance(dt, types.Integer):
        def impl(out, i, v):
            out[i] = v  # integer truncation wraps modulo 2**bits
    else:
        return None
    return impl


# ----------------------------------------------------------------------------- geometry


def canonical(data: np.ndarray, axes: tuple[int, ...]) -> Canonical | None:
    """:func:`onnx_reduce.plan.layout.canonical_layout` as the kernels read it: ``base`` viewed
    as the storage dtype (float16 as uint16, bfloat16 as int16). None also when numba cannot
    read the array (dtype not served, non-native byte order, unaligned).

    >>> c = canonical(np.zeros((3, 4), np.float16).T, (1,))
    >>> c.kept_sizes, c.red_sizes, c.red_strides, c.base.dtype
    ((4,), (3,), (4,), dtype('uint16'))
    """
    dtype = data.dtype
    if dtype not in _SERVED or not dtype.isnative or not data.flags.aligned:
        return None
    canon = canonical_layout(data, axes)
    if canon is not None and _STORAGE.get(dtype) is not None:
        canon.base = storage_view(canon.base)  # a fresh object: set, not copied
    return canon


@njit(cache=True, nogil=True, inline="always")
def next_outer(idx, sizes, ost, last, o):  # pragma: no cover - compiled
    """Step the odometer ``idx`` over dims ``0..last`` (``last`` fastest, ``last >= 0``) and
    return the output offset ``o`` moved along with it (``ost``: the dims' output strides).
    Dim 0 is never wrapped (the walk ends there). Written without ``break``: a ``while True``
    loop left by ``break`` made every call cost ~30 ns here, this form ~2 ns. Inlined: a call
    taking the three arrays costs six atomic reference-count updates."""
    d = last
    idx[d] += 1
    o += ost[d]
    while d > 0 and idx[d] == sizes[d]:
        o -= ost[d] * sizes[d]
        idx[d] = 0
        d -= 1
        idx[d] += 1
        o += ost[d]
    return o


def _element_pointer(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """Codegen: the address of ``arr[index]`` (the intrinsics' first two arguments), no
    bounds check, no wraparound."""
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                    wraparound=False, boundscheck=False)


@intrinsic
def pair_bits(typingctx, arr, index):  # type: ignore[no-untyped-def]
    """The 2-byte elements ``arr[index]`` and ``arr[index + 1]`` as one uint32, the first in
    the low half (x86 is little-endian): one unaligned 4-byte load, no bounds check. For
    bfloat16 storage (:func:`widen_bf16_pair`); typed for any array so that a branch on a
    compile-time dtype flag compiles everywhere."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        word = builder.bitcast(_element_pointer(context, builder, signature, args),
                               ir.IntType(32).as_pointer())
        return builder.load(word, align=1)

    return types.uint32(arr, index), codegen


@njit(cache=True, nogil=True, inline="always")
def widen_bf16_pair(w):
    """The two bfloat16 in ``w`` (:func:`pair_bits`) as float64, exact: each is the top half
    of a float32, so a shift and a mask stand in for :func:`widen`'s zero-extension (a
    shuffle, on the one port that also converts to float64)."""
    lo = np.uint32(w << np.uint32(16)).view(np.float32)
    hi = np.uint32(w & np.uint32(0xFFFF0000)).view(np.float32)
    return np.float64(lo), np.float64(hi)


@intrinsic
def prefetch(typingctx, arr, index):  # type: ignore[no-untyped-def]
    """Hint the cache line of ``arr[index]`` into L2 (``llvm.prefetch``; no fault, no effect)."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = _element_pointer(context, builder, signature, args)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 2), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, index), codegen


def _prefer_wide_vectors(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """Codegen of the vector-width marks: the attribute on the function being compiled.
    llvmlite's FunctionAttributes admits only enum attributes: the string one goes in as a set
    member (it is written out as is)."""
    set.add(builder.function.attributes, '"prefer-vector-width"="512"')
    return context.get_dummy_value()


def _no_mark(context, builder, signature, args):  # type: ignore[no-untyped-def]
    return context.get_dummy_value()


@intrinsic
def wide_vectors(typingctx):  # type: ignore[no-untyped-def]
    """Let LLVM vectorize the function being compiled with 512-bit vectors where the CPU has
    them (the ``"prefer-vector-width"="512"`` attribute): for compute-bound loops. LLVM's
    tuning for most AVX-512 CPUs prefers 256 bits, which halves a core with two 512-bit FMA
    units (docs/kernel-design.md, "Vector width"). Called in an ``inline="always"`` part, it
    marks each function the part is inlined into; no code, no effect without AVX-512."""
    return types.none(), _prefer_wide_vectors


@intrinsic
def wide_vectors_for(typingctx, arr):  # type: ignore[no-untyped-def]
    """:func:`wide_vectors` where ``arr`` holds float64, float16 or bfloat16, nothing
    otherwise: those sums' loops are bound by their adds or widening and gain from 512 bits,
    the float32 ones lose (docs/kernel-design.md, "Vector width")."""
    if not isinstance(arr, types.Array):
        return None
    wide = arr.dtype in (types.float64, types.uint16, types.int16)  # (float16/bfloat16 storage)
    codegen = _prefer_wide_vectors if wide else _no_mark
    return types.none(arr), codegen


@njit(cache=True, nogil=True)
def flat_offset(index, sizes, strides, last):
    """Element offset of flat C-order ``index`` over ``sizes[:last]``."""
    off = 0
    for d in range(last - 1, -1, -1):
        n = sizes[d]
        q = index // n
        off += (index - q * n) * strides[d]
        index = q
    return off


@njit(cache=True, nogil=True)
def neumaier(s, c, x):
    """Neumaier's compensated add: ``s + c`` gains ``x`` (the rounding error of ``s + x`` goes
    into ``c``). No fast-math here: it would cancel the error term."""
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c


@njit(cache=True, nogil=True, inline="always")
def two_sum(a, b):
    """``a + b`` and its rounding error (Knuth's TwoSum, branch-free). Inlined into numba IR:
    call it only from functions without fast-math, which would cancel the error."""
    s = a + b
    bp = s - a
    return s, (a - (s - bp)) + (b - bp)


@njit(cache=True, nogil=True, inline="always")
def ordered_two_sum(a, b, nonneg=False):
    """:func:`two_sum`'s sum and error by Fast2Sum on the operands ordered by magnitude
    (selects, so loops still vectorize): three adds instead of six; ``nonneg`` (both >= 0)
    orders them without ``abs``. The same error whenever the sum is finite; an overflowed
    sum's error is ±inf instead of NaN (callers return a non-finite sum as it is)."""
    s = a + b
    first = a >= b if nonneg else abs(a) >= abs(b)
    big = a if first else b
    small = b if first else a
    return s, (big - s) + small


#: The CPU name numba compiles for (``NUMBA_CPU_NAME``, else the host's): the name its on-disk
#: cache is kept under, so a form chosen by it always matches the cached kernel's.
CPU_NAME: str = config.CPU_NAME or llvm_binding.get_host_cpu_name()

#: Whether :func:`exact_add` of signed terms puts the operands in order of magnitude (Fast2Sum:
#: three adds, two ``abs``, a compare and two selects) rather than run TwoSum (six adds). AMD's
#: Zen cores add on two of their four floating-point pipes and do the rest on the other two;
#: Intel's AVX-512 cores run all of it on the same two ports, where six operations beat eight
#: (docs/kernel-design.md, "Arithmetic"). Read from :data:`CPU_NAME`: a kernel compiled for
#: one kind never runs on the other.
ORDERED_ADDS = CPU_NAME.startswith("znver")


@njit(cache=True, nogil=True, inline="always")
def exact_add(a, b, nonneg=False):
    """:func:`two_sum`'s sum and error by the cheaper branch-free form on this CPU:
    :func:`ordered_two_sum` where :data:`ORDERED_ADDS` says so, and always for ``nonneg``
    terms (both >= 0, e.g. squares: a compare orders them), else :func:`two_sum`. No
    fast-math here."""
    if nonneg or ORDERED_ADDS:
        return ordered_two_sum(a, b, nonneg)
    return two_sum(a, b)
