"""Compiled (numba) kernels. Each module exposes ``reduce_<op>(data, plan)`` returning the result,
or None for a case it does not serve (:mod:`onnx_reduce.kernels.dispatch` falls back to the
reference path then), and ``bind_<op>(dtype, plan)``, the same bound to one dtype and shape for
small arrays (:func:`onnx_reduce.kernels.dispatch.bind`). numba is imported only when one of these
modules is first used."""
