"""Validation and normalisation of user arguments: the first pipeline stage.

Every error names the argument and the value received, with NumPy's
exception types, and nothing the caller passed is modified.  The validated
arrays then make the call key the op runtime caches plans under
(``cugather.runtime.key``).  CuPy is imported lazily so that ``import
cugather`` works on machines without it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import numpy

from .plan.core import Operand

__all__ = [
    "GATHER_MODES", "TAKE_MODES", "INDEX_DTYPES", "cupy_module", "cupy_ndarray", "check_mode",
    "normalize_axis", "as_data", "as_indices", "index_dtype", "check_data_dtype",
    "is_gpu_array", "check_fill", "fill_bytes", "check_out", "current_stream",
    "external_stream", "stream_pointer", "extent",
]

GATHER_MODES = ("raise", "wrap", "clip", "fill")
TAKE_MODES = ("raise", "wrap", "clip")
INDEX_DTYPES = (numpy.dtype(numpy.int32), numpy.dtype(numpy.int64))
_DLPACK_GPU = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged

_cupy: Any = None

#: CuPy arrays and modules carry no type information.
Array = Any
Shape = Tuple[int, ...]


def cupy_module() -> Any:
    """The cupy module, imported on first use."""
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "cugather needs CuPy to run kernels: pip install 'cugather[cuda12]' "
                "(or [cuda13])") from e
        _cupy = cupy
    return _cupy


_ndarray: Any = None


def cupy_ndarray() -> Any:
    """``cupy.ndarray`` (looked up once: the type checks of every call use it)."""
    return _ndarray or _load_ndarray()


def _load_ndarray() -> Any:
    global _ndarray
    _ndarray = cupy_module().ndarray
    return _ndarray


def check_mode(mode: object, allowed: Tuple[str, ...], argname: str = "mode") -> str:
    if not isinstance(mode, str) or mode not in allowed:
        raise ValueError(f"{argname} must be one of {allowed}, got {mode!r}")
    return mode


def _type_name(obj: object) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _device_array(cp: Any, obj: Any) -> Optional[Array]:
    """Zero-copy CuPy view of a GPU array from another library, or None."""
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        if obj.__dlpack_device__()[0] in _DLPACK_GPU:
            return cp.from_dlpack(obj)
        return None
    if hasattr(obj, "__cuda_array_interface__"):
        return cp.asarray(obj)
    return None


def as_data(obj: object, argname: str = "data") -> Array:
    """``obj`` as a cupy.ndarray without copying, or TypeError."""
    cp = cupy_module()
    if isinstance(obj, cp.ndarray):
        return obj
    arr = _device_array(cp, obj)
    if arr is None:
        raise TypeError(
            f"{argname} must be a cupy.ndarray or a GPU array exposing __dlpack__ or "
            f"__cuda_array_interface__, got {_type_name(obj)} (host data: move it with "
            f"cupy.asarray first)")
    return arr


def index_dtype(dtype: numpy.dtype[Any], allow_bool: bool,
                argname: str = "indices") -> numpy.dtype[Any]:
    """The int32/int64 dtype indices of ``dtype`` are used as."""
    if dtype in INDEX_DTYPES:
        return dtype
    if dtype.kind == "b" and allow_bool:
        return INDEX_DTYPES[0]
    if dtype.kind not in "iu":
        raise TypeError(f"{argname} must be an integer array, got dtype {dtype}")
    # Small types fit int32; uint32 needs int64; uint64 wraps like numpy's cast.
    return INDEX_DTYPES[0] if dtype.itemsize < 4 else INDEX_DTYPES[1]


def as_indices(obj: object, device: int, *, allow_bool: bool = False,
               argname: str = "indices") -> Array:
    """``obj`` as a C-contiguous int32/int64 cupy.ndarray on ``device``.

    CuPy int32/int64 arrays that are C-contiguous pass through untouched; host
    values (int, sequence, NumPy array) are copied to the device.
    """
    cp = cupy_module()
    if isinstance(obj, cp.ndarray) or (not isinstance(obj, numpy.ndarray)
                                       and is_gpu_array(obj)):
        arr = as_data(obj, argname)
        if arr.data.device_id != device and arr.size:
            raise ValueError(f"{argname} are on GPU {arr.data.device_id} but data is on "
                             f"GPU {device}")
    else:
        host = numpy.asarray(obj)
        if host.dtype == object:
            raise TypeError(f"{argname} must be integers, got {_type_name(obj)} {obj!r:.80}")
        if host.size == 0 and not isinstance(obj, numpy.ndarray):
            host = host.astype(numpy.int64)  # [] is float64 to NumPy; numpy.take accepts it
        index_dtype(host.dtype, allow_bool, argname)
        with cp.cuda.Device(device):
            arr = cp.asarray(host)
    target = index_dtype(arr.dtype, allow_bool, argname)
    if arr.dtype != target or not arr.flags.c_contiguous:
        with cp.cuda.Device(device):
            # ascontiguousarray returns at least 1-d: keep a scalar index 0-d
            arr = cp.ascontiguousarray(arr, dtype=target).reshape(arr.shape)
    return arr


def is_gpu_array(obj: Any) -> bool:
    """Whether ``obj`` exposes device memory (CUDA array interface or a GPU DLPack device)."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    if hasattr(obj, "__dlpack_device__"):
        try:
            return obj.__dlpack_device__()[0] in _DLPACK_GPU
        except Exception:
            return False
    return False


def check_fill(fill_value: object) -> numpy.ndarray[Any, Any]:
    """``fill_value`` as a 0-d NumPy array, or TypeError/ValueError.

    A Python int beyond 64 bits stays a Python int (an object array): no
    dtype holds it exactly, and :func:`fill_bytes` says so for the data's.
    """
    if type(fill_value) is int and not -(1 << 63) <= fill_value < (1 << 64):
        return numpy.asarray(fill_value, dtype=object)
    value = numpy.asarray(fill_value)
    if value.dtype.kind not in "biufc":
        raise TypeError(f"fill_value must be a number, got {_type_name(fill_value)} "
                        f"{fill_value!r:.80}")
    if value.ndim != 0:
        raise ValueError(f"fill_value must be a scalar, got an array of shape {value.shape}")
    return value


def fill_bytes(fill_value: object, dtype: numpy.dtype[Any]) -> bytes:
    """The bytes of ``fill_value`` as one element of ``dtype``, checked."""
    value = check_fill(fill_value)
    kind = dtype.kind
    if value.dtype == object:  # an int beyond 64 bits
        if kind in "fc" and abs(fill_value) <= int(numpy.finfo(dtype).max):  # type: ignore
            return numpy.array(float(fill_value), dtype=dtype).tobytes()  # type: ignore
        raise ValueError(f"fill_value {fill_value} is out of range for dtype {dtype}")
    if value.dtype.kind == "c" and kind != "c" and value.imag != 0:
        raise TypeError(f"fill_value {fill_value!r} is complex; data has dtype {dtype}")
    real = value.real if value.dtype.kind == "c" else value
    if kind in "biu":
        if real.dtype.kind == "f" and not float(real).is_integer():
            raise TypeError(f"fill_value {fill_value!r} is not an integer; data has dtype {dtype}")
        as_int = int(real)
        lo, hi = (0, 1) if kind == "b" else (numpy.iinfo(dtype).min, numpy.iinfo(dtype).max)
        if not lo <= as_int <= hi:
            raise ValueError(f"fill_value {fill_value!r} is out of range for dtype {dtype} "
                             f"[{lo}, {hi}]")
        return numpy.array(as_int, dtype=dtype).tobytes()
    return numpy.array(value if kind == "c" else real, dtype=dtype).tobytes()


def extent(arr: Array, pointer: Optional[Callable[[Array], int]] = None) -> Tuple[int, int]:
    """[low, high) byte addresses an array touches (``pointer(arr)`` its address;
    default a CuPy array's)."""
    base = arr.data.ptr if pointer is None else pointer(arr)
    lo, hi = Operand(tuple(arr.shape), tuple(arr.strides), arr.itemsize).extent()
    return (base + lo, base + hi)


def check_out(out: object, shape: Shape, dtype: numpy.dtype[Any], device: int,
              inputs: Dict[str, Array], backend: Any = None) -> Array:
    """Validate ``out=``: type, shape, dtype, layout, device, no overlap.

    ``backend`` supplies the array type, devices and addresses (default CuPy's).
    """
    if backend is None:
        array_type, device_of, pointer = cupy_module().ndarray, _cupy_device, None
    else:
        array_type, device_of, pointer = backend.array_type, backend.device_of, backend.pointer
    if not isinstance(out, array_type):
        raise TypeError(f"out must be a {array_type.__module__.split('.')[0]}.ndarray, "
                        f"got {_type_name(out)}")
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}; the result has shape {shape}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}; the result has dtype {dtype}")
    if not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous (strides {out.strides})")
    if device_of(out) != device:
        raise ValueError(f"out is on GPU {device_of(out)} but data is on GPU {device}")
    if out.size:
        lo, hi = extent(out, pointer)
        for name, arr in inputs.items():
            if arr.size:
                a_lo, a_hi = extent(arr, pointer)
                if lo < a_hi and a_lo < hi:
                    raise ValueError(f"out overlaps {name} in memory; pass a separate array")
    return out


def _cupy_device(arr: Array) -> int:
    return int(arr.data.device_id)


def current_stream(stream: object) -> Any:
    """Context manager making ``stream`` CuPy's current stream, so that index
    conversions and copies run on it too (not only the kernel)."""
    cp = cupy_module()
    if isinstance(stream, cp.cuda.Stream):  # ExternalStream included
        return stream
    return external_stream(cp, stream_pointer(stream))


class _StreamHandle:
    """A raw ``cudaStream_t`` behind the CUDA stream protocol."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> Tuple[int, int]:
        return (0, self.ptr)


def external_stream(cp: Any, ptr: int) -> Any:
    """A CuPy stream object for the raw stream ``ptr`` (not owned: never destroyed)."""
    if hasattr(cp.cuda.Stream, "from_external"):  # CuPy 14 deprecates ExternalStream
        return cp.cuda.Stream.from_external(_StreamHandle(ptr))
    return cp.cuda.ExternalStream(ptr)


def stream_pointer(stream: object) -> int:
    """Raw cudaStream_t of ``stream`` (None: CuPy's current stream)."""
    cp = cupy_module()
    if stream is None:
        return int(cp.cuda.get_current_stream().ptr)
    ptr = getattr(stream, "ptr", None)
    if ptr is None:
        ptr = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if ptr is None and isinstance(stream, int) and not isinstance(stream, bool):
        ptr = stream
    if ptr is None:
        raise TypeError(f"stream must be a cupy.cuda.Stream, an object with .ptr or "
                        f".cuda_stream, or a raw stream handle; got {_type_name(stream)}")
    return int(ptr)


# ---------------------------------------------------------------- axes and dtypes
_AXIS_ERROR = getattr(getattr(numpy, "exceptions", numpy), "AxisError")


def normalize_axis(axis: object, ndim: int, argname: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``, or TypeError / numpy's AxisError."""
    if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
        raise TypeError(f"{argname} must be an integer, got {type(axis).__name__} {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise _AXIS_ERROR(axis, ndim)
    return axis % ndim


def check_data_dtype(dtype: Any, argname: str = "data") -> numpy.dtype[Any]:
    """The dtypes a GPU array can hold: booleans, integers, floats, complex."""
    dt: numpy.dtype[Any] = numpy.dtype(dtype)
    if dt.kind not in "biufc":
        raise TypeError(f"{argname} must have a boolean, integer, floating or complex dtype, "
                        f"got {dt}")
    return dt
