"""GatherBlockQuantized (``gather_block_quantized``): onnxruntime's ``com.microsoft``
contrib operator -- rows of a block-quantized uint8 table, dequantized as they
are gathered.

Per call: validate -> the op runtime (``cugather.runtime``): the plan
(``cugather.plan.quantized``) cached for this call key, which holds the shapes
and dtypes of scales and zero points too (so a cached call checks nothing
twice), bound on first use, one launch, which in raise mode checks every
index it reads (one host synchronisation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy

from .. import validate
from ..plan.core import DeviceLimits, Operand, Plan
from ..plan.quantized import OUT_DTYPES, plan_quantized, quantized_shapes
from ..runtime.cache import PlanCacheInfo
from ..runtime.key import Geometry, call_key, fill_token, geometry_of_key, out_bits
from ..runtime.launch import CUDA, execute
from ..runtime.op import OpRuntime
from ..validate import Array

__all__ = ["gather_block_quantized", "run", "plan_for", "plan_of", "cache_info", "cache_clear"]

_UINT8 = numpy.dtype(numpy.uint8)


def _check_arrays(geo: Geometry) -> None:
    """Dtypes and shapes of data, scales and zero points against the attributes."""
    q, block, bits, data_dtype, s_shape, s_dtype, z_shape, z_dtype = geo.extra
    if data_dtype != _UINT8:
        raise TypeError(f"data must have dtype uint8 (packed 4-bit or 8-bit values), got "
                        f"{data_dtype}")
    if numpy.dtype(s_dtype).name not in OUT_DTYPES:
        raise TypeError(f"scales must have dtype float16, bfloat16 or float32, got {s_dtype}")
    shapes = quantized_shapes(geo.data_shape, bits, block, geo.axis, q)
    where = (f"for data of shape {geo.data_shape} with bits={bits}, block_size={block}, "
             f"quantize_axis={q}")
    if tuple(s_shape) != shapes.scales:
        raise ValueError(f"scales must have shape {shapes.scales} {where}; got {tuple(s_shape)}")
    if z_shape is not None:
        if z_dtype != _UINT8:
            raise TypeError(f"zero_points must have dtype uint8 (the data's), got {z_dtype}")
        if tuple(z_shape) != shapes.zero_points:
            packing = " (two 4-bit zero points per byte)" if bits == 4 else ""
            raise ValueError(f"zero_points must have shape {shapes.zero_points}{packing} "
                             f"{where}; got {tuple(z_shape)}")


def plan_for(geo: Geometry, limits: DeviceLimits, **force: Any) -> Plan:
    """The plan of a call with geometry ``geo`` (``force``: the planner's test and
    benchmark knobs: ``kind``, ``max_grid``, ``values_per_thread``, ``rows_per_thread``)."""
    _check_arrays(geo)
    q, block, bits = geo.extra[:3]
    data = Operand(geo.data_shape, geo.data_strides, 1, geo.data_align)
    if not data.c_contiguous:  # run() copies such tables first
        raise ValueError(f"data must be C-contiguous, got strides {geo.data_strides}")
    plan = plan_quantized(geo.data_shape, geo.indices_shape, geo.index_dtype.name,
                          out_dtype=geo.dtype.name, bits=bits, block_size=block,
                          gather_axis=geo.axis, quantize_axis=q, mode=geo.mode,
                          data_align=geo.data_align, out_align=geo.out_align, limits=limits,
                          **force)
    return dataclasses.replace(plan, out_dtype=geo.dtype)


def _geometry(key: tuple[Any, ...]) -> Geometry:
    g, q, block, bits, mode, fill, s_shape, s_dtype, z_shape, z_dtype = key[10:]
    geo = geometry_of_key("quantized", key, g, mode, fill,
                          (q, block, bits, key[4], s_shape, s_dtype, z_shape, z_dtype))
    return geo._replace(dtype=s_dtype)  # the output's dtype, which fill values take


_RUNTIME = OpRuntime(plan_for, _geometry, 256)


def _key(backend: Any, device: int, data: Array, indices: Array, scales: Array,
         zero_points: Optional[Array], out: Optional[Array], gather_axis: int,
         quantize_axis: int, block_size: int, bits: int, mode: str,
         fill: object) -> tuple[Any, ...]:
    z_shape = None if zero_points is None else zero_points.shape
    z_dtype = None if zero_points is None else zero_points.dtype
    return call_key(backend, device, data, backend.pointer(data), indices, out_bits(out, backend),
                    (gather_axis, quantize_axis, block_size, bits, mode, fill, scales.shape,
                     scales.dtype, z_shape, z_dtype))


def plan_of(data: Array, indices: Array, scales: Array, zero_points: Optional[Array] = None, *,
            gather_axis: int = 0, quantize_axis: int = -1, block_size: int = 128, bits: int = 4,
            mode: str = "raise", out: Optional[Array] = None, backend: Any = CUDA,
            device: Optional[int] = None, **force: Any) -> Plan:
    """The plan a call on these (C-contiguous) arrays of ``backend`` would use;
    launches nothing.  ``force``: the planner's knobs (``kind``, ``max_grid``,
    ``values_per_thread``, ``rows_per_thread``)."""
    device = backend.device_of(data) if device is None else device
    key = _key(backend, device, data, indices, scales, zero_points, out, gather_axis,
               quantize_axis, block_size, bits, mode, None)
    return plan_for(_geometry(key), backend.limits(device), **force)


def cache_info() -> PlanCacheInfo:
    """Hits, misses, maxsize and size of gather_block_quantized's plan cache."""
    return _RUNTIME.info()


def cache_clear() -> int:
    """Drop every cached plan of gather_block_quantized."""
    return _RUNTIME.clear()


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, numpy.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def _contiguous(arr: Array, device: int, backend: Any) -> Array:
    return arr if arr.flags.c_contiguous else backend.contiguous_copy(arr, device)


def run(data: Array, indices: Array, scales: Array, zero_points: Optional[Array],
        gather_axis: int, quantize_axis: int, block_size: int, bits: int,
        out: Optional[Array], mode: str, fill_value: Any, stream: Any, device: int,
        backend: Any) -> Array:
    """GatherBlockQuantized on arrays of ``backend`` (data and indices validated):
    call key, runtime, launch.  Tables not C-contiguous are copied first."""
    if type(fill_value) is not int:
        validate.check_fill(fill_value)
    for name, arr in (("scales", scales), ("zero_points", zero_points)):
        if arr is not None and backend.device_of(arr) != device and arr.size:
            raise ValueError(f"{name} are on GPU {backend.device_of(arr)} but data is on GPU "
                             f"{device}")
    data = _contiguous(data, device, backend)
    scales = _contiguous(scales, device, backend)
    if zero_points is not None:
        zero_points = _contiguous(zero_points, device, backend)
    key = _key(backend, device, data, indices, scales, zero_points, out, gather_axis,
               quantize_axis, block_size, bits, mode,
               fill_token(fill_value) if mode == "fill" else None)
    return _RUNTIME.run(key, data, backend.pointer(data), indices, out, stream, fill_value,
                        (("scales", scales), ("zero_points", zero_points)))


def _cached(data: Array, indices: Array, scales: Array, zero_points: Optional[Array],
            gather_axis: int, quantize_axis: int, block_size: int, bits: int,
            out: Optional[Array], mode: str, fill_value: int) -> Optional[Array]:
    """The cached path (see GatherOp.__call__) for CuPy arrays with contiguous scales
    and zero points: the result, or None when the call's key has no plan yet."""
    mem = data.data
    device = mem.device_id
    if (indices.data.device_id != device or scales.data.device_id != device
            or (zero_points is not None and zero_points.data.device_id != device)):
        return None
    bound = _RUNTIME.cached(_key(CUDA, device, data, indices, scales, zero_points, out,
                                 gather_axis, quantize_axis, block_size, bits, mode,
                                 fill_value if mode == "fill" else None))
    if bound is None or bound.copy_data:
        return None
    return execute(bound, data, mem.ptr, indices, out, None, device,
                   (("scales", scales), ("zero_points", zero_points)))


def gather_block_quantized(data: Any, indices: Any, scales: Any, zero_points: Any = None, *,
                           gather_axis: int = 0, quantize_axis: int = -1,
                           block_size: int = 128, bits: int = 4, out: Optional[Array] = None,
                           mode: str = "raise", fill_value: Any = 0,
                           stream: Any = None) -> Array:
    """onnxruntime's ``GatherBlockQuantized``: gather rows of a block-quantized
    table and dequantize them in the same pass.

    ``data`` holds the table quantized in blocks of ``block_size`` values along
    ``quantize_axis``; every gathered value becomes
    ``float32(q - zero_point) * float32(scale)`` of its block, rounded once to
    the scales' dtype (onnxruntime's CPU kernel computes exactly this).  One
    kernel launch: each thread reads the packed bytes of a chunk of 16 or 32
    values of up to four rows, each chunk's scale and zero point once, and
    writes the values with 16-byte stores.

    Parameters
    ----------
    data : cupy.ndarray or GPU array (DLPack / CUDA array interface)
        uint8 table of rank ``r >= 2``.  With ``bits=4`` each byte holds two
        values, the low nibble first, packed along the last axis: the table
        has ``2 * data.shape[-1]`` values there (an odd count of real values
        leaves a padding nibble, dequantized like the others).  With
        ``bits=8`` one value per byte.
    indices : cupy.ndarray, numpy.ndarray or sequence of int
        int32 or int64 (other integers are converted) of any shape; values
        valid in ``[-n, n)`` for ``n = data.shape[0]``, negative ones counting
        from the end.
    scales : cupy.ndarray
        float16, bfloat16 or float32, of the table's (unpacked) shape with
        ``ceil(values / block_size)`` entries on the quantize axis.
    zero_points : cupy.ndarray, optional
        uint8, one per block: the scales' shape with 8 bits; with 4 bits two
        per byte (low nibble first) along the quantize axis, so half as many
        bytes there, rounded up.  Default ``2**(bits - 1)`` (8 or 128), the
        MatMulNBits convention for uint8 data.
    gather_axis : int
        Must be 0 (or ``-r``): onnxruntime's schema for uint8 data.
    quantize_axis : int
        Any axis but the gather axis with ``bits=8``; the last with ``bits=4``.
        The last axis (the default) takes the fast row kernel.
    block_size : int
        Values per block: a power of two, at least 16.
    bits : {4, 8}
        Bits per value.
    out : cupy.ndarray, optional
        C-contiguous destination of the result's shape and the scales' dtype;
        must not overlap the inputs.
    mode : {"raise", "wrap", "clip", "fill"}
        Out-of-range policy: ``"raise"`` has the kernel check every index it
        reads and raises IndexError after one host synchronisation (with
        ``out=``, a bounds check runs first so that ``out`` stays untouched);
        ``"wrap"`` takes indices modulo ``n``; ``"clip"`` clamps them to
        ``[0, n-1]``; ``"fill"`` writes ``fill_value`` over the rows of
        out-of-range indices (``fill_value=0`` is what onnxruntime does).
        The last three never synchronise.
    fill_value : scalar
        Written for out-of-range indices when ``mode="fill"``.
    stream : cupy.cuda.Stream, optional
        Stream to run on (default: CuPy's current stream).

    Returns
    -------
    cupy.ndarray
        ``indices.shape + values.shape[1:]`` in the scales' dtype, where
        ``values.shape`` is ``data.shape`` with ``2 * data.shape[-1]`` on the
        last axis for ``bits=4``.

    Raises
    ------
    IndexError
        In ``"raise"`` mode, naming the first bad value, its position in
        ``indices``, the axis and the valid range.
    TypeError
        For dtypes other than the above, or non-integer attributes.
    ValueError
        For bits other than 4 and 8, a block size that is not a power of two
        of at least 16, axes breaking the rules above, and shapes of scales
        or zero points that do not match the table.
    """
    cp = validate.cupy_module()
    nd = cp.ndarray
    if (stream is None and type(data) is nd and type(indices) is nd and type(scales) is nd
            and scales._c_contiguous and (zero_points is None or (
                type(zero_points) is nd and zero_points._c_contiguous))
            and type(gather_axis) is int and type(quantize_axis) is int
            and type(block_size) is int and type(bits) is int and type(mode) is str
            and (mode != "fill" or type(fill_value) is int)):
        result = _cached(data, indices, scales, zero_points, gather_axis, quantize_axis,
                         block_size, bits, out, mode, fill_value)
        if result is not None:
            return result
    validate.check_mode(mode, validate.GATHER_MODES)
    if stream is not None:  # conversions and copies run on it too
        with validate.current_stream(stream):
            return gather_block_quantized(
                data, indices, scales, zero_points, gather_axis=gather_axis,
                quantize_axis=quantize_axis, block_size=block_size, bits=bits, out=out,
                mode=mode, fill_value=fill_value)
    g, q = _int(gather_axis, "gather_axis"), _int(quantize_axis, "quantize_axis")
    block, nbits = _int(block_size, "block_size"), _int(bits, "bits")
    if type(data) is not cp.ndarray:
        data = validate.as_data(data)
    scales = validate.as_data(scales, "scales")
    if zero_points is not None:
        zero_points = validate.as_data(zero_points, "zero_points")
    device = data.data.device_id
    indices = validate.as_indices(indices, device)
    return run(data, indices, scales, zero_points, g, q, block, nbits, out, mode, fill_value,
               None, device, CUDA)
