"""Public GatherND API: ``gather_nd`` (ONNX GatherND with batch_dims).

Pipeline per call: validate and normalise (``_arrays``) -> the bound plan for
this geometry (``_family_plan.plan_nd``, cached in ``_family``) -> one launch
of the nd kernel; raise mode adds a bounds check and one sync.
"""

from __future__ import annotations

import numpy

from .. import validate as _arrays
from ..runtime import family as _family
from ..validate import GATHER_MODES, cupy_module
from ..plan.family import plan_nd
from ..plan.gather import Operand

__all__ = ["gather_nd"]


def _check_batch_dims(batch_dims) -> int:
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, (int, numpy.integer)):
        raise TypeError(f"batch_dims must be an integer, got {type(batch_dims).__name__} "
                        f"{batch_dims!r}")
    return int(batch_dims)  # the range is checked with the shapes


def gather_nd(data, indices, batch_dims: int = 0, *, out=None, mode: str = "raise",
              fill_value=0, stream=None):
    """ONNX ``GatherND``: slices of ``data`` addressed by index tuples.

    With ``b = batch_dims`` and ``m = indices.shape[-1]``, every index tuple
    ``indices[i..., :]`` selects ``data[batch..., t0, ..., t(m-1)]``, a slice
    of shape ``data.shape[b + m:]``; the first ``b`` dimensions of ``data``
    and ``indices`` are batch dimensions walked together.  One kernel launch
    copying each slice with the widest unit its bytes and strides allow.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        Array of rank ``r >= 1``; any dtype, any strides (read in place).
    indices : cupy.ndarray, numpy.ndarray or sequence of int
        Integer array of rank ``q >= 1``; ``1 <= m <= r - b`` (at most 8).
        int32 and int64 are used as they are.  Component ``k`` of a tuple is
        valid in ``[-n, n)`` with ``n = data.shape[b + k]``, negative values
        counting from the end.
    batch_dims : int
        Number of leading batch dimensions, ``0 <= b < min(q, r)``;
        ``indices.shape[:b]`` must equal ``data.shape[:b]``.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype; must not
        overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy, per component: ``"raise"`` checks every value on
        the GPU before anything is written and raises IndexError (one extra
        kernel and one host synchronisation); ``"wrap"`` takes each component
        modulo its dimension; ``"clip"`` clamps it to ``[0, n-1]``;
        ``"fill"`` writes ``fill_value`` over the whole slice of a tuple with
        any component out of range.  The last three never synchronise.
    fill_value : scalar
        Written for out-of-range tuples when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        Shape ``indices.shape[:-1] + data.shape[b + m:]``, dtype of ``data``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad value, its position in
        ``indices``, the axis of ``data`` it addresses and the valid range.
    ValueError
        For shapes that break the rules above.
    """
    _arrays.check_mode(mode, GATHER_MODES)
    if stream is not None:  # conversions and copies run on it too
        with _arrays.current_stream(stream):
            return gather_nd(data, indices, batch_dims, out=out, mode=mode,
                             fill_value=fill_value)
    b = batch_dims if type(batch_dims) is int else _check_batch_dims(batch_dims)
    cp = cupy_module()
    if type(data) is not cp.ndarray:
        data = _arrays.as_data(data)
    mem = data.data
    device = mem.device_id
    if (type(indices) is not cp.ndarray or indices.dtype not in _arrays.INDEX_DTYPES
            or not indices.flags.c_contiguous or indices.data.device_id != device):
        indices = _arrays.as_indices(indices, device)
    p = mem.ptr
    q = out.data.ptr if isinstance(out, cp.ndarray) else 0
    key = ("nd", device, data.shape, data.strides, data.dtype, indices.shape, indices.dtype,
           (p & 255 and p & -p) or 256, (q & 255 and q & -q) or 256, b, mode,
           _family.fill_key(fill_value))
    bound = _family.bound_for(
        key, lambda: plan_nd(Operand(data.shape, data.strides, data.itemsize, key[7]),
                             indices.shape, indices.dtype.name, b, mode, out_align=key[8]),
        device, fill_value, data.dtype)
    if bound.copy_data:
        with cp.cuda.Device(device):
            data = data.copy(order="C")
        return gather_nd(data, indices, b, out=out, mode=mode, fill_value=fill_value,
                         stream=stream)
    return _family.run(bound, data, indices, out, stream, device)
