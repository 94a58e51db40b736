"""The compiled stages of the exact recomputations: ReduceLogSumExp (:mod:`..exact_lse`) and
ReduceLogSum (:mod:`..exact_log_sum`) of float64 rows in double-double (about 104 bits) and
triple-double (:mod:`.triple_double`, about 150 bits), decided where the bound allows, else
left to the next stage, then mpmath.

150 bits decide the rounding of results double-double's 104 cannot: an LSE within ~2**-34 of
0, such as that of log-softmax rows (~1e-16), or the log of a float64 sum near 1; the others
(every float32, float16 and bfloat16 one) take double-double, at a third of the cost. Rows are
taken a block of :data:`BLOCK` elements at a time (short rows vectorize across rows), blocks
shared out across numba's threads; a row longer than a block is cut into chunks of one,
summed pairwise across chunks, so scratch stays at a block per thread. About 40 ns per element
on one core in triple-double, 12 in double-double (mpmath: ~25 us; the numpy double-double
stage: ~0.9 us).

Every stage returns ``(head, tail, bound)`` per row: the result is ``head + tail`` within
``bound`` (``tail`` rounds the two low parts: the bound's ``2**-104 |head|`` covers it).

* :func:`td_lse_rows` (rows with a finite maximum: no NaN, no +inf): ``x - m`` exact, the terms
  ``exp(x - m)``, their sum and log; bound ``2**-140 (2 + log2 n + |m| + |L|) + n 2**-1000``
  (measured against mpmath: results near 0 within 2**-160 per unit of
  ``2 + log2 n + |m| + |L|``).
* :func:`td_log_sum_rows` (finite rows): the sum ``S`` within
  ``E = 2**-140 (2 + log2 n) sum|x| + n 2**-1070`` and its log, bound
  ``E / (S - E) + 2**-140 (1 + |r|)``; inf where ``S <= E`` or ``S`` is outside
  (2**-900, 2**900). A sum of exactly 1 (its log 0 is the one result no bound
  decides) is proven with Shewchuk's exact partials and given bound 0.
* :func:`dd_lse_rows`, :func:`dd_log_sum_rows`: the same in double-double, bounds
  ``2**-96`` per unit and ``E = 2**-100 (2 + log2 n) sum|x| + ...`` (sums from 0.75).

>>> import numpy as np
>>> a = -8.75651076269652e-27  # the float64 nearest log1p(-exp(-60))
>>> head, tail, bound = td_lse_rows(np.array([[-60.0, a]]))
>>> bool(0.0 < abs(head[0]) < 1e-40)  # log(exp(-60) + exp(a)): a's rounding error, ~2**-139
True
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from . import triple_double as td
from ._common import num_threads, parallel_section, threads_now, two_sum

__all__ = ["BLOCK", "DD_BOUND", "DD_SUM_BOUND", "TD_BOUND", "dd_log_sum_rows", "dd_lse_rows",
           "td_log_sum_rows", "td_lse_rows", "warm"]

#: The triple-double stage's error bound per unit of ``2 + log2 n + |m| + |L|``.
TD_BOUND = 2.0**-140
#: The double-double stage's: 16 times its derivation (exp and log within 2**-100, each
#: pairwise add 2**-104, the last add 2**-104 of |m| + |L|).
DD_BOUND = 2.0**-96
#: The double-double sums' error bound per unit of ``(2 + log2 n) sum|x|`` (each pairwise
#: add within 3 u**2 of its result, 2**-104.4, kept 16 times; triple-double's is TD_BOUND).
DD_SUM_BOUND = 2.0**-100
#: Elements per block of rows, and per chunk of a longer row.
BLOCK = 1 << 14
#: What a kernel computes of each row (DD_*: in double-double).
LSE, LOG_SUM, DD_LSE, DD_LOG_SUM = 0, 1, 2, 3
_LIVE = -745.0  # exp of a gap at or under this is below the smallest subnormal: a zero term
#: Sums whose log LogSum takes here (:func:`.triple_double.log_all`'s range).
_LOG_LOW, _LOG_HIGH = 2.0**-900, 2.0**900


def td_lse_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of each row's LSE in triple-double (module docstring)."""
    return _rows(rows, LSE)


def dd_lse_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of each row's LSE in double-double: :func:`td_lse_rows` at a third
    of the cost, bound ``2**-96 (2 + log2 n + |m| + |L|) + n 2**-1000``; decides all but
    results within ~2**-40 of 0 (module docstring)."""
    return _rows(rows, DD_LSE)


def td_log_sum_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of the log of each row's sum in triple-double (module docstring)."""
    return _rows(rows, LOG_SUM)


def dd_log_sum_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of the log of each row's sum in double-double: the sum within
    ``E = 2**-100 (2 + log2 n) sum|x| + n 2**-1070``, bound ``E / (S - E) + 2**-99 (1 + |r|)``;
    inf where ``S <= E`` or ``S`` is outside (0.75, 2**900); a sum of exactly 1 gives 0, exactly.
    Decides float32/float16/bfloat16 sums near 1."""
    return _rows(rows, DD_LOG_SUM)


def warm() -> None:
    """Compile (or load) every kernel here: blocks of rows on one thread and on all, a long
    row's chunks (:mod:`..warm`)."""
    for shape in ((1, 2), (BLOCK, 2), (1, 2 * BLOCK + 1)):
        td_lse_rows(np.zeros(shape))
        dd_lse_rows(np.zeros(shape))
        dd_log_sum_rows(np.ones(shape))


def _rows(rows: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``kind`` of each row of a C-contiguous float64 array: blocks of rows, on all threads
    from two blocks; rows longer than a block one at a time, chunks on all threads."""
    count, n = rows.shape
    out = np.empty((3, count))
    if n > BLOCK:
        for i in range(count):
            _long_row(rows[i], kind, out[:, i:i + 1])
        return out[0], out[1], out[2]
    per = BLOCK // n
    if count >= 2 * per and num_threads() > 1:
        with parallel_section():
            _threaded_blocks(rows, per, kind, out)
    else:
        _blocks(rows, per, kind, 0, count, out)
    return out[0], out[1], out[2]


def _long_row(row: np.ndarray, kind: int, out: np.ndarray) -> None:
    """out[:, 0] = (head, tail, bound) of one row longer than a block: each chunk's pairwise
    sum (all threads), then theirs, then the finish."""
    chunks = -(-row.size // BLOCK)
    sums = np.empty((3, chunks))
    peak = 0.0 if _is_log_sum(kind) else float(row.max())
    if chunks >= 2 and num_threads() > 1:
        with parallel_section():
            _threaded_chunk_sums(row, peak, kind, sums)
    else:
        _chunk_sums(row, peak, kind, 0, chunks, sums)
    _finish_long_row(row, peak, kind, sums, out)


# ----------------------------------------------------------------------------- kernels


@njit(cache=True, parallel=True)
def _threaded_blocks(rows, per, kind, out):
    """:func:`_blocks` on runs of whole blocks, one run per thread."""
    blocks = (rows.shape[0] + per - 1) // per
    runs = min(blocks, threads_now())
    for c in prange(runs):
        i = np.int64(c)  # prange indices may be unsigned
        first = blocks * i // runs * per
        _blocks(rows, per, kind, first, min(rows.shape[0], blocks * (i + 1) // runs * per), out)


@njit(cache=True)
def _blocks(rows, per, kind, first, stop, out):
    """out[:, i] = (head, tail, bound) of ``kind`` for rows first to stop, ``per`` rows at a
    time: every row's terms, one exp over the block, each row's pairwise sum, the finish."""
    n = rows.shape[1]
    t, r = np.empty((3, per * n)), np.empty((3, per * n))
    keep, k, peaks, sums = np.empty(per * n), np.empty(per * n), np.empty(per), np.empty((3, per))
    for start in range(first, stop, per):
        block = rows[start:min(stop, start + per)]
        m = block.shape[0]
        for i in range(m):
            peaks[i] = _terms(block[i], kind, t, keep, i * n)
        _exp(t, keep, k, r, m * n, kind)
        for i in range(m):
            sums[0, i], sums[1, i], sums[2, i] = _pairwise(t, i * n, n, kind)
        _finish(block, kind, peaks, sums, (t, r, keep, k), out[:, start:start + m])


@njit(cache=True, inline="always")
def _is_log_sum(kind):
    return kind in (LOG_SUM, DD_LOG_SUM)


@njit(cache=True, inline="always")
def _exp(t, keep, k, r, n, kind):
    """The terms' exp for ``kind`` in place (:func:`.triple_double.exp_all` or its
    double-double twin); none for LogSum."""
    if kind == LSE:
        td.exp_all(t, keep, k, r, n)
    elif kind == DD_LSE:
        td.exp_all_dd(t, keep, n)


@njit(cache=True, inline="always")
def _pairwise(t, lo, n, kind):
    """The pairwise sum of t[:, lo:lo + n] in ``kind``'s precision, as three parts."""
    if kind in (DD_LSE, DD_LOG_SUM):
        h, low = td.pairwise_sum_dd(t, lo, n)
        return h, low, 0.0
    return td.pairwise_sum(t, lo, n)


@njit(cache=True)
def _terms(row, kind, t, keep, lo):
    """Row ``row``'s terms into t[:, lo:lo + row.size], before any exp: for LSE the gaps
    ``x - peak`` exactly in two parts (those at or under :data:`_LIVE` 0, with keep 0), for
    LogSum the elements; returns the peak (LSE) or 0."""
    if _is_log_sum(kind):
        for j in range(row.size):
            t[0, lo + j], t[1, lo + j], t[2, lo + j] = row[j], 0.0, 0.0
        return 0.0
    peak = -np.inf
    for j in range(row.size):
        peak = max(peak, row[j])
    _gaps(row, peak, t, keep, lo)
    return peak


@njit(cache=True)
def _gaps(row, peak, t, keep, lo):
    """t[0] + t[1] = x - peak exactly at lo.. (:func:`_terms`)."""
    for j in range(row.size):
        dh, dl = two_sum(row[j], -peak)
        live = dh > _LIVE
        t[0, lo + j], t[1, lo + j], keep[lo + j] = (dh, dl, 1.0) if live else (0.0, 0.0, 0.0)


@njit(cache=True, parallel=True)
def _threaded_chunk_sums(row, peak, kind, sums):
    """:func:`_chunk_sums` on runs of chunks, one run per thread."""
    chunks = sums.shape[1]
    runs = min(chunks, threads_now())
    for c in prange(runs):
        i = np.int64(c)
        _chunk_sums(row, peak, kind, chunks * i // runs, chunks * (i + 1) // runs, sums)


@njit(cache=True)
def _chunk_sums(row, peak, kind, first, stop, sums):
    """sums[:, c] = the pairwise sum of chunk c's terms (:func:`_terms`), chunks first to
    stop, each :data:`BLOCK` elements of ``row`` (the last one fewer)."""
    t, r, keep, k = np.empty((3, BLOCK)), np.empty((3, BLOCK)), np.empty(BLOCK), np.empty(BLOCK)
    for c in range(first, stop):
        chunk = row[c * BLOCK:min(row.size, (c + 1) * BLOCK)]
        if _is_log_sum(kind):
            _terms(chunk, kind, t, keep, 0)
        else:
            _gaps(chunk, peak, t, keep, 0)
            _exp(t, keep, k, r, chunk.size, kind)
        sums[0, c], sums[1, c], sums[2, c] = _pairwise(t, 0, chunk.size, kind)


@njit(cache=True)
def _finish_long_row(row, peak, kind, sums, out):
    """out[:, 0] of one long row from its chunks' sums."""
    total = np.empty((3, 1))
    total[0, 0], total[1, 0], total[2, 0] = _pairwise(sums, 0, sums.shape[1], kind)
    scratch = (np.empty((3, 1)), np.empty((3, 1)), np.empty(1), np.empty(1))
    _finish(row.reshape((1, row.size)), kind, np.full(1, peak), total, scratch, out)


@njit(cache=True)
def _finish(rows, kind, peaks, sums, scratch, out):
    """out[:, i] = (head, tail, bound) of each row from its sum ``sums[:, i]``."""
    if kind == LSE:
        _finish_lse(rows, peaks, sums, scratch, out)
    elif kind == DD_LSE:
        _finish_dd_lse(rows, peaks, sums, scratch, out)
    else:
        _finish_log_sum(rows, sums, scratch, out, kind)


@njit(cache=True)
def _finish_lse(rows, peaks, sums, scratch, out):
    """LSE: peak + log(sum)."""
    e, r, keep, k = scratch
    m, n = rows.shape
    td.log_all(sums, e, keep, k, r, m)
    for i in range(m):
        r0, r1, r2 = td.add(peaks[i], 0.0, 0.0, sums[0, i], sums[1, i], sums[2, i])
        units = 2.0 + math.log2(n) + abs(peaks[i]) + abs(sums[0, i])
        out[0, i], out[1, i] = r0, r1 + r2
        out[2, i] = TD_BOUND * units + n * 2.0**-1000 + 2.0**-104 * abs(r0)


@njit(cache=True)
def _finish_dd_lse(rows, peaks, sums, scratch, out):
    """LSE in double-double: peak + log(sum)."""
    e, _, keep, _ = scratch
    m, n = rows.shape
    td.log_all_dd(sums, e, keep, m)
    for i in range(m):
        out[0, i], out[1, i] = td.dd_add(peaks[i], 0.0, sums[0, i], sums[1, i])
        units = 2.0 + math.log2(n) + abs(peaks[i]) + abs(sums[0, i])
        out[2, i] = DD_BOUND * units + n * 2.0**-1000


@njit(cache=True)
def _finish_log_sum(rows, sums, scratch, out, kind):
    """LogSum: log(sum) where the sum's bound allows (else bound inf); a sum of exactly 1
    gives 0, exactly (bound 0). Double-double (``kind`` DD_LOG_SUM) takes sums over 0.75 only
    (its log's start, :func:`.triple_double.log_all_dd`)."""
    e, r, keep, k = scratch
    m, n = rows.shape
    triple = kind == LOG_SUM
    for i in range(m):
        magnitude = 0.0
        for j in range(n):
            magnitude += abs(rows[i, j])
        s0 = sums[0, i]
        unit = TD_BOUND if triple else DD_SUM_BOUND
        error = unit * (2.0 + math.log2(n)) * magnitude * (1.0 + n * 2.0**-52)
        error += n * 2.0**-1070  # parts in the subnormal range round absolutely
        usable = (_LOG_LOW if triple else 0.75) < s0 < _LOG_HIGH and s0 - error > 0.0
        out[2, i] = error / (s0 - error) * (1.0 + 2.0**-50) if usable else np.inf
        if (s0, sums[1, i], sums[2, i]) == (1.0, 0.0, 0.0) and _sums_to_one(rows[i]):
            out[2, i] = -1.0  # exact
        if not usable:
            sums[0, i], sums[1, i], sums[2, i] = 1.0, 0.0, 0.0
    if triple:
        td.log_all(sums, e, keep, k, r, m)
    else:
        td.log_all_dd(sums, e, keep, m)  # overwrites sums[2]
    for i in range(m):
        r0 = sums[0, i]
        out[0, i], out[1, i] = r0, sums[1, i] + (sums[2, i] if triple else 0.0)
        exact = out[2, i] < 0.0
        out[2, i] += (TD_BOUND if triple else 2.0**-99) * (1.0 + abs(r0)) + 2.0**-104 * abs(r0)
        if exact:
            out[0, i], out[1, i], out[2, i] = 0.0, 0.0, 0.0


#: Partials of :func:`_sums_to_one`: each holds 53 bits of a different binade, 2098 in all.
_MOST_PARTIALS = 48


@njit(cache=True)
def _sums_to_one(row):
    """Whether the finite float64s of ``row`` sum to exactly 1 (``math.fsum``'s exact
    partials, Shewchuk: the sum of non-overlapping partials is 0 only if each is); False also
    where it cannot tell (an overflow)."""
    partials = np.zeros(_MOST_PARTIALS)
    count = 0
    for j in range(row.size + 1):
        x = row[j] if j < row.size else -1.0
        kept = 0
        for p in range(count):
            y = partials[p]
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low != 0.0:
                partials[kept] = low
                kept += 1
            x = high
        if kept == _MOST_PARTIALS or abs(x) == np.inf:
            return False  # not proven (the exact path decides)
        partials[kept] = x
        count = kept + 1
    return not np.any(partials[:count])
