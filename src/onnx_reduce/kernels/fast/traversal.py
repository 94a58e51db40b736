"""How compiled kernels walk memory, apart from what they add up.

A walk is written once, as a template: a plain Python function that calls an accumulator's
parts, the ``acc_*`` functions below, which only document what a part must do.
:func:`specialise` binds one accumulator's parts to those names and compiles the template into
a numba function of its own, with its own entry in numba's on-disk cache: the code a copy
written out by hand for that accumulator would have (parts are ``inline="always"``, so nothing
is called per element or block that such a copy would not call). Why not a function argument
or an ``@overload`` on a marker type: a dispatcher passed as an argument misses the cache in
every new process, and inlined overloads with loops warn in parallel kernels
(``docs/kernel-design.md``, "Walks and accumulators").

Two walks: :func:`row_walks` (one output's reduced elements, in C order) and
:func:`column_walk` (the reduced rows of a block of adjacent outputs).

>>> import numpy as np
>>> walks = row_walks("example", part=_example_part, empty=zero, join=add, start=zero,
...                   fold=add)
>>> x = np.arange(12.0).reshape(3, 4)  # the sum over x[:, :2], as runs of 2 elements, 4 apart
>>> sizes, strides = np.array([3], np.int64), np.array([4], np.int64)
>>> walks.walk(x.ravel(), x.ravel(), 0, sizes, strides, 2, 1, 0, 6, 0.0, 1024)
(27.0, True)
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import types as pytypes
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from ._cache_file import kernels_digest
from ._common import flat_offset, prefetch

#: Elements between the prefetches of a contiguous block (a 64-byte line of float32).
LINE = 16
#: Rows that prefetch: a contiguous block is added STEP elements at a time, each step first
#: asking for the lines up to AHEAD elements past it, each line once (short bursts of
#: prefetches: docs/kernel-design.md, "Rows").
STEP = 256
AHEAD = 512
#: Column walks prefetch their next four row slices only when a slice is at most this many
#: bytes: the hardware prefetcher falls behind on shorter ones and keeps up with longer ones,
#: where software prefetches cost time (docs/kernel-design.md, "Column prefetch and item
#: width").
PREFETCH_SLICE_BYTES = 2048
#: A walk with ACC_ONE_SLICE adds one slice at a time, first asking for the slice this many
#: bytes of slices on (at least the next): sixteen prefetches or fewer between two slices'
#: work, where four slices asked for at once were a burst that stalled the core ("Column
#: prefetch").
PREFETCH_AHEAD_BYTES = 2048


def specialise(template: Any, name: str, flags: dict[str, Any], **parts: Any) -> Any:
    """``template`` compiled (numba, cached on disk, ``flags``) with ``parts`` bound to its
    global names.

    The compiled function is named after the template and ``name``, with a digest of the
    template's and the parts' source and of the kernel modules' files: numba's cache checks
    the template's file only, so an edited part, or a function a part calls (an ``exp``), gives
    a new name and is compiled afresh.
    """
    scope = dict(template.__globals__)
    scope.update(parts)
    digest = hashlib.sha1(inspect.getsource(template).encode())
    digest.update(kernels_digest())
    for part in parts.values():
        code = getattr(part, "py_func", None)
        try:
            digest.update(inspect.getsource(code).encode() if code else repr(part).encode())
        except OSError:  # defined where there is no source file (a doctest, a REPL)
            digest.update(marshal.dumps(code.__code__))
    qualname = f"{template.__name__}_{name}_{digest.hexdigest()[:10]}"
    fn = pytypes.FunctionType(template.__code__, scope, qualname, template.__defaults__,
                              template.__closure__)
    fn.__qualname__ = qualname
    fn.__doc__ = template.__doc__
    return njit(cache=True, **flags)(fn)


# ----------------------------------------------------------------------------- the parts


def acc_read(base, bits):
    """The view of the input the parts read: ``base`` (the values) or ``bits`` (the same memory
    as integers)."""
    raise NotImplementedError


def acc_part(seg, m):
    """Rows: the partial result of the elements of the 1-D view ``seg`` (the inner loop);
    ``m`` is the walk's parameter (e.g. a shift)."""
    raise NotImplementedError


def acc_empty():
    """Rows: the partial result of no elements."""
    raise NotImplementedError


def acc_join(p, q):
    """Rows: two partial results as one."""
    raise NotImplementedError


def acc_start():
    """Rows: the walk's state before any element."""
    raise NotImplementedError


def acc_fold(state, part):
    """Rows: the state with a block's partial result folded in (e.g. compensated)."""
    raise NotImplementedError


def acc_failed(part):
    """Rows: whether a block's partial result ends the walk (its state is then not final)."""
    raise NotImplementedError


#: Rows: whether the next block of a contiguous run is prefetched while one is added.
ACC_PREFETCH = False


def acc_slice(seg, *state):
    """Columns: one row slice ``seg`` (an element per output) added into the state, per-output
    arrays (the walk's ``state`` tuple, unpacked: the parts take the arrays themselves)."""
    raise NotImplementedError


def acc_slices4(s0, s1, s2, s3, *state):
    """Columns: four row slices added into the state at once, in that order."""
    raise NotImplementedError


#: Columns: whether slices of at most PREFETCH_SLICE_BYTES are added one at a time (else in
#: four-row groups, as longer ones).
ACC_ONE_SLICE = True


# ----------------------------------------------------------------------------- one output


def _contiguous(src, start, count, m):  # pragma: no cover - compiled
    """The part of ``count`` contiguous elements from ``start``."""
    return acc_part(src[start:start + count], m)


def _contiguous_ahead(src, bits, start, count, m, far, stop):  # pragma: no cover - compiled
    """(part, far): :func:`_contiguous` of ``count`` elements from ``start``, its parts of STEP
    elements joined in order, the lines from ``far`` up to AHEAD elements past each part (not
    past ``stop``) prefetched before it is added."""
    part = acc_empty()
    for a in range(start, start + count, STEP):
        c = min(STEP, start + count - a)
        end = min(stop, a + c + AHEAD)
        for i in range(far, end, LINE):
            prefetch(bits, i)
        far = max(far, end)
        part = acc_join(part, _contiguous(src, a, c, m))
    return part, far


def _strided(src, start, count, step, m):  # pragma: no cover - compiled
    """The part of ``count`` elements ``step`` apart from ``start``."""
    return acc_part(src[start:start + (count - 1) * step + 1:step], m)


def _runs(src, start, runs, pitch, n, step, m):  # pragma: no cover - compiled
    """The joined parts of ``runs`` runs of ``n`` elements (``step`` apart), ``pitch`` apart."""
    part = acc_empty()
    for r in range(runs):
        at = start + r * pitch
        if step == 1:
            seg = acc_part(src[at:at + n], m)
        else:
            seg = acc_part(src[at:at + (n - 1) * step + 1:step], m)
        part = acc_join(part, seg)
    return part


@njit(cache=True, inline="always")
def _prefetch_runs(bits, start, runs, pitch, n):
    """``runs`` runs of ``n`` elements ``pitch`` apart from ``start`` into cache (short runs far
    apart, as a split layout's, each on a page of its own: the hardware prefetcher does not
    follow them)."""
    for r in range(runs):
        at = start + r * pitch
        for i in range(at, at + n, LINE):
            prefetch(bits, i)


@njit(cache=True, inline="always")
def whole_runs(rs, n, run, first, left, block):
    """How many whole runs of ``n`` elements from ``run`` on are evenly spaced (along the
    innermost outer reduced dim) and fit in a block with ``left`` elements left; 0 or 1: none
    to group (one loop nest over short runs saves each run its setup)."""
    if first or rs.size == 0 or 2 * n > block:
        return 0
    along = rs[rs.size - 1]
    return min(block // n, along - run % along, left // n)


def _walk(base, bits, off, rs, rst, n, step, a, b, m, block):  # pragma: no cover - compiled
    """(state, completed) over reduced elements ``a..b`` (C order) of the output at ``off``:
    runs of ``n`` elements ``step`` apart at the offsets of the outer reduced dims ``rs`` /
    ``rst``, added ``block`` elements at a time, short evenly spaced runs grouped."""
    src = acc_read(base, bits)
    state = acc_start()
    pos = a
    while pos < b:
        run = pos // n
        first = pos - run * n
        count = min(n - first, b - pos)
        start = off + flat_offset(run, rs, rst, rs.size) + first * step
        runs = whole_runs(rs, n, run, first, b - pos, block)
        if runs > 1:  # short runs evenly spaced: one loop nest over them
            pitch = rst[rs.size - 1]
            if ACC_PREFETCH and step == 1 and 2 * runs <= whole_runs(rs, n, run, 0, b - pos,
                                                                     2 * runs * n):
                _prefetch_runs(bits, start + runs * pitch, runs, pitch, n)  # the next group
            part = _runs(src, start, runs, pitch, n, step, m)
            if acc_failed(part):
                return state, False
            state = acc_fold(state, part)
            pos += runs * n
            continue
        done = 0
        far = start
        while done < count:
            c = min(block, count - done)
            if step == 1 and ACC_PREFETCH:  # the lines ahead into cache meanwhile
                part, far = _contiguous_ahead(src, bits, start + done, c, m, far, start + count)
            elif step == 1:
                part = _contiguous(src, start + done, c, m)
            else:
                part = _strided(src, start + done * step, c, step, m)
            if acc_failed(part):
                return state, False
            state = acc_fold(state, part)
            done += c
        pos += count
    return state, True


class RowWalks(NamedTuple):
    """One accumulator's walks of one output's reduced elements."""

    contiguous: Any  #: (src, start, count, m) -> part
    contiguous_ahead: Any  #: (src, bits, start, count, m, far, stop) -> (part, far)
    strided: Any  #: (src, start, count, step, m) -> part
    runs: Any  #: (src, start, runs, pitch, n, step, m) -> part
    walk: Any  #: (base, bits, off, rs, rst, n, step, a, b, m, block) -> (state, completed)


@njit(cache=True, inline="always")
def _never(part):
    return False


@njit(cache=True, inline="always")
def _read_base(base, bits):
    return base


def row_walks(name: str, *, part: Any, empty: Any, join: Any, start: Any, fold: Any,
              failed: Any = _never, read: Any = _read_base, prefetch_ahead: bool = False,
              flags: dict[str, Any] | None = None) -> RowWalks:
    """The walks of one accumulator, given its parts (``acc_part``, ...); ``flags`` are the
    inner loops' numba options (e.g. reassociation). The walk itself is inlined into its
    callers, which hold it in a loop over outputs: no call per output."""
    parts = {"acc_part": part, "acc_empty": empty, "acc_join": join}
    inner = flags or {}
    contiguous = specialise(_contiguous, name, inner, **parts)
    strided = specialise(_strided, name, inner, **parts)
    runs = specialise(_runs, name, inner, **parts)
    ahead = specialise(_contiguous_ahead, name, {}, acc_empty=empty, acc_join=join,
                       _contiguous=contiguous)
    walk = specialise(_walk, name, {"inline": "always"}, acc_read=read, acc_start=start,
                      acc_fold=fold, acc_failed=failed, ACC_PREFETCH=prefetch_ahead,
                      _contiguous=contiguous, _contiguous_ahead=ahead, _strided=strided,
                      _runs=runs)
    return RowWalks(contiguous, ahead, strided, runs, walk)


# ----------------------------------------------------------------------------- adjacent outputs


def _slice(src, start, width, step, state):  # pragma: no cover - compiled
    """One row slice of ``width`` outputs ``step`` apart into the state."""
    if step == 1:
        acc_slice(src[start:start + width], *state)
    else:
        acc_slice(src[start:start + (width - 1) * step + 1:step], *state)


def _slices4(src, start, pitch, width, step, state):  # pragma: no cover - compiled
    """Four row slices ``pitch`` apart into the state at once (contiguous slices apart: a
    slice with a step is strided to numba even when the step is 1)."""
    if step == 1:
        acc_slices4(src[start:start + width], src[start + pitch:start + pitch + width],
                    src[start + 2 * pitch:start + 2 * pitch + width],
                    src[start + 3 * pitch:start + 3 * pitch + width], *state)
    else:
        span = (width - 1) * step + 1
        acc_slices4(src[start:start + span:step], src[start + pitch:start + pitch + span:step],
                    src[start + 2 * pitch:start + 2 * pitch + span:step],
                    src[start + 3 * pitch:start + 3 * pitch + span:step], *state)


@njit(cache=True, inline="always")
def _prefetch_slice(bits, start, width):
    """One row slice's lines into cache (the hardware prefetcher alone leaves short slices,
    e.g. the 1 KiB of a middle axis, waiting on memory: it does not cross a 4 KiB page)."""
    for i in range(start, start + width, 64 // bits.itemsize):
        prefetch(bits, i)


def _column_walk(base, bits, off, width, step, rs, rst, a, b, state):  # pragma: no cover
    """Reduced rows ``a..b`` (C order over ``rs`` / ``rst``) of ``width`` adjacent outputs
    (``step`` apart, the first at ``off``) into the state: four rows at a time where the
    innermost reduced dim has them (one load and store of the accumulators per four elements),
    the next four prefetched when a slice is at most PREFETCH_SLICE_BYTES; with ACC_ONE_SLICE such
    slices go one at a time instead, each first asking for the slice PREFETCH_AHEAD_BYTES on."""
    src = acc_read(base, bits)
    nd = rs.size
    index = np.zeros(nd, np.int64)
    rest = a
    for d in range(nd - 1, -1, -1):
        q = rest // rs[d]
        index[d] = rest - q * rs[d]
        rest = q
    start = off + flat_offset(a, rs, rst, nd)
    last = nd - 1
    row = a
    slice_bytes = width * bits.itemsize
    prefetching = step == 1 and slice_bytes <= PREFETCH_SLICE_BYTES
    single = prefetching and ACC_ONE_SLICE
    ahead = max(1, PREFETCH_AHEAD_BYTES // slice_bytes) if single else 4
    while row < b:
        count = 4 if (not single and rs[last] - index[last] >= 4 and b - row >= 4) else 1
        if single:  # (contiguous: a slice with a run-time step cost 25% in cache)
            if rs[last] - index[last] > ahead and b - row > ahead:
                _prefetch_slice(bits, start + ahead * rst[last], width)
            acc_slice(src[start:start + width], *state)
        elif count == 4:
            if prefetching and rs[last] - index[last] >= 8 and b - row >= 8:
                for r in range(4):
                    _prefetch_slice(bits, start + (4 + r) * rst[last], width)
            _slices4(src, start, rst[last], width, step, state)
        else:
            _slice(src, start, width, step, state)
        row += count
        index[last] += count
        start += count * rst[last]
        d = last
        while index[d] >= rs[d]:  # carry
            start -= rs[d] * rst[d]
            index[d] = 0
            d -= 1
            if d < 0:
                break
            index[d] += 1
            start += rst[d]


def column_walk(name: str, slice_part: Any, slices4_part: Any, read: Any = _read_base,
                one_slice: bool = True) -> Any:
    """The walk of a block of adjacent outputs over their reduced rows for one accumulator,
    given its parts ``acc_slice``, ``acc_slices4`` and ``acc_read``; ``one_slice=False`` keeps
    short slices in four-row groups (an accumulator so cheap that, in cache, the group's one
    load and store of its state outweighs the prefetch's spacing)."""
    one = specialise(_slice, name, {}, acc_slice=slice_part)
    four = specialise(_slices4, name, {}, acc_slices4=slices4_part)
    return specialise(_column_walk, name, {}, acc_read=read, acc_slice=slice_part, _slice=one,
                      _slices4=four, ACC_ONE_SLICE=one_slice)


# ----------------------------------------------------------------------------- common parts


@njit(cache=True, inline="always")
def zero():
    """``acc_empty`` / ``acc_start`` of a plain float64 sum."""
    return 0.0


@njit(cache=True, inline="always")
def add(p, q):
    """``acc_join`` / ``acc_fold`` of a plain float64 sum."""
    return p + q


@njit(cache=True, inline="always")
def _example_part(seg, m):
    total = 0.0
    for i in range(seg.size):
        total += seg[i]
    return total
