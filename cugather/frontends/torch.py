"""The torch front door: torch tensors straight into the op runtime.

No DLPack and no CuPy array per call: a :class:`TorchView` reads the
tensor's shape, strides, pointer and device, :class:`TorchBackend` allocates
outputs with ``torch.empty`` (torch's caching allocator, the caller's torch
dtype) and launches on torch's current stream of the data's device, so a
call is ordered with the caller's torch work and can be captured in a CUDA
graph.  Kernels load and launch as :class:`~cugather.runtime.launch.CudaBackend`
does (CuPy loads the module).  Imported only once a torch tensor is seen.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Dict, Optional, Tuple

import numpy
import torch

from .. import frontends, validate
from ..runtime.launch import CudaBackend
from . import dtypes
from .views import View, c_strides

__all__ = ["TorchView", "TorchBackend", "TorchFrontend", "BACKEND", "FRONTEND", "numpy_dtype",
           "torch_dtype", "view_of"]

_QUANTIZED = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")


def _torch_dtypes() -> Dict[Any, numpy.dtype[Any]]:
    found: Dict[Any, numpy.dtype[Any]] = {}
    for attr in dir(torch):
        td = getattr(torch, attr)
        if isinstance(td, torch.dtype) and td not in found:
            name = str(td)[len("torch."):]
            if name in _QUANTIZED or not 1 <= td.itemsize <= 16:
                continue
            found[td] = dtypes.numpy_dtype(name, td.itemsize)
    return found


_TO_NUMPY = _torch_dtypes()
_TO_TORCH = {dt: td for td, dt in _TO_NUMPY.items()}
_I32, _I64 = validate.INDEX_DTYPES
_INDEX: Dict[Any, numpy.dtype[Any]] = {torch.int32: _I32, torch.int64: _I64}


def numpy_dtype(td: Any) -> numpy.dtype[Any]:
    """The NumPy dtype a torch dtype is gathered as (distinct per torch dtype)."""
    dt = _TO_NUMPY.get(td)
    if dt is None:
        raise TypeError(f"cugather cannot gather torch tensors of dtype {td}")
    return dt


def torch_dtype(dt: numpy.dtype[Any]) -> Any:
    """The torch dtype :func:`numpy_dtype` maps to ``dt``."""
    return _TO_TORCH[dt]


_get_device = getattr(torch._C, "_cuda_getDevice", None)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_device() -> int:
    return int(_get_device()) if _get_device is not None else torch.cuda.current_device()


def current_stream_pointer(device: int) -> int:
    """Raw handle of torch's current stream on ``device`` (what torch work runs on)."""
    if _raw_stream is not None:
        return int(_raw_stream(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


_strides = functools.lru_cache(maxsize=4096)(c_strides)


class TorchView(View):
    """A torch tensor as the op runtime reads it; ``base`` is the tensor."""

    __slots__ = ()

    @classmethod
    def wrap(cls, base: Any, dtype: numpy.dtype[Any]) -> "TorchView":
        return view_of(base)


def view_of(t: Any, argname: str = "data") -> TorchView:
    """The :class:`TorchView` of CUDA tensor ``t``; TypeError for CPU tensors."""
    dt = _TO_NUMPY.get(t.dtype)
    if dt is None:
        raise TypeError(f"{argname} has dtype {t.dtype}, which cugather cannot gather")
    device = t.get_device()
    if device < 0:
        raise TypeError(f"{argname} is a torch tensor on {t.device}; cugather runs on CUDA "
                        f"tensors (move it with .cuda(); torch.ops.cugather.* also run on CPU "
                        f"tensors)")
    if t.is_neg() or t.is_conj():  # lazy negation/conjugation bits: the memory lacks them
        t = t.resolve_neg().resolve_conj()
    isz = dt.itemsize
    return TorchView(tuple(t.shape), tuple([s * isz for s in t.stride()]), dt, t.data_ptr(),
                     device, t)


class TorchBackend(CudaBackend):
    """The runtime's backend for torch tensors (kernels loaded and launched as CUDA's)."""

    fast_path = False  # the runtime's fast path allocates CuPy arrays
    array_type = TorchView

    def __init__(self) -> None:
        CudaBackend.__init__(self)  # the kernel loader, limits and flags of CUDA

    @staticmethod
    def pointer(arr: Any) -> int:
        return int(arr.ptr)

    @staticmethod
    def device_of(arr: Any) -> int:
        return int(arr.device)

    @staticmethod
    def stream_pointer(stream: Any) -> int:
        """``stream``'s handle; None: torch's current stream of the current device
        (the runtime launches with the data's device current)."""
        if stream is None:
            return current_stream_pointer(_current_device())
        return validate.stream_pointer(stream)

    def empty(self, shape: Tuple[int, ...], dtype: numpy.dtype[Any]) -> TorchView:
        device = _current_device()
        t = torch.empty(shape, dtype=_TO_TORCH[dtype], device=_device(device))
        return TorchView(shape, _strides(shape, dtype.itemsize), dtype, t.data_ptr(), device, t)

    def index_value(self, indices: Any, pos: int) -> int:
        t = indices.base if isinstance(indices, TorchView) else indices  # fast(): the tensor
        return int(t.reshape(-1)[pos].item())

    def contiguous_copy(self, data: Any, device: int) -> TorchView:
        return view_of(data.base.contiguous())

    @staticmethod
    def fill_bytes(fill_value: Any, dtype: Any) -> bytes:
        """``fill_value`` as one element of the torch dtype ``dtype`` stands for."""
        if dtypes.is_native(dtype):
            return validate.fill_bytes(fill_value, dtype)
        return fill_bytes(fill_value, _TO_TORCH[dtype])

    def cached_call(self, bound: Any) -> Any:
        """The runtime's cached path for torch tensors (see CudaBackend.cached_call):
        a torch output on torch's current stream, every name bound in advance."""
        if bound.main is None or bound.copy_data or _raw_stream is None or _get_device is None:
            return None
        return _cached_call(bound, self)


def fill_bytes(fill_value: object, td: Any) -> bytes:
    """The bytes of ``fill_value`` as one element of torch dtype ``td``, checked."""
    name = str(td)[len("torch."):]
    if td.is_floating_point:
        info = torch.finfo(td)

        def convert(x: float) -> Tuple[bytes, float]:
            t = torch.tensor(x, dtype=td)
            return bytes(t.reshape(1).view(torch.uint8).tolist()), float(t.to(torch.float64))

        return dtypes.float_fill_bytes(fill_value, name, float(info.min), float(info.max),
                                       convert)
    if name in dtypes.TORCH_NUMPY:
        return validate.fill_bytes(fill_value, numpy.dtype(dtypes.TORCH_NUMPY[name]))
    value = validate.check_fill(fill_value)
    try:
        t = torch.tensor(value.item(), dtype=td)
        return bytes(t.reshape(1).view(torch.uint8).tolist())
    except (TypeError, RuntimeError, ValueError) as e:
        raise TypeError(f"fill_value {fill_value!r} cannot be written as dtype {name}: {e}") \
            from None


_devices: Dict[int, Any] = {}


def _device(index: int) -> Any:
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device("cuda", index)
    return d


def _cached_call(bound: Any, backend: TorchBackend) -> Any:
    """``call(data_ptr, indices_view, pointers) -> TorchView | None`` (the runtime's
    protocol), with ``call.tensor(data_ptr, indices_ptr, indices, *pointers) ->
    torch.Tensor | None`` beside it for the front door's own memo (:func:`fast`)."""
    tensor_call = _tensor_call(bound, backend)
    shape, dtype, device = bound.out_shape, bound.out_dtype, bound.device
    strides = _strides(shape, dtype.itemsize)

    def call(data_ptr: int, indices: Any, pointers: Tuple[int, ...]) -> Any:
        t = tensor_call(data_ptr, indices.ptr, indices, *pointers)
        if t is None:
            return None
        return TorchView(shape, strides, dtype, t.data_ptr(), device, t)

    call.tensor = tensor_call  # type: ignore[attr-defined]
    return call


def _tensor_call(bound: Any, backend: TorchBackend) -> Any:
    # runtime.launch._cupy_call with torch's allocator and stream: each closure
    # binds its library's calls directly, the cost of a call being the point.
    from ..runtime.launch import CAPTURE_ERROR, NO_BAD, bad_index, ready_contexts

    pack, buf, lock, launch, handle, config, params = bound.main.parts()
    g0, g1, g2, b0, b1, b2, shared = config
    shape, dtype, device = bound.out_shape, bound.out_dtype, bound.device
    tdtype, tdevice = _TO_TORCH[dtype], _device(device)
    # The output is C-contiguous: torch.empty_strided with its strides given costs
    # 2.2 us per call against torch.empty's 3.4 (H200 machine, interleaved).
    strides = _strides(shape, 1)  # in elements
    empty, ready = torch.empty_strided, ready_contexts
    raw_stream: Any = _raw_stream  # both exist: cached_call checked
    get_device: Any = _get_device

    if not bound.checked:
        def call(data_ptr: int, iptr: int, indices: Any, *pointers: int) -> Any:
            if get_device() != device or device not in ready.devices:
                return None
            t = empty(shape, strides, dtype=tdtype, device=tdevice)
            sptr = raw_stream(device)
            with lock:
                pack(buf, 0, data_ptr, iptr, t.data_ptr(), 0, *pointers)
                launch(handle, g0, g1, g2, b0, b1, b2, shared, sptr, params, 0)
            return t
        return call

    flags, capturing, synchronize = backend.flags, backend.capturing, backend.synchronize

    def checked_call(data_ptr: int, iptr: int, indices: Any, *pointers: int) -> Any:
        if get_device() != device or device not in ready.devices:
            return None
        sptr = raw_stream(device)
        if capturing(sptr):
            raise RuntimeError(CAPTURE_ERROR)
        t = empty(shape, strides, dtype=tdtype, device=tdevice)
        flag = flags.take()
        try:
            with lock:
                pack(buf, 0, data_ptr, iptr, t.data_ptr(), flag, *pointers)
                launch(handle, g0, g1, g2, b0, b1, b2, shared, sptr, params, 0)
            synchronize(sptr)
        except BaseException:
            flags.give_back(flag)
            raise
        pos = flags.read_and_give(flag)
        if pos != NO_BAD:
            raise bad_index(bound, backend, indices, pos)
        return t
    return checked_call


def _launcher(bound: Any) -> Any:
    return getattr(bound.call, "tensor", None)


def _memo_key(data: Any, indices: Any) -> Tuple[Tuple[Any, ...], int]:
    """(what the front door's memo compares, data's address): every attribute of the
    two tensors a plan depends on or the views would change.  RuntimeError where a
    tensor has no strides (sparse and other layouts)."""
    ptr = data.data_ptr()
    return (data.shape, data.stride(), data.dtype, ptr & 255, data.get_device(),
            indices.shape, indices.stride(), indices.dtype, indices.get_device(),
            data.is_neg() or data.is_conj() or indices.is_neg()), ptr


def fast(runtime: Any, data: Any, indices: Any) -> Any:
    """The op's result as a torch tensor when this call repeats the geometry of the
    runtime's last remembered torch call (:func:`remember`), else None.

    One tuple comparison, then the pre-built launcher: no View, no call key.
    Results are handed back as tensors: None under ``set_output("cupy")``.
    """
    if frontends._output != "input":
        return None
    return fast_tensor(runtime, data, indices)


def fast_tensor(runtime: Any, data: Any, indices: Any) -> Any:
    """:func:`fast` whatever :func:`~cugather.set_output` says (cugather.torch)."""
    memo = runtime.native
    if memo[0] is None or type(indices) is not _Tensor:
        return None
    try:
        key, ptr = _memo_key(data, indices)
    except RuntimeError:  # the views report what is wrong
        return None
    if key != memo[0]:
        return None
    return memo[1](ptr, indices.data_ptr(), indices)


def remember(runtime: Any, data: Any, indices: Any, d: TorchView, i: TorchView,
             key: Tuple[Any, ...]) -> None:
    """After a call that ran ``key`` on views ``d`` and ``i`` of ``data`` and
    ``indices`` as given (nothing converted or resolved), memoise it for :func:`fast`."""
    if d.base is data and i.base is indices and type(indices) is _Tensor:
        native, _ = _memo_key(data, indices)  # the views were made: strided tensors
        if not native[-1]:
            runtime.remember_native(native, key, _launcher)


_Tensor = torch.Tensor


BACKEND = TorchBackend()


class TorchFrontend:
    """How the public ops take torch tensors and hand results back (see
    :mod:`cugather.frontends`)."""

    name = "torch"
    backend = BACKEND
    view = TorchView
    fast = staticmethod(fast)
    remember = staticmethod(remember)

    @staticmethod
    def prepare_data(obj: Any, argname: str = "data") -> TorchView:
        return view_of(obj, argname)

    @staticmethod
    def prepare_indices(obj: Any, device: int, allow_bool: bool = False,
                        argname: str = "indices") -> TorchView:
        """``obj`` as a C-contiguous int32/int64 CUDA tensor on ``device``.

        Such tensors pass through untouched; others are cast (small integer
        types to int32, uint32 and uint64 to int64, bool to int32 where
        ``allow_bool``), CPU tensors and host values copied to ``device``, GPU
        arrays of other libraries taken through DLPack.
        """
        if isinstance(obj, torch.Tensor):
            t = obj
            idt = _INDEX.get(t.dtype)
            if (idt is not None and t.get_device() == device and t.is_contiguous()
                    and not t.is_neg()):
                shape = tuple(t.shape)
                return TorchView(shape, _strides(shape, idt.itemsize), idt, t.data_ptr(), device,
                                 t)
        elif validate.is_gpu_array(obj):
            t = torch.from_dlpack(obj)
        else:
            host = numpy.asarray(obj)
            if host.dtype == object:
                raise TypeError(f"{argname} must be integers, got {type(obj).__name__} "
                                f"{obj!r:.80}")
            if host.size == 0 and not isinstance(obj, numpy.ndarray):
                host = host.astype(numpy.int64)  # [] is float64 to NumPy
            validate.index_dtype(host.dtype, allow_bool, argname)
            t = torch.as_tensor(numpy.ascontiguousarray(host))
        return _convert_indices(t, device, allow_bool, argname)

    @staticmethod
    def prepare_out(out: Any) -> Optional[TorchView]:
        if out is None:
            return None
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor when data is one, got "
                            f"{type(out).__name__}")
        return view_of(out, "out")

    @staticmethod
    def result(view: Any) -> Any:
        if frontends._output == "input":
            return view.base
        return to_cupy(view)

    @staticmethod
    def on_stream(stream: Any) -> Any:
        """A context making ``stream`` torch's current stream (index casts and copies)."""
        if stream is None:
            return contextlib.nullcontext()
        if not isinstance(stream, torch.cuda.Stream):
            stream = torch.cuda.ExternalStream(validate.stream_pointer(stream))
        return torch.cuda.stream(stream)


def _convert_indices(t: Any, device: int, allow_bool: bool, argname: str) -> TorchView:
    src = _TO_NUMPY.get(t.dtype)
    if src is None:
        raise TypeError(f"{argname} must be an integer array, got dtype {t.dtype}")
    target = validate.index_dtype(src, allow_bool, argname)
    here = t.get_device()
    if here != device:
        if here >= 0 and t.numel():
            raise ValueError(f"{argname} are on GPU {here} but data is on GPU {device}")
        t = t.to(_device(device))
    t = t.to(_TO_TORCH[target]).contiguous()
    if t.is_neg():
        t = t.resolve_neg()
    return TorchView(tuple(t.shape), _strides(tuple(t.shape), target.itemsize), target,
                     t.data_ptr(), device, t)


def to_cupy(view: Any) -> Any:
    """``view``'s tensor as a CuPy array sharing its memory (``set_output("cupy")``)."""
    if not dtypes.is_native(view.dtype):
        raise TypeError(f"CuPy cannot hold torch dtype {view.base.dtype}; set_output('input') "
                        f"returns it as a torch tensor")
    return validate.cupy_module().from_dlpack(view.base)


FRONTEND = TorchFrontend()
