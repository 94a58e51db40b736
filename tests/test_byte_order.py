"""Arrays in the other byte order (big-endian on this little-endian machine).

They reduce to the same values as the same numbers in the machine's byte order, for every op,
version and dtype that has a byte order (ml_dtypes' bfloat16 has none), in every layout, on both
kernel paths and through every front door; the result is always in the machine's byte order.
The native call is the reference of a relation (byte order must not matter), and the plain
examples are checked against exact integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory_checks
import onnx_reduce
from onnx_reduce import backend, pipeline, reduce_l2, reduce_sum
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec import OPS, REGISTRY, VERSIONS, OpVersion
from oracle import expected

#: ONNX name -> numpy type, for the allowed dtypes that have a byte order.
SWAPPABLE = {"float16": np.float16, "float": np.float32, "double": np.float64, "int32": np.int32,
             "int64": np.int64, "uint32": np.uint32, "uint64": np.uint64}
ALL = [VERSIONS[op][v] for op in OPS for v in VERSIONS[op]]
CASES = [(ver, np.dtype(t)) for ver in ALL for name, t in SWAPPABLE.items() if name in ver.dtypes]
FUNCTIONS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}
PATHS = ["reference", "auto"]


def swapped(x: np.ndarray) -> np.ndarray:
    """The same numbers stored in the other byte order."""
    return x.astype(x.dtype.newbyteorder("S"))


def sample(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0, op: str = "") -> np.ndarray:
    """Small integers and (for floats) quarters, exact in every dtype; positive for
    ReduceLogSum (an integer log of a sum <= 0 raises)."""
    rng = np.random.default_rng(seed)
    low = 1 if op == "ReduceLogSum" else 0 if dtype.kind == "u" else -40
    values = rng.integers(low, 41, size=shape)
    return (values / 4 if dtype.kind == "f" else values).astype(dtype)


LAYOUTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.transpose(2, 0, 1),
    "strided": lambda x: x[::2, ::-1, 1:],
    "broadcast": lambda x: np.broadcast_to(x[:1], (3, *x.shape[1:])),
}
AXES: list[tuple[list[int] | None, bool]] = [(None, False), ([-1], False), ([0], False),
                                             ([0, 2], False), ([], True)]


def _call(door: str, ver: OpVersion, data: np.ndarray, axes, noop: bool) -> np.ndarray:
    """One call of ``ver`` through ``door``."""
    attributes: dict = {"keepdims": 0}
    if noop:
        attributes["noop_with_empty_axes"] = 1
    axes_input = None
    if axes is not None and ver.axes_is_input:
        axes_input = np.array(axes, np.int64)
    elif axes is not None:
        attributes["axes"] = axes
    if door == "functions":
        return FUNCTIONS[ver.op](data, axes, False, noop, opset=ver.version)
    if door == "execute":
        return pipeline.execute(ver, data, attributes, axes_input)
    if door == "prepare":
        return pipeline.prepare(ver, data.dtype, data.shape, attributes, axes_input)(data)
    return _backend_call(ver, data, attributes, axes_input)


def _backend_call(ver: OpVersion, data: np.ndarray, attributes: dict, axes_input) -> np.ndarray:
    names, feeds = ["x"], [data]
    if axes_input is not None:
        names.append("axes")
        feeds.append(axes_input)
    node = oh.make_node(ver.op, names, ["y"], **attributes)
    inputs = [oh.make_tensor_value_info(n, _elem(f), list(f.shape))
              for n, f in zip(names, feeds, strict=True)]
    output = oh.make_tensor_value_info("y", _elem(data), None)
    graph = oh.make_graph([node], "g", inputs, [output])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", ver.version)])
    return backend.prepare(model).run(feeds)[0]


def _elem(array: np.ndarray) -> int:
    return oh.np_dtype_to_tensor_dtype(array.dtype.newbyteorder("="))


def assert_same_as_native(out: np.ndarray, want: np.ndarray, op: str) -> None:
    """The same bits, except float ReduceLogSumExp: the converted copy is contiguous where the
    native view may not be, and two layouts may take two paths, each within 1 ulp (2 apart),
    as between any two layouts (tests/test_functions.py). The other results are exact here."""
    assert out.dtype.isnative, out.dtype
    assert out.dtype == want.dtype
    assert out.shape == want.shape
    if op == "ReduceLogSumExp" and out.dtype.kind == "f":
        np.testing.assert_array_max_ulp(out, want, maxulp=2)
    else:
        assert out.tobytes() == want.tobytes(), (out, want)


@pytest.mark.parametrize(("ver", "dtype"), CASES, ids=[f"{v.label}-{d}" for v, d in CASES])
@pytest.mark.parametrize("door", ["functions", "execute", "prepare", "backend"])
def test_other_byte_order_gives_the_native_result(ver: OpVersion, dtype: np.dtype, door) -> None:
    base = sample(dtype, (4, 6, 5), op=ver.op)
    for (layout, view), (axes, noop), path in _grid():
        if noop and not ver.axes_is_input:
            continue  # no noop_with_empty_axes at this version
        native, other = view(base), view(swapped(base))
        before = other.tobytes()
        with kernel_path(path):
            want = _call(door, ver, native, axes, noop)
            out = _call(door, ver, other, axes, noop)
        assert_same_as_native(out, want, ver.op)
        assert other.tobytes() == before, f"{layout}: the input was modified"


def _grid():
    for layout in LAYOUTS.items():
        for axes in AXES:
            for path in PATHS:
                yield layout, axes, path


@st.composite
def reductions(draw):
    """(version, dtype, shape, view slices, axes, keepdims, noop)."""
    ver, dtype = draw(st.sampled_from(CASES))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=0, max_size=4)))
    steps = [draw(st.sampled_from([1, 2, -1])) for _ in shape]
    axes = draw(st.one_of(st.none(), st.lists(st.integers(0, max(len(shape) - 1, 0)),
                                              unique=True, max_size=len(shape))))
    if not shape:
        axes = None
    noop = draw(st.booleans()) and ver.axes_is_input and axes == []
    return ver, dtype, shape, steps, axes, draw(st.booleans()), noop


@settings(max_examples=150, deadline=None)
@given(case=reductions(), seed=st.integers(0, 2**32 - 1), path=st.sampled_from(PATHS))
def test_any_view_in_the_other_byte_order_gives_the_native_result(case, seed, path) -> None:
    ver, dtype, shape, steps, axes, keepdims, noop = case
    base = sample(dtype, shape, seed, ver.op)
    view = tuple(slice(None, None, step) for step in steps)
    native, other = base[view], swapped(base)[view]
    func = FUNCTIONS[ver.op]
    with kernel_path(path):
        want = func(native, axes, keepdims, noop, opset=ver.version)
        out = func(other, axes, keepdims, noop, opset=ver.version)
    assert_same_as_native(out, want, ver.op)


# --- the reported cases, against exact values ------------------------------------------------


@pytest.mark.parametrize("code", [">f2", ">f4", ">f8", ">i4", ">i8", ">u4", ">u8"])
@pytest.mark.parametrize("op", OPS)
def test_big_endian_values_and_byte_order(code: str, op: str) -> None:
    data = np.array([[3, 4, 12], [0, 5, 1]], dtype=code)
    native = data.astype(np.dtype(code).newbyteorder("="))
    out = FUNCTIONS[op](data, axes=[1], keepdims=False, opset=18)
    assert out.dtype == native.dtype
    assert out.dtype.isnative
    want = expected(op, native, axes=[1], keepdims=False)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("code", [">i2", ">u2", ">c8", "<i2"])
def test_refusals_name_the_onnx_type_whatever_the_byte_order(code: str) -> None:
    name = {"i2": "int16", "u2": "uint16", "c8": "complex64"}[code[1:]]
    with pytest.raises(TypeError, match=rf"ReduceSum-13: data type '{name}' is not allowed"):
        reduce_sum(np.zeros(2, code))


def test_memory_mapped_big_endian_file(tmp_path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.arange(24, dtype=">f4").reshape(4, 6))
    before = path.read_bytes()
    data = np.load(path, mmap_mode="r")
    out = reduce_sum(data, axes=[1], keepdims=False)
    assert out.dtype == np.float32
    assert out.dtype.isnative
    assert out.tolist() == [sum(range(6 * r, 6 * r + 6)) for r in range(4)]
    del data
    assert path.read_bytes() == before


def test_the_conversion_is_one_copy() -> None:
    """A non-native input is converted once: the extra memory is one copy of it, no more."""
    data = swapped(np.ones((512, 1024), np.float32))  # 2 MiB
    reduce_l2(data, axes=[1])  # compile and cache the call outside the measurement
    _, peak = memory_checks.least_peaks(lambda: reduce_l2(data, axes=[1]))
    assert data.nbytes <= peak <= data.nbytes * 1.1


def test_backend_declares_nothing_about_byte_order() -> None:
    """A model input of type float takes a big-endian float32 array (onnx has no byte order)."""
    node = oh.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                  [3])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    out = backend.prepare(model).run([np.array([1.5, 2.5, 4.0], ">f4")])[0]
    assert out.dtype == np.float32
    assert out.dtype.isnative
    assert out.item() == 8.0


@pytest.mark.parametrize("door", ["execute", "prepare", "backend"])
def test_an_axes_input_in_the_other_byte_order(door: str) -> None:
    """An int64 axes input is an int64 whatever its byte order (a big-endian axes.npy)."""
    ver = VERSIONS["ReduceSum"][13]
    data = np.arange(6.0).reshape(2, 3)
    axes = swapped(np.array([1], np.int64))
    attributes = {"keepdims": 0}
    if door == "backend":
        out = _backend_call(ver, data, attributes, axes)
    elif door == "execute":
        out = pipeline.execute(ver, data, attributes, axes)
    else:
        out = pipeline.prepare(ver, data.dtype, data.shape, attributes, axes)(data)
    assert out.tolist() == [3.0, 12.0]


@pytest.mark.parametrize("code", [">f2", ">f4", ">f8"])
def test_expand_takes_a_dtype_in_either_byte_order(code: str) -> None:
    """ONNX element types have no byte order: a big-endian dtype names the same type."""
    import onnx_reduce

    node = oh.make_node("ReduceL2", ["x"], ["y"], keepdims=0)
    native = np.dtype(code).newbyteorder("=")
    other = onnx_reduce.expand(node, 18, stable=True, dtype=np.dtype(code))
    assert other == onnx_reduce.expand(node, 18, stable=True, dtype=native)
