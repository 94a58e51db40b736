"""Tensor files: ``.npy`` (large ones memory-mapped, never read whole) and ONNX ``TensorProto``
``.pb`` (bfloat16 included); outputs written atomically, never over an existing file unless forced.

>>> import numpy as np, tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_tensor(folder / "x.pb", np.arange(3, dtype=np.int32))
>>> read_tensor(folder / "x.pb")
array([0, 1, 2], dtype=int32)
"""

from __future__ import annotations

from pathlib import Path
from tokenize import TokenError

import numpy as np

from ..spec import bfloat16
from .errors import UserError, one_line
from .files import atomic_path, check_regular_file

FORMATS = (".npy", ".pb")

#: What ``np.load`` raises for a damaged or lying .npy header (it is parsed as a Python literal).
_HEADER_ERRORS = (ValueError, EOFError, OverflowError, MemoryError, SyntaxError, TokenError,
                  TypeError, KeyError)

#: What decoding a TensorProto whose fields lie (sizes, types) raises.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError)


def read_tensor(path: Path) -> np.ndarray:
    """The array in ``path``: a memory map for ``.npy``, a decoded ``TensorProto`` for ``.pb``."""
    path = Path(path)
    suffix = _suffix(path, "input")
    try:
        check_regular_file(path, "a tensor file")
        return _read_npy(path) if suffix == ".npy" else _read_pb(path)
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from error


def _read_npy(path: Path) -> np.ndarray:
    try:
        with np.errstate(all="ignore"):  # a header's absurd shape overflows numpy's size product
            data = np.load(path, mmap_mode="r", allow_pickle=False)
    except _HEADER_ERRORS as error:
        raise UserError(f"{path}: not a readable .npy file ({_npy_reason(error)})") from error
    if not isinstance(data, np.ndarray):
        raise UserError(f"{path}: holds several arrays (an .npz?), expected one .npy array")
    if data.dtype.kind == "V":
        raise UserError(
            f"{path}: unsupported .npy dtype {data.dtype.str!r} (numpy saves bfloat16 as raw "
            "2-byte records; pass bfloat16 tensors as an ONNX TensorProto .pb file)"
        )
    return data


def _npy_reason(error: Exception) -> str:
    """Why numpy could not load a .npy file, in the user's terms: numpy's own advice for pickled
    data (load it unsafely) is not for them, and a header that claims more than the file holds
    surfaces as a memory-map error."""
    text = one_line(str(error))
    if "pickle" in text:  # numpy's reading of a file without the .npy magic
        return "no .npy header; numpy would unpickle it, which onnx-reduce never does"
    if "Python objects" in text:
        return "an array of Python objects (dtype object), not numbers"
    if "mmap" in text or "memory mapped" in text or "larger than" in text:
        return f"its header's shape and dtype do not match the file's size: {text}"
    return text


def _read_pb(path: Path) -> np.ndarray:
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(path.read_bytes())
    except DecodeError as error:
        raise UserError(f"{path}: not an ONNX TensorProto ({error})") from error
    if tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise UserError(f"{path}: not an ONNX TensorProto (no data type)")
    try:
        return numpy_helper.to_array(tensor, base_dir=str(path.parent))
    except (*_DECODE_ERRORS, onnx.checker.ValidationError) as error:
        raise UserError(f"{path}: cannot decode the tensor ({one_line(str(error))})") from error


def write_tensor(path: Path, array: np.ndarray, *, force: bool = False, name: str = "") -> None:
    """Write ``array`` to ``path`` (.npy or .pb) atomically; never over a file unless ``force``."""
    path = Path(path)
    suffix = _suffix(path, "output")
    array = np.asarray(array)
    if suffix == ".npy":
        refuse_npy_bfloat16(path, array.dtype)
        with atomic_path(path, force=force) as temporary:
            save_npy(temporary, array)
    else:
        from onnx import numpy_helper

        proto = numpy_helper.from_array(array, name or path.stem)
        with atomic_path(path, force=force) as temporary:
            temporary.write_bytes(proto.SerializeToString())


def refuse_npy_bfloat16(path: Path, dtype: np.dtype) -> None:
    """``UserError`` for a bfloat16 result bound for a ``.npy`` file, before any work."""
    if dtype == bfloat16:
        raise UserError(
            f"{path}: numpy's .npy format has no bfloat16 (it would save raw 2-byte records); "
            "write a .pb file instead"
        )


def save_npy(path: Path, array: np.ndarray) -> None:
    """``array`` into the .npy file ``path`` as named: through a file object, as ``np.save``
    given a name not ending in lower-case ``.npy`` (``OUT.NPY``, a temporary) appends one."""
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _suffix(path: Path, role: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        shown = suffix or "(none)"
        raise UserError(f"{path}: unsupported {role} format {shown!r}; use .npy or .pb")
    return suffix
