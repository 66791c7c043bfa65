"""Public GatherElements API: gather_elements (ONNX, torch.gather) and
take_along_axis (numpy).

Pipeline per call: validate and normalise (``_arrays``) -> the bound plan for
this geometry (``_family_plan.plan_elements``, cached in ``_family``) -> one
launch of the elements kernel; raise mode adds a bounds check and one sync.
"""

from __future__ import annotations

import numpy

from .. import validate as _arrays
from ..runtime import family as _family
from ..validate import GATHER_MODES, cupy_module
from ..plan.family import along_axis_shape, elements_shape, plan_elements
from ..plan.gather import Operand, normalize_axis

__all__ = ["gather_elements", "take_along_axis"]


def _call(tag, data, indices, axis, out, mode, fill_value, stream, shape_rule):
    if stream is not None:  # conversions and copies run on it too
        with _arrays.current_stream(stream):
            return _call(tag, data, indices, axis, out, mode, fill_value, None, shape_rule)
    cp = cupy_module()
    mem = data.data
    device = mem.device_id
    if (type(indices) is not cp.ndarray or indices.dtype not in _arrays.INDEX_DTYPES
            or not indices.flags.c_contiguous or indices.data.device_id != device):
        indices = _arrays.as_indices(indices, device)
    if type(axis) is not int or not -data.ndim <= axis < data.ndim:
        axis = normalize_axis(axis, data.ndim)  # TypeError / AxisError, or a plain int
    axis %= data.ndim
    p = mem.ptr
    q = out.data.ptr if isinstance(out, cp.ndarray) else 0
    key = (tag, device, data.shape, data.strides, data.dtype, indices.shape, indices.dtype,
           (p & 255 and p & -p) or 256, (q & 255 and q & -q) or 256, axis, mode,
           _family.fill_key(fill_value))
    bound = _family.bound_for(key, lambda: _plan(data, indices, axis, mode, shape_rule, key),
                              device, fill_value, data.dtype)
    if bound.copy_data:
        with cp.cuda.Device(device):
            data = data.copy(order="C")
        return _call(tag, data, indices, axis, out, mode, fill_value, stream, shape_rule)
    return _family.run(bound, data, indices, out, stream, device)


def _plan(data, indices, axis, mode, shape_rule, key):
    out_shape = shape_rule(data.shape, indices.shape, axis)
    return plan_elements(Operand(data.shape, data.strides, data.itemsize, key[7]),
                         indices.shape, indices.dtype.name, axis, mode,
                         out_shape=out_shape, out_align=key[8])


def gather_elements(data, indices, axis: int = 0, *, out=None, mode: str = "raise",
                    fill_value=0, stream=None):
    """ONNX ``GatherElements`` (``torch.gather``): pick one element per index.

    ``out[i][j][k] = data[indices[i][j][k]][j][k]`` for ``axis=0``, and
    likewise for other axes: every output element takes the element of
    ``data`` at its own position, with the ``axis`` coordinate replaced by
    the index stored at that position.  One kernel launch.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        Array of rank >= 1; any dtype, any strides (read in place).
    indices : cupy.ndarray, numpy.ndarray or sequence of int
        Integer indices of the same rank as ``data``; on dimensions other than
        ``axis`` they may be smaller than ``data``, never larger.  int32 and
        int64 are used as they are.  Values in ``[-n, n)`` are valid (``n =
        data.shape[axis]``), negative ones counting from the end.
    axis : int
        Axis of ``data`` the indices address.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and dtype; must not
        overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy.  ``"raise"`` checks every index on the GPU before
        anything is written and raises IndexError (one extra kernel and one
        host synchronisation); ``"wrap"`` takes indices modulo ``n``;
        ``"clip"`` clamps to ``[0, n-1]``; ``"fill"`` writes ``fill_value``.
        The last three never synchronise and are safe inside CUDA graph
        capture.
    fill_value : scalar
        Written for out-of-range indices when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        Shape ``indices.shape``, dtype of ``data``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad index, its position and the
        valid range; nothing is written.
    ValueError
        If the ranks differ or indices exceed data on another dimension.
    """
    _arrays.check_mode(mode, GATHER_MODES)
    cp = cupy_module()
    if type(data) is not cp.ndarray:
        data = _arrays.as_data(data)
    if data.ndim == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    return _call("elements", data, indices, axis, out, mode, fill_value, stream,
                 elements_shape)


def take_along_axis(arr, indices, axis=-1):
    """``numpy.take_along_axis`` for CuPy arrays, in one kernel launch.

    Parameters
    ----------
    arr : cupy.ndarray or GPU array
        Source array (any dtype, any strides).
    indices : cupy.ndarray or array_like of int
        Integer indices with ``arr``'s number of dimensions; the dimensions
        other than ``axis`` broadcast against ``arr`` (neither side is
        materialised).  Negative values count from the end.
    axis : int or None
        Axis to take along (default -1, as in NumPy 2.3+).  ``None`` takes
        from the flattened array; ``indices`` must then be 1-D.

    Returns
    -------
    cupy.ndarray
        The broadcast shape of ``arr`` and ``indices``, with
        ``indices.shape[axis]`` on ``axis``.

    Raises
    ------
    IndexError
        For non-integer indices, indices that do not broadcast against
        ``arr``, and any index outside ``[-n, n)``, checked on the GPU before
        anything is written (one host synchronisation).
    ValueError
        If ``indices`` does not have ``arr``'s number of dimensions.
    """
    cp = cupy_module()
    arr = _arrays.as_data(arr, "arr")
    if _arrays._is_gpu_array(indices) and not isinstance(indices, cp.ndarray):
        indices = _arrays.as_data(indices, "indices")  # torch and others: a zero-copy view
    if not hasattr(indices, "dtype"):
        indices = numpy.asarray(indices)
        if indices.size == 0 and indices.dtype.kind == "f":
            indices = indices.astype(numpy.int64)  # [] is float64 to NumPy
    if numpy.dtype(indices.dtype).kind not in "iu":
        raise IndexError(f"`indices` must be an integer array, got dtype {indices.dtype}")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(f"when axis=None, `indices` must have a single dimension; got "
                             f"shape {tuple(indices.shape)}")
        with cp.cuda.Device(arr.data.device_id):
            arr = arr.reshape(-1)
        axis = 0
    return _call("along", arr, indices, axis, None, "raise", 0, None, along_axis_shape)
