"""Compiled partial states of float rows, for :func:`onnx_reduce.kernels.states.partial`.

The numpy ``rows`` of :data:`..states.STATES` widen each block to its accumulator and sum it;
for float64 that accumulator is x87 ``long double``, which numpy computes element by element
(~50 ns per exp, ~20 per square). These kernels fill the same states in one compiled pass per
row (two for LogSumExp and L2's float64 scale: the peak first), at least as precisely:

* Sum, L2, SumSquare of float16/bfloat16/float32: float64 sums of the widened terms (squares
  exact in float64), vectorized: within ``n 2**-53`` of the sum of magnitudes in any order;
* float64 Sum, L2, SumSquare, and LogSum and LogSumExp of every float dtype: double-double
  sums (TwoSum in LANES lanes, ~``n 2**-106`` relative to the sum of magnitudes; rows of at
  most TILED terms TILE at a time, side by side, each row's lanes in a vector lane), rounded
  once into the state; L2 and SumSquare square their power-of-two scaled terms exactly (each
  square's rounding error by a fused multiply-add); LogSum's sums of magnitudes are its sums
  where no term is negative;
  LogSumExp's terms carry the shift exactly and take the half-ulp :func:`._exp.exp_nonpos`
  (1.28 u relative: the fast kernels' terms, which :func:`..states.log_sum_exp_limit`
  accounts for).

Rows these kernels do not vouch for go to the numpy rows: double-double rows whose plain sum is not
finite (an inf or NaN, or a finite overflow ``long double`` would hold), LogSumExp rows whose
peak is not finite, L2 rows whose largest magnitude is not finite. Blocks are read in place when
one of their axes is contiguous: by rows (each row's terms adjacent) or by columns (the rows'
terms at one index adjacent, as an outer-axis reduction gives).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numba import njit

from ...spec.dtypes import is_float
from ..states import ZERO_SCALE
from ._common import REASSOC, exact_add, storage_view, two_sum, wide_vectors, widen
from ._exp import exp_nonpos
from ._lanes import fma

#: Terms per lane group of the row-wise double-double sums.
LANES = 32
#: Outputs whose states :func:`_square_values` keeps at a time.
STRETCH = 4096
#: Terms :func:`_sums_with_magnitudes` looks at for a negative before their sums, at a time,
#: and the fewest columns it takes at a time (narrower column loops cost more than a second
#: read: 16 columns of 2048 measured 1.3x slower at 64 MiB, 64 of 16384 4x).
MAGNITUDE_STRETCH = 1 << 15
MAGNITUDE_COLUMNS = 256
#: Rows side by side in the sums of rows of at most TILED terms (24 KiB of terms at most, in
#: L1); longer rows vectorize along themselves, in LANES lanes, faster from ~48 terms on.
TILE = 64
TILED = 48
#: Below this exponent a row's 2**-exp does not fit a normal float64 (scaled in two steps).
_LOW_EXP = -1000

RowState = Callable[[np.ndarray, np.ndarray, Callable], None]


# ----------------------------------------------------------------------------- narrow floats


@njit(cache=True, nogil=True, fastmath=REASSOC)
def _wide_sums(base, m, n, rs, cs, squares, total):  # pragma: no cover - compiled
    """float64 sums over rows ``i < m`` of ``n`` narrow-float terms ``base[i*rs + j*cs]``
    (``cs == 1``: by rows; else ``rs == 1``: by columns), or of their squares (exact in
    float64). Slices indexed from ``range``: no negative-index wraparound, the loops
    vectorize."""
    if cs == 1:
        for i in range(m):
            row = base[i * rs:i * rs + n]
            s = 0.0
            if squares:
                for j in range(n):
                    v = widen(row[j])
                    s += v * v
            else:
                for j in range(n):
                    s += widen(row[j])
            total[i] = s
        return
    total[:] = 0.0  # m is a column block's width (the caller's): it stays in cache
    quads = n - n % 4
    for j in range(0, quads, 4):  # four terms per accumulator update: a quarter of the stores
        c0 = base[j * cs:j * cs + m]
        c1 = base[(j + 1) * cs:(j + 1) * cs + m]
        c2 = base[(j + 2) * cs:(j + 2) * cs + m]
        c3 = base[(j + 3) * cs:(j + 3) * cs + m]
        for i in range(m):
            v0, v1, v2, v3 = widen(c0[i]), widen(c1[i]), widen(c2[i]), widen(c3[i])
            if squares:
                total[i] += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)
            else:
                total[i] += (v0 + v1) + (v2 + v3)
    for j in range(quads, n):
        col = base[j * cs:j * cs + m]
        for i in range(m):
            v = widen(col[i])
            total[i] += v * v if squares else v


@njit(cache=True, nogil=True, inline="always")
def _exp_term(x, top):  # pragma: no cover - compiled
    """``exp(x - top)`` for ``x < top`` to 1.28 u relative: ``x - top`` carried exactly
    (TwoDiff), ``exp(d + dl) = exp(d) + exp(d) dl`` with the half-ulp exp; 0 at and above
    ``top`` (and for -inf), computed for every term so that the loops vectorize."""
    d = x - top
    z = d - x
    dl = (x - (d - z)) + (-top - z)
    live = d > -746.0
    e = exp_nonpos(d if live else -746.0)
    return e + e * dl if live and x < top else 0.0


@njit(cache=True, nogil=True)
def _lse_tails(base, m, n, rs, cs, peak, head, tail, ties):  # pragma: no cover - compiled
    """Per row of finite ``peak`` (its maximum): Σ exp(x - peak) over the terms below it, in
    double-double (``head``, ``tail``), and the number equal to it (``ties``)."""
    wide_vectors()
    if cs == 1:
        hi = np.zeros(LANES)
        lo = np.zeros(LANES)
        count = np.zeros(LANES)
        for i in range(m):
            row = base[i * rs:i * rs + n]
            top = peak[i]
            hi[:] = 0.0
            lo[:] = 0.0
            count[:] = 0.0
            full = n - n % LANES
            for j0 in range(0, full, LANES):
                for k in range(LANES):
                    v = widen(row[j0 + k])
                    _accumulate(hi, lo, k, _exp_term(v, top), 0.0, True)
                    count[k] += 1.0 if v == top else 0.0
            for k in range(n - full):
                v = widen(row[full + k])
                _accumulate(hi, lo, k, _exp_term(v, top), 0.0, True)
                count[k] += 1.0 if v == top else 0.0
            head[i], tail[i] = _lanes_total(hi, lo)
            ties[i] = count.sum()
        return
    head[:] = 0.0
    tail[:] = 0.0
    ties[:] = 0.0
    for j in range(n):
        col = base[j * cs:j * cs + m]
        for i in range(m):
            v = widen(col[i])
            _accumulate(head, tail, i, _exp_term(v, peak[i]), 0.0, True)
            ties[i] += 1.0 if v == peak[i] else 0.0


@njit(cache=True, nogil=True)
def _peaks(base, m, n, rs, cs, magnitude, peak):  # pragma: no cover - compiled
    """The maximum of each row ``i < m`` of terms ``base[i*rs + j*cs]`` (of their magnitudes
    where ``magnitude``), NaN where one is NaN."""
    if cs == 1 and n < 4 * LANES:
        _short_peaks(base, m, n, rs, magnitude, peak)
        return
    if cs == 1:
        _row_peaks(base, m, n, rs, magnitude, peak)
        return
    nans = np.zeros(m)
    peak[:] = -np.inf
    for j in range(n):
        col = base[j * cs:j * cs + m]
        for i in range(m):
            v = abs(widen(col[i])) if magnitude else widen(col[i])
            nans[i] += 1.0 if v != v else 0.0
            peak[i] = v if v > peak[i] else peak[i]
    for i in range(m):
        if nans[i]:
            peak[i] = np.nan


@njit(cache=True, nogil=True)
def _row_peaks(base, m, n, rs, magnitude, peak):  # pragma: no cover - compiled
    """:func:`_peaks` of rows (``cs == 1``) of 4 LANES terms or more, in LANES lanes (a
    maximum is exact in any order; a single running maximum stays scalar without ``nnan``);
    a function of its own, as :func:`_lane_rows`."""
    tops = np.empty(LANES)
    nans = np.empty(LANES)
    for i in range(m):
        row = base[i * rs:i * rs + n]
        tops[:] = -np.inf
        nans[:] = 0.0
        full = n - n % LANES
        for j0 in range(0, full, LANES):
            for k in range(LANES):
                v = abs(widen(row[j0 + k])) if magnitude else widen(row[j0 + k])
                nans[k] += 1.0 if v != v else 0.0
                tops[k] = v if v > tops[k] else tops[k]
        for k in range(n - full):
            v = abs(widen(row[full + k])) if magnitude else widen(row[full + k])
            nans[k] += 1.0 if v != v else 0.0
            tops[k] = v if v > tops[k] else tops[k]
        peak[i] = np.nan if nans.sum() else tops.max()


@njit(cache=True, nogil=True)
def _short_peaks(base, m, n, rs, magnitude, peak):  # pragma: no cover - compiled
    """:func:`_peaks` of rows (``cs == 1``) one pass each: for short rows the lanes' setup
    and totals cost more than they save."""
    for i in range(m):
        row = base[i * rs:i * rs + n]
        top, nan = -np.inf, 0.0
        for j in range(n):
            v = abs(widen(row[j])) if magnitude else widen(row[j])
            nan += 1.0 if v != v else 0.0
            top = v if v > top else top
        peak[i] = np.nan if nan else top


# ----------------------------------------------------------------------------- float64


@njit(cache=True, nogil=True, inline="always")
def _accumulate(hi, lo, k, h, e, nonneg):  # pragma: no cover - compiled
    """Lane ``k``'s double-double ``hi[k] + lo[k]`` gains ``h + e`` (``e`` a low part): the
    high parts' sum and exact error (:func:`._common.exact_add`; ``nonneg``: the lanes
    and terms are >= 0), that error and ``e`` into the low."""
    s, err = exact_add(hi[k], h, nonneg)
    hi[k] = s
    lo[k] += err + e


@njit(cache=True, nogil=True, inline="always")
def _lanes_total(hi, lo):  # pragma: no cover - compiled
    """The double-double (head, tail) of lanes ``hi[k] + lo[k]``."""
    s, e = 0.0, 0.0
    for k in range(hi.size):
        s, err = two_sum(s, hi[k])
        e += err + lo[k]
    return two_sum(s, e)


@njit(cache=True, nogil=True, inline="always")
def _term(v, scale, rescale, squares):  # pragma: no cover - compiled
    """The (high, low) double-double of a term: ``v``, or ``(v*scale*rescale)**2`` exactly
    (the square's rounding error by a fused multiply-add; scaling by powers of two upward, or
    to a normal result, is exact)."""
    if not squares:
        return v, 0.0
    v = (v * scale) * rescale
    p = v * v
    return p, fma(v, v, -p)


@njit(cache=True, nogil=True)
def _dd_sums(base, m, n, rs, cs, squares, magnitude, scale, rescale, head,
             tail):  # pragma: no cover - compiled
    """Double-double sums over rows ``i < m`` of ``n`` terms ``base[i*rs + j*cs]``: the
    terms, their magnitudes too (``magnitude``: into ``head[m:]``, ``tail[m:]``), or their
    exact squares after scaling by ``scale[i] * rescale[i]`` (``squares``). Each row in
    LANES lanes (term ``j`` into lane ``j % LANES``, :func:`_accumulate`), the lanes totalled
    in order.
    ``head`` is a plain float64 sum of the terms' high parts, so not finite when one of them
    is not or a partial sum overflows (the caller redoes those rows)."""
    if cs != 1:
        _dd_columns(base, m, n, cs, squares, magnitude, scale, rescale, head, tail)
        return
    if n <= TILED:
        _tiled_rows(base, m, n, rs, squares, magnitude, scale, rescale, head, tail)
    else:
        _lane_rows(base, m, n, rs, squares, magnitude, scale, rescale, head, tail)


@njit(cache=True, nogil=True)
def _lane_rows(base, m, n, rs, squares, magnitude, scale, rescale, head,
               tail):  # pragma: no cover - compiled
    """:func:`_dd_sums` of rows of more than TILED terms, one row at a time, its LANES lanes
    a vector loop (a function of its own: inside one function with the other walks, LLVM
    compiles this loop 5x slower; docs/kernel-design.md)."""
    hi = np.zeros(LANES)
    lo = np.zeros(LANES)
    for part in range(2 if magnitude else 1):
        for i in range(m):
            hi[:] = 0.0
            lo[:] = 0.0
            f, g = scale[i], rescale[i]
            row = base[i * rs:i * rs + n]
            full = n - n % LANES
            for j0 in range(0, full, LANES):  # LANES independent chains: they vectorize
                for k in range(LANES):
                    v = widen(row[j0 + k])
                    h, e = _term(abs(v) if part else v, f, g, squares)
                    _accumulate(hi, lo, k, h, e, squares or part > 0)
            for k in range(n - full):
                v = widen(row[full + k])
                h, e = _term(abs(v) if part else v, f, g, squares)
                _accumulate(hi, lo, k, h, e, squares or part > 0)
            head[part * m + i], tail[part * m + i] = _lanes_total(hi, lo)


@njit(cache=True, nogil=True)
def _tiled_rows(base, m, n, rs, squares, magnitude, scale, rescale, head,
                tail):  # pragma: no cover - compiled
    """:func:`_dd_sums` of rows of at most TILED terms, TILE rows side by side
    (:func:`_tile`): each row's lanes in a vector lane of their own, so that short rows
    vectorize across rows instead of within one."""
    buf = np.empty(n * TILE)
    s, t, hi, lo = np.empty(TILE), np.empty(TILE), np.empty(TILE), np.empty(TILE)
    for i0 in range(0, m, TILE):
        b = min(TILE, m - i0)
        _tile(base, i0, b, n, rs, buf)
        for part in range(2 if magnitude else 1):
            _tile_lanes(buf, b, n, part, squares, scale[i0:i0 + b], rescale[i0:i0 + b],
                        s, t, hi, lo)
            _tile_totals(b, n, s, t, head[part * m + i0:], tail[part * m + i0:])


@njit(cache=True, nogil=True, inline="always")
def _tile(base, i0, b, n, rs, buf):  # pragma: no cover - compiled
    """Rows ``i0 <= i < i0 + b`` of ``n`` terms ``base[i*rs + k]``, widened, into ``buf``
    transposed (term ``k`` of row ``i0 + i`` at ``buf[k*TILE + i]``): the rows' chains
    then run side by side from adjacent memory, as vectors."""
    for i in range(b):
        row = base[(i0 + i) * rs:(i0 + i) * rs + n]
        for k in range(n):
            buf[k * TILE + i] = widen(row[k])


@njit(cache=True, nogil=True, inline="always")
def _tile_lanes(buf, b, n, part, squares, scale, rescale, s, t, hi, lo):  # pragma: no cover
    """The ``b`` rows of a tile (of their magnitudes where ``part``) as :func:`_dd_sums`
    adds them: lane ``k`` (``hi``, ``lo``) gains terms ``k, k + LANES, ...``, then joins the
    lanes' running total ``s``, ``t`` (:func:`_lanes_total`'s steps): the same operations
    per row in the same order, so the same bits. A lane of one term joins directly."""
    s[:b] = 0.0
    t[:b] = 0.0
    for k in range(min(n, LANES)):
        if n > LANES:
            hi[:b] = 0.0
            lo[:b] = 0.0
            for j in range(k, n, LANES):
                col = buf[j * TILE:j * TILE + b]
                for i in range(b):
                    v = col[i]
                    h, e = _term(abs(v) if part else v, scale[i], rescale[i], squares)
                    _accumulate(hi, lo, i, h, e, squares or part > 0)
            for i in range(b):
                _accumulate(s, t, i, hi[i], lo[i], squares or part > 0)
            continue
        col = buf[k * TILE:k * TILE + b]
        for i in range(b):
            v = col[i]
            h, e = _term(abs(v) if part else v, scale[i], rescale[i], squares)
            lane, err = two_sum(0.0, h)
            _accumulate(s, t, i, lane, 0.0 + (err + e), squares or part > 0)


@njit(cache=True, nogil=True, inline="always")
def _tile_totals(b, n, s, t, head, tail):  # pragma: no cover - compiled
    """The (head, tail) of a tile's ``b`` lane totals ``s``, ``t`` (:func:`_lanes_total`'s
    last steps): the empty lanes of rows shorter than LANES join once (a second changes
    nothing)."""
    for i in range(b):
        si, ti = s[i], t[i]
        if n < LANES:
            si, err = two_sum(si, 0.0)
            ti += err + 0.0
        head[i], tail[i] = two_sum(si, ti)


@njit(cache=True, nogil=True)
def _dd_columns(base, m, n, cs, squares, magnitude, scale, rescale, head, tail):  # pragma: no cover
    """:func:`_dd_sums` of rows whose terms at one index are adjacent (``rs == 1``)."""
    hi = np.zeros(m)
    lo = np.zeros(m)
    for part in range(2 if magnitude else 1):
        hi[:] = 0.0
        lo[:] = 0.0
        for j in range(n):
            col = base[j * cs:j * cs + m]
            for i in range(m):
                v = widen(col[i])
                h, e = _term(abs(v) if part else v, scale[i], rescale[i], squares)
                _accumulate(hi, lo, i, h, e, squares or part > 0)
        for i in range(m):
            s, e = two_sum(hi[i], lo[i])
            head[part * m + i] = s
            tail[part * m + i] = e


@njit(cache=True, nogil=True)
def _scales(peak, exps, scale, rescale):  # pragma: no cover - compiled
    """From each row's largest magnitude ``peak`` (finite): its binary exponent ``e``
    (``frexp``; ZERO_SCALE for a row of zeros) and two factors whose product is 2**-e (the
    second 1 unless 2**-e overflows), which bring every term into (-1, 1) exactly. Peaks
    whose 2**-e is normal take both from the exponent bits, in a vector loop; the rest (zero,
    below 2**_LOW_EXP, from 2**1022 on) by ``frexp`` and ``ldexp``."""
    bits = peak.view(np.int64)
    scale_bits = scale.view(np.int64)
    others = 0
    for i in range(peak.size):
        field = (bits[i] >> 52) & 0x7FF  # e + 1022 for a normal peak
        exps[i] = field - 1022
        scale_bits[i] = (2045 - field) << 52  # 2**-e, when normal
        rescale[i] = 1.0
        others += not _LOW_EXP + 1022 < field < 2045
    if others:
        for i in range(peak.size):
            field = (bits[i] >> 52) & 0x7FF
            if not _LOW_EXP + 1022 < field < 2045:
                _scale(peak[i], exps, scale, rescale, i)


@njit(cache=True, nogil=True, inline="always")
def _scale(peak, exps, scale, rescale, i):  # pragma: no cover - compiled
    """:func:`_scales` of row ``i`` by ``frexp`` and ``ldexp``."""
    scale[i] = 1.0
    rescale[i] = 1.0
    if peak == 0.0:
        exps[i] = ZERO_SCALE
        return
    _, e = math.frexp(peak)
    exps[i] = e
    if e > _LOW_EXP:
        scale[i] = math.ldexp(1.0, -e)
    else:
        scale[i] = math.ldexp(1.0, 600)
        rescale[i] = math.ldexp(1.0, -e - 600)


@njit(cache=True, nogil=True)
def _scaled_square_sums(base, m, n, rs, cs, exps, head, tail, bad):  # pragma: no cover
    """The double-double sums (``head``, ``tail``) of the squares of rows ``i < m`` of ``n``
    terms ``base[i*rs + j*cs]``, each row scaled by ``2**-exps[i]`` (:func:`_scales`) first;
    ``bad`` marks the rows whose largest magnitude is not finite (their sums are of no use).
    Returns how many there are."""
    if cs == 1 and n <= TILED:
        return _tiled_squares(base, m, n, rs, exps, head, tail, bad)
    peak = np.empty(m)
    _peaks(base, m, n, rs, cs, True, peak)
    nbad = _set_aside(peak, bad, m)
    scale = np.empty(m)
    rescale = np.empty(m)
    _scales(peak, exps, scale, rescale)
    _dd_sums(base, m, n, rs, cs, True, False, scale, rescale, head, tail)
    return nbad


@njit(cache=True, nogil=True)
def _tiled_squares(base, m, n, rs, exps, head, tail, bad):  # pragma: no cover - compiled
    """:func:`_scaled_square_sums` of rows of at most TILED terms, TILE rows side by side:
    each tile's peaks, scales and lanes from one transposed copy (:func:`_tile`)."""
    buf = np.empty(n * TILE)
    s, t, hi, lo = np.empty(TILE), np.empty(TILE), np.empty(TILE), np.empty(TILE)
    peak, scale, rescale = np.empty(TILE), np.empty(TILE), np.empty(TILE)
    nbad = 0
    for i0 in range(0, m, TILE):
        b = min(TILE, m - i0)
        _tile(base, i0, b, n, rs, buf)
        nbad += _tile_peaks(buf, b, n, peak, bad[i0:i0 + b])
        _scales(peak[:b], exps[i0:i0 + b], scale[:b], rescale[:b])
        _tile_lanes(buf, b, n, 0, True, scale, rescale, s, t, hi, lo)
        _tile_totals(b, n, s, t, head[i0:], tail[i0:])
    return nbad


@njit(cache=True, nogil=True, inline="always")
def _tile_peaks(buf, b, n, peak, bad):  # pragma: no cover - compiled
    """The largest magnitude of each of a tile's ``b`` rows into ``peak`` (NaN where the row
    holds one), set aside as :func:`_set_aside` does; how many are bad."""
    peak[:b] = -math.inf
    nans = np.zeros(b)
    for k in range(n):
        col = buf[k * TILE:k * TILE + b]
        for i in range(b):
            v = abs(col[i])
            nans[i] += 1.0 if v != v else 0.0
            peak[i] = v if v > peak[i] else peak[i]
    for i in range(b):
        peak[i] = math.nan if nans[i] > 0.0 else peak[i]
    return _set_aside(peak, bad, b)


@njit(cache=True, nogil=True, inline="always")
def _set_aside(peak, bad, m):  # pragma: no cover - compiled
    """``bad`` where a row's largest magnitude ``peak[:m]`` is not finite (its sums are of no
    use: the numpy rows redo it), its peak 1 meanwhile; how many there are."""
    nbad = 0
    for i in range(m):
        bad[i] = not math.isfinite(peak[i])
        peak[i] = 1.0 if bad[i] else peak[i]
        nbad += bad[i]
    return nbad


@njit(cache=True, nogil=True)
def _sums_with_magnitudes(base, m, n, rs, cs, head, tail, bad):  # pragma: no cover
    """The double-double sums of rows ``i < m`` of ``n`` terms ``base[i*rs + j*cs]`` into
    ``head[:m]``, ``tail[:m]``, those of their magnitudes into ``head[m:]``, ``tail[m:]``;
    ``bad`` marks the rows where either is not finite (a finite sum and magnitude may add up
    past the range: that counts too). Returns how many there are. A stretch of rows (about
    MAGNITUDE_STRETCH terms, in cache after the first look; MAGNITUDE_COLUMNS columns at
    least) with no negative term takes its magnitudes' sums from its sums (the same
    operations on the same values: a -0.0 term adds as 0.0 does) instead of adding them up
    again."""
    step = max(1 if cs == 1 else MAGNITUDE_COLUMNS, MAGNITUDE_STRETCH // max(n, 1))
    ones = np.ones(min(step, m))
    sums, rests = np.empty(2 * ones.size), np.empty(2 * ones.size)
    for i0 in range(0, m, step):
        b = min(step, m - i0)
        block = base[i0 * rs:]
        signed = _any_negative(block, b, n, rs, cs)
        _dd_sums(block, b, n, rs, cs, False, signed, ones, ones, sums, rests)
        part = b if signed else 0
        for i in range(b):
            head[i0 + i], tail[i0 + i] = sums[i], rests[i]
            head[m + i0 + i], tail[m + i0 + i] = sums[part + i], rests[part + i]
    nbad = 0
    for i in range(m):
        bad[i] = not math.isfinite(head[i] + head[m + i])
        nbad += bad[i]
    return nbad


@njit(cache=True, nogil=True)
def _any_negative(base, m, n, rs, cs):  # pragma: no cover - compiled
    """Whether a term ``base[i*rs + j*cs]`` of rows ``i < m`` of ``n`` terms is below zero:
    one vector loop per contiguous line (a row, or a column's slice of the rows), stopping
    after the first line that has one."""
    lines, length, pitch = (m, n, rs) if cs == 1 else (n, m, cs)
    for k in range(lines):
        line = base[k * pitch:k * pitch + length]
        below = 0
        for i in range(length):
            below += line[i] < 0.0
        if below:
            return True
    return False


# ----------------------------------------------------------------------------- the rows


def _layout(block: np.ndarray) -> tuple[np.ndarray, int, int, int, int] | None:
    """``(base, m, n, rs, cs)``: the 2-D ``block``'s memory as a 1-D array from its first
    element, its shape and strides in elements, one of them 1; None when neither axis is
    contiguous or a stride is negative."""
    m, n = block.shape
    size = block.itemsize
    rs, cs = (stride // size for stride in block.strides)
    if min(rs, cs) < 0 or any(stride % size for stride in block.strides):
        return None
    if n == 1:
        cs = 1
    elif m == 1:
        rs = 1
    if cs != 1 and rs != 1:
        return None
    span = (m - 1) * rs + (n - 1) * cs + 1
    storage = storage_view(block)
    base = np.lib.stride_tricks.as_strided(storage, shape=(span,), strides=(size,))
    base.setflags(write=False)  # one compiled variant for writeable and read-only blocks
    return base, m, n, rs, cs


def _rows(block: np.ndarray) -> np.ndarray:
    """``block`` as 2-D rows (reduced axis last) that :func:`_layout` can walk: a view, or a
    contiguous copy when neither axis is contiguous."""
    flat = block.reshape(-1, block.shape[-1])
    return flat if _layout(flat) is not None else np.ascontiguousarray(flat)


def _walk(block: np.ndarray) -> tuple[np.ndarray, int, int, int, int]:
    """``(base, m, n, rs, cs)`` (:func:`_layout`) of ``block``'s rows."""
    found = _layout(_rows(block))
    assert found is not None
    return found


def one_call_sum_squares(walk: tuple[np.ndarray, int, int, int, int],
                         slabs: tuple[int, int, bool] = (1, 0, True)) -> np.ndarray | None:
    """float64 ReduceSumSquare of the rows ``walk`` (:func:`_layout`'s form) over ``slabs``
    (count, stride, kept: the walk from every stride-th element, each slab's outputs apart,
    slab after slab, or added up): the state the rows functions fill, finished as
    :func:`..states.finish` does, the same bits for one slab (the squares unscaled where that
    changes none: :func:`_square_values`), without the state records or the steps in Python
    (for small arrays, whose Python steps cost many times their arithmetic). None where they
    would hand a row to the numpy rows (inf or NaN in it), and where slabs added up have a
    sum the unscaled squares cannot vouch for."""
    count, stride, kept = slabs
    out = np.empty(count * walk[1] if kept else walk[1])
    run = _slab_square_values if kept else _summed_square_values
    return None if run(*walk, count, stride, out) else out


def one_call_log_sums(walk: tuple[np.ndarray, int, int, int, int],
                      slabs: tuple[int, int, bool] = (1, 0, True)
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """float64 ReduceLogSum's state of the rows ``walk`` over ``slabs`` (as
    :func:`one_call_sum_squares`) before its rounding into the accumulator: the double-double
    (head, tail) sums, then sums of magnitudes, of its outputs (all sums, then all magnitudes);
    as :func:`one_call_sum_squares`, None where a row holds inf or NaN."""
    count, stride, kept = slabs
    if count == 1:
        head, tail, bad = _sums_and_magnitudes(walk)
        return None if bad.any() else (head, tail)
    size = 2 * walk[1] * (count if kept else 1)
    head, tail = np.empty(size), np.empty(size)
    run = _slab_sums if kept else _summed_sums
    return None if run(*walk, count, stride, head, tail) else (head, tail)


@njit(cache=True, nogil=True)
def _slab_square_values(base, m, n, rs, cs, count, stride, out):  # pragma: no cover
    """:func:`_square_values` of the rows from ``base[s*stride]``, slab ``s < count``, into
    ``out[s*m:(s + 1)*m]``; whether a row holds inf or NaN."""
    for s in range(count):
        if _square_values(base[s * stride:], m, n, rs, cs, out[s * m:(s + 1) * m]):
            return True
    return False


@njit(cache=True, nogil=True)
def _summed_square_values(base, m, n, rs, cs, count, stride, out):  # pragma: no cover
    """``out[i]``: the sum of squares of row ``i`` of every slab (the rows from
    ``base[s*stride]``, ``s < count``), each slab's unscaled double-double sums added into
    one by :func:`_add_dd`; True (not served) where a total is not finite or under
    _LEAST_UNSCALED (an inf or NaN, squares out of range, zeros: the general path then)."""
    head, tail = np.zeros(m), np.zeros(m)
    h, t, ones = np.empty(m), np.empty(m), np.ones(m)
    for s in range(count):
        _dd_sums(base[s * stride:], m, n, rs, cs, True, False, ones, ones, h, t)
        _add_dd(head, tail, h, t, True)
    for i in range(m):
        if not (head[i] >= _LEAST_UNSCALED and head[i] < math.inf):
            return True
        out[i] = head[i] + tail[i]
    return False


@njit(cache=True, nogil=True, inline="always")
def _add_dd(head, tail, h, t, nonneg):  # pragma: no cover - compiled
    """Double-doubles ``head + tail`` gain ``h + t``, element by element (:func:`_accumulate`;
    ``nonneg``: all of them >= 0)."""
    for i in range(head.size):
        _accumulate(head, tail, i, h[i], t[i], nonneg)


@njit(cache=True, nogil=True)
def _slab_sums(base, m, n, rs, cs, count, stride, head, tail):  # pragma: no cover
    """:func:`_sums_with_magnitudes` of the rows from ``base[s*stride]``, slab ``s < count``:
    all slabs' sums first in ``head``, ``tail``, then all their magnitudes' sums; whether a
    row holds inf or NaN (or its sums pass the range)."""
    total = count * m
    h, t, bad = np.empty(2 * m), np.empty(2 * m), np.empty(m, np.bool_)
    for s in range(count):
        if _sums_with_magnitudes(base[s * stride:], m, n, rs, cs, h, t, bad):
            return True
        head[s * m:(s + 1) * m] = h[:m]
        tail[s * m:(s + 1) * m] = t[:m]
        head[total + s * m:total + (s + 1) * m] = h[m:]
        tail[total + s * m:total + (s + 1) * m] = t[m:]
    return False


@njit(cache=True, nogil=True)
def _summed_sums(base, m, n, rs, cs, count, stride, head, tail):  # pragma: no cover
    """:func:`_sums_with_magnitudes` of row ``i`` of every slab added up (by :func:`_add_dd`, as
    :func:`_summed_square_values`), then normalized; whether a row holds inf or NaN or a
    total passes the range."""
    h, t, bad = np.empty(2 * m), np.empty(2 * m), np.empty(m, np.bool_)
    head[:] = 0.0
    tail[:] = 0.0
    for s in range(count):
        if _sums_with_magnitudes(base[s * stride:], m, n, rs, cs, h, t, bad):
            return True
        _add_dd(head, tail, h, t, False)
    for i in range(2 * m):
        head[i], tail[i] = two_sum(head[i], tail[i])
        if not math.isfinite(head[i]):
            return True
    return False


@njit(cache=True, nogil=True)
def _square_values(base, m, n, rs, cs, out):  # pragma: no cover - compiled
    """:func:`one_call_sum_squares` into ``out``, STRETCH outputs at a time (their states stay
    in cache instead of arrays of ``m`` to fault in: at 400 K rows those cost as much as the
    arithmetic). A stretch's squares are first summed unscaled, with no pass for the peaks
    (2x as fast): the scaling by a power of two only keeps what the squares lose in the
    subnormal range, under ``n 2**-1074``, which cannot show in a finite sum of at least
    _LEAST_UNSCALED. A stretch with another sum (a row not all zeros) is summed again scaled,
    as the state path does (:func:`_scaled_square_sums`). Returns whether a row holds inf or
    NaN (then ``out`` is of no use)."""
    exps, head = np.empty(STRETCH, np.int32), np.empty(STRETCH)
    tail, bad = np.empty(STRETCH), np.empty(STRETCH, np.bool_)
    ones = np.ones(STRETCH)
    for i0 in range(0, m, STRETCH):
        b = min(STRETCH, m - i0)
        block = base[i0 * rs:]
        _dd_sums(block, b, n, rs, cs, True, False, ones, ones, head, tail)
        if not _unscaled_serve(block, b, n, rs, cs, head):
            if _scaled_square_sums(block, b, n, rs, cs, exps, head, tail, bad):
                return True
            _finish_squares(exps[:b], head, tail, out[i0:i0 + b])
            continue
        for i in range(b):
            out[i0 + i] = head[i] + tail[i]
    return False


#: Least unscaled double-double sum of squares :func:`_square_values` keeps: what the squares
#: of ``n`` terms lose to the subnormal range (``n 2**-1074``) cannot show beside it.
_LEAST_UNSCALED = 2.0**-860


@njit(cache=True, nogil=True)
def _unscaled_serve(base, m, n, rs, cs, head):  # pragma: no cover - compiled
    """Whether the unscaled sums of squares ``head`` of rows ``i < m`` of ``n`` terms
    ``base[i*rs + j*cs]`` are all finite and at least _LEAST_UNSCALED, or zero for a row of
    zeros."""
    for i in range(m):
        h = head[i]
        if h >= _LEAST_UNSCALED and h < math.inf:
            continue
        if h != 0.0:  # also NaN
            return False
        for j in range(n):
            if base[i * rs + j * cs] != 0.0:
                return False
    return True


@njit(cache=True, nogil=True)
def _finish_squares(exps, head, tail, out):  # pragma: no cover - compiled
    """``out = ldexp(head + tail, 2 exps)`` (:func:`..states.finish` of finite sums; ``out``
    may be ``head``): a product by the normal 2**(2 exp), correctly rounded as ``ldexp`` is,
    in a vector loop (the power built in ``out`` itself: no scratch array to fault in);
    ``ldexp`` itself where that power is not normal."""
    out_bits = out.view(np.int64)
    others = 0
    for i in range(exps.size):
        k = 2 * np.int64(exps[i])
        inside = -1022 <= k <= 1023
        value = head[i] + tail[i]
        out_bits[i] = ((k if inside else 0) + 1023) << 52
        out[i] = value * out[i]  # value itself outside
        others += not inside
    if others:
        for i in range(exps.size):
            k = 2 * np.int64(exps[i])
            if not -1022 <= k <= 1023:
                out[i] = math.ldexp(out[i], k)


def _redo(block: np.ndarray, state: np.ndarray, bad: np.ndarray, numpy_rows: Callable) -> None:
    """Rows ``bad`` (flat) of ``state`` from the numpy rows."""
    if bad.any():
        flat_state = state.reshape(-1)
        redone = np.empty(int(bad.sum()), state.dtype)
        numpy_rows(block.reshape(-1, block.shape[-1])[bad], redone)
        flat_state[bad] = redone


def _total(head: np.ndarray, tail: np.ndarray, acc: np.dtype) -> np.ndarray:
    """Double-double sums rounded once into the state's accumulator (the float64 parts
    widened exactly in numpy's buffers, not in two wide copies)."""
    return np.add(head, tail, dtype=acc)


def _sum(block, state, numpy_rows) -> None:
    base, m, n, rs, cs = _walk(block)
    if block.dtype != np.float64:
        total = np.empty(m)
        _wide_sums(base, m, n, rs, cs, False, total)
        state["sum"] = total.reshape(state.shape)
        return
    head, tail, ones = np.empty(m), np.empty(m), np.ones(m)
    _dd_sums(base, m, n, rs, cs, False, False, ones, ones, head, tail)
    state["sum"] = _total(head, tail, state.dtype["sum"]).reshape(state.shape)
    _redo(block, state, ~np.isfinite(head), numpy_rows)


def _log_sum(block, state, numpy_rows) -> None:
    """Every float dtype in double-double: the bound of :func:`.states.log_sum_bound` is the
    reference path's (pairwise sums), which a plain vectorized sum would exceed."""
    head, tail, bad = _sums_and_magnitudes(_walk(block))
    _store_log_sum(state, head, tail)
    _redo(block, state, bad, numpy_rows)


def _sums_and_magnitudes(walk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bad): the double-double sums of the rows ``walk`` (:func:`_layout`'s
    form), then of their magnitudes; the rows where either is not finite."""
    m = walk[1]
    head, tail, bad = np.empty(2 * m), np.empty(2 * m), np.empty(m, bool)
    _sums_with_magnitudes(*walk, head, tail, bad)
    return head, tail, bad


def _store_log_sum(state, head, tail) -> None:
    """The sums and sums of magnitudes (:func:`_sums_and_magnitudes`) into ``state``."""
    m = head.size // 2
    total = _total(head, tail, state.dtype["sum"])
    state["sum"] = total[:m].reshape(state.shape)
    state["magnitude"] = total[m:].reshape(state.shape)


def _scaled_squares(walk) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float64 rows ``walk`` (:func:`_layout`'s form): (exp, head, tail, bad): the
    double-double sums of the squares scaled by 2**-exp, and the rows whose largest magnitude
    is not finite (:func:`_scaled_square_sums`)."""
    m = walk[1]
    exps, head, tail, bad = np.empty(m, np.int32), np.empty(m), np.empty(m), np.empty(m, bool)
    _scaled_square_sums(*walk, exps, head, tail, bad)
    return exps, head, tail, bad


def _l2(block, state, numpy_rows) -> None:
    if block.dtype != np.float64:
        base, m, n, rs, cs = _walk(block)
        total = np.empty(m)
        _wide_sums(base, m, n, rs, cs, True, total)
        state["exp"] = 0
        state["ssq"] = total.reshape(state.shape)
        return
    exps, head, tail, bad = _scaled_squares(_walk(block))
    state["exp"] = exps.reshape(state.shape)
    state["ssq"] = _total(head, tail, state.dtype["ssq"]).reshape(state.shape)
    _redo(block, state, bad, numpy_rows)


def _sum_square(block, state, numpy_rows) -> None:
    if block.dtype != np.float64:
        _l2(block, state, numpy_rows)
        return
    exps, head, tail, bad = _scaled_squares(_walk(block))
    _store_sum_square(state, exps, head, tail)
    _redo(block, state, bad, numpy_rows)


def _store_sum_square(state, exps, head, tail) -> None:
    """The scaled sums of squares (:func:`_scaled_squares`) into ``state``."""
    state["exp"] = exps.reshape(state.shape)
    state["head"] = head.reshape(state.shape)
    state["tail"] = tail.reshape(state.shape)


def _log_sum_exp(block, state, numpy_rows) -> None:
    """Rows: the peaks by numpy's vectorized max (NaN where a row holds one); columns: by
    :func:`_peaks`; the tails in double-double."""
    rows = _rows(block)
    base, m, n, rs, cs = _layout(rows)
    if cs == 1:
        peak = rows.max(axis=-1).astype(np.float64)
    else:
        peak = np.empty(m)
        _peaks(base, m, n, rs, cs, False, peak)
    head, tail, ties = np.empty(m), np.empty(m), np.empty(m)
    _lse_tails(base, m, n, rs, cs, peak, head, tail, ties)
    state["peak"] = peak.reshape(state.shape)
    state["tail"] = _total(head, tail, state.dtype["tail"]).reshape(state.shape)
    state["ties"] = ties.reshape(state.shape)
    _redo(block, state, ~np.isfinite(peak), numpy_rows)


_ROWS: dict[str, RowState] = {
    "ReduceSum": _sum,
    "ReduceL2": _l2,
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": _sum_square,
    "ReduceLogSum": _log_sum,
}


def rows_for(op: str, dtype: np.dtype) -> RowState | None:
    """The compiled ``rows(block, state, numpy_rows)`` of ``op`` for blocks of ``dtype``; None
    for integers (the numpy rows serve)."""
    return _ROWS.get(op) if is_float(np.dtype(dtype)) else None
