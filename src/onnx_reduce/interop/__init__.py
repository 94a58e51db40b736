"""Arrays of other libraries at the front doors: torch, jax and any Array API array in, an array
of the input's library, dtype and device out, with the numpy path's values.

CPU inputs reach the kernels without a copy (torch through its zero-copy ``numpy()`` view,
bfloat16 viewed as ``ml_dtypes.bfloat16``; jax and other libraries through DLPack); arrays on a
device the kernels cannot read raise ``TypeError`` naming the device, never move silently.
torch tensors and traced jax arrays go through :mod:`.torch_ops` / :mod:`.jax_ops`, which add
gradients (:mod:`onnx_reduce.kernels.gradients`).
"""
