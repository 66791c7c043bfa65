"""The JAX front door: eager JAX arrays in, JAX arrays out, through DLPack.

JAX arrays are taken with ``cupy.from_dlpack`` (CuPy passes its current
stream, JAX makes the buffer ready for it) and results handed back with
``jax.dlpack.from_dlpack`` (JAX passes its stream, CuPy orders the hand-over
after the gather): DLPack's stream rules on both sides, zero-copy.  A dtype
CuPy cannot hold (ml_dtypes' bfloat16 and float8 types) is read in place as
unsigned integers of its size once JAX has finished writing it
(``block_until_ready``), gathered as bytes, and turned back into its dtype
by ``jax.lax.bitcast_convert_type`` (one copy of the output inside JAX).
Inside ``jax.jit`` arrays are tracers: an XLA custom call (``jax.ffi``)
would need a compiled handler, so that is a TypeError naming ``jnp.take``.
Imported only once a JAX array is seen.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import jax
import numpy

from .. import frontends, validate
from ..runtime.launch import CudaBackend
from . import dtypes
from .views import View

__all__ = ["JaxView", "JaxBackend", "JaxFrontend", "BACKEND", "FRONTEND", "view_of"]


class JaxView(View):
    """A JAX array as the op runtime reads it; ``base`` is a CuPy array over its
    memory (holding the same bytes as unsigned integers where CuPy lacks the dtype)."""

    __slots__ = ()

    @classmethod
    def wrap(cls, base: Any, dtype: numpy.dtype[Any]) -> "JaxView":
        return JaxView(base.shape, base.strides, dtype, base.data.ptr, base.data.device_id, base)


_TRACER = getattr(jax.core, "Tracer", ())


def _device(obj: Any, argname: str) -> Any:
    if isinstance(obj, _TRACER) or not hasattr(obj, "unsafe_buffer_pointer"):
        raise TypeError(f"{argname} is a traced JAX value: cugather runs eagerly on concrete "
                        f"JAX arrays, not inside jax.jit (use jnp.take there)")
    devices = obj.devices()
    if len(devices) != 1:
        raise ValueError(f"{argname} is spread over {len(devices)} devices; cugather takes "
                         f"arrays on one GPU")
    device = next(iter(devices))
    if device.platform not in ("gpu", "cuda"):
        raise TypeError(f"{argname} is a JAX array on {device.platform}; cugather runs on "
                        f"CUDA GPUs")
    return device


def view_of(obj: Any, argname: str = "data") -> JaxView:
    """The :class:`JaxView` of a concrete single-GPU JAX array."""
    device = _device(obj, argname)
    dt = numpy.dtype(obj.dtype)
    cp = validate.cupy_module()
    if dtypes.is_native(dt):
        try:
            return JaxView.wrap(cp.from_dlpack(obj), dt)
        except (TypeError, ValueError, BufferError):  # a dtype DLPack or CuPy cannot carry
            pass
    unsigned = dtypes.unsigned_like(dt)
    obj.block_until_ready()  # read in place below: JAX must have written it
    shape = tuple(obj.shape)
    nbytes = max(1, int(numpy.prod(shape, dtype=numpy.int64)) * dt.itemsize)
    mem = cp.cuda.UnownedMemory(obj.unsafe_buffer_pointer(), nbytes, obj,
                                device.local_hardware_id)
    base = cp.ndarray(shape, unsigned, cp.cuda.MemoryPointer(mem, 0))
    return JaxView.wrap(base, dt)


class JaxBackend(CudaBackend):
    """The runtime's backend for JAX arrays: CuPy memory and CuPy's current stream."""

    fast_path = False
    array_type = JaxView

    def __init__(self) -> None:
        CudaBackend.__init__(self)  # the kernel loader, limits and flags of CUDA

    @staticmethod
    def pointer(arr: Any) -> int:
        return int(arr.ptr)

    @staticmethod
    def device_of(arr: Any) -> int:
        return int(arr.device)

    def empty(self, shape: Tuple[int, ...], dtype: numpy.dtype[Any]) -> JaxView:
        cp = validate.cupy_module()
        if dtypes.is_native(dtype):
            try:
                return JaxView.wrap(cp.ndarray(shape, dtype), dtype)
            except (TypeError, ValueError):  # CuPy knows some ml_dtypes, not all
                pass
        return JaxView.wrap(cp.ndarray(shape, dtypes.unsigned_like(dtype)), dtype)

    def index_value(self, indices: Any, pos: int) -> int:
        return int(indices.base.reshape(-1)[pos].get())

    def contiguous_copy(self, data: Any, device: int) -> JaxView:
        return JaxView.wrap(super().contiguous_copy(data.base, device), data.dtype)

    @staticmethod
    def fill_bytes(fill_value: Any, dtype: Any) -> bytes:
        """``fill_value`` as one element of ``dtype`` (ml_dtypes' types included)."""
        if dtypes.is_native(dtype):
            return validate.fill_bytes(fill_value, dtype)
        return dtypes.ml_fill_bytes(fill_value, dtype)


BACKEND = JaxBackend()


class JaxFrontend:
    """How the public ops take JAX arrays and hand results back (see
    :mod:`cugather.frontends`)."""

    name = "jax"
    backend = BACKEND
    view = JaxView
    fast = None  # no memo of its own: DLPack's hand-over runs on every call
    remember = None

    @staticmethod
    def prepare_data(obj: Any, argname: str = "data") -> JaxView:
        return view_of(obj, argname)

    @staticmethod
    def prepare_indices(obj: Any, device: int, allow_bool: bool = False,
                        argname: str = "indices") -> JaxView:
        """``obj`` as C-contiguous int32/int64 indices on ``device`` (JAX arrays
        through DLPack; host values copied as for CuPy calls)."""
        if isinstance(obj, jax.Array):
            _device(obj, argname)
            obj = validate.cupy_module().from_dlpack(obj)
        c = validate.as_indices(obj, device, allow_bool=allow_bool, argname=argname)
        return JaxView.wrap(c, c.dtype)

    @staticmethod
    def prepare_out(out: Any) -> Optional[JaxView]:
        if out is None:
            return None
        raise TypeError("out= cannot be used with JAX arrays: they are immutable (the result "
                        "is a new JAX array)")

    @staticmethod
    def result(view: Any) -> Any:
        base = view.base
        native = base.dtype == view.dtype  # else CuPy holds the bytes as unsigned integers
        if frontends._output == "cupy":
            if not native:
                raise TypeError(f"CuPy cannot hold dtype {view.dtype}; set_output('input') "
                                f"returns it as a JAX array")
            return base
        arr = jax.dlpack.from_dlpack(base)
        return arr if native else jax.lax.bitcast_convert_type(arr, view.dtype)

    @staticmethod
    def on_stream(stream: Any) -> Any:
        """A context making ``stream`` CuPy's current stream (the DLPack hand-overs
        and index conversions use it)."""
        if stream is None:
            import contextlib

            return contextlib.nullcontext()
        return validate.current_stream(stream)


FRONTEND = JaxFrontend()
