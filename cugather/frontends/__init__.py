"""Front doors: torch tensors and JAX arrays in, results in the caller's type.

The op runtime runs on any *backend* (``cugather.runtime.launch.CudaBackend``
for CuPy arrays); a front door adapts another library's arrays to it with no
DLPack round trip and no CuPy array per call (torch), or through DLPack's
stream rules (JAX).  Nothing here imports torch or JAX: :func:`native`
recognises their arrays by type, and the adapter module of a library is
imported on the first array of that library.

How a public op calls it
------------------------
``data`` decides (array-api-compat's rule)::

    fe = frontends.native(data)          # None: CuPy or anything else -> today's path
    if fe is not None:
        with fe.on_stream(stream):       # only when stream is not None
            d = fe.prepare_data(data, argname)           # a View; TypeError/ValueError
            if d.ndim == 0 and take-like: d = d.reshape((1,))   # take(axis=None): d.reshape((-1,))
            i = fe.prepare_indices(indices, d.device, allow_bool, argname="indices")
            o = fe.prepare_out(out)      # None, or a View of the caller's out=
            res = ops.gather.run(op, d, i, o, stream, d.device, fe.backend)
            # ops.elements.run(kind, d, i, axis, o, mode, fill, stream, d.device, fe.backend)
            # ops.nd.run(d, i, batch_dims, o, mode, fill, stream, d.device, fe.backend)
            return fe.result(res)        # inside: JAX's hand-over waits on `stream`

Signatures (every frontend, :class:`Frontend`)::

    native(obj) -> Frontend | None
    fe.prepare_data(obj, argname="data") -> View
    fe.prepare_indices(obj, device: int, allow_bool: bool = False,
                       argname="indices") -> View      # C-contiguous int32/int64
    fe.prepare_out(out) -> View | None
    fe.result(view) -> the caller's array type (or CuPy, see set_output)
    fe.on_stream(stream) -> context manager: the frontend's own conversions
                            (index casts, host copies) run on ``stream``
    fe.fast(runtime, data, indices) -> result | None    # or fast = None
    fe.remember(runtime, data, indices, d, i, key)     # or remember = None

``fast`` and ``remember`` are a front door's own memo for GatherOp: after a
call with no ``out=`` and no ``stream=``, ``remember`` stores the tensors'
attributes beside the plan's pre-built launcher (``OpRuntime.native``), and
``fast`` compares them on the next call and launches, with no View and no
call key (torch; JAX has none).
    fe.backend -> the runtime backend (array_type is the View class; pointer,
                  device_of, stream_pointer, empty, index_value,
                  contiguous_copy, fill_bytes(fill_value, dtype), first_bad...)

``stream=None`` means the library's own current stream: torch's current
stream of the data's device; for JAX, CuPy's current stream, with the inputs
taken and the result handed over through DLPack (each side passes its stream
and the producer orders the hand-over).  A View carries ``shape``,
``strides`` (bytes), ``dtype`` (a NumPy dtype, distinct per source dtype:
ml_dtypes' for bfloat16 and float8, see :mod:`.dtypes`), ``ptr``,
``device``, ``ndim``, ``size``, ``itemsize``, ``flags.c_contiguous`` and
``base`` (the caller's tensor or array that owns the memory).

The output switch
-----------------
:func:`set_output` (``"input"``, the default: results in the caller's type;
``"cupy"``: CuPy arrays always, zero-copy through DLPack) and the context
manager :func:`using_output`.  pylibraft's ``set_output_as`` is the model.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

__all__ = ["OUTPUTS", "set_output", "get_output", "using_output", "native"]

#: What :func:`set_output` accepts.
OUTPUTS = ("input", "cupy")

_output = "input"


def set_output(kind: str) -> None:
    """Choose the array type every public op returns, process-wide.

    Parameters
    ----------
    kind : {"input", "cupy"}
        ``"input"`` (default): the type of the call's ``data`` (a torch tensor
        for a torch tensor, a JAX array for a JAX array, CuPy for CuPy).
        ``"cupy"``: a ``cupy.ndarray`` always, sharing the result's memory
        (a dtype CuPy cannot hold, such as float8, is then a TypeError).
    """
    global _output
    if not isinstance(kind, str) or kind not in OUTPUTS:
        raise ValueError(f"set_output takes one of {OUTPUTS}, got {kind!r}")
    _output = kind


def get_output() -> str:
    """The current :func:`set_output` choice."""
    return _output


@contextlib.contextmanager
def using_output(kind: str) -> Iterator[None]:
    """:func:`set_output` for a ``with`` block, restored afterwards (process-wide,
    like cuML's ``using_output_type``: not a per-thread setting)."""
    previous = _output
    set_output(kind)
    try:
        yield
    finally:
        set_output(previous)


_known: Dict[type, Any] = {}  # type -> frontend or None, decided once per type


def native(obj: object) -> Optional[Any]:
    """The front door for ``obj``'s array library, or None (CuPy, NumPy, others).

    Decided by type, once per type, without importing torch or JAX: a torch
    tensor can only exist once torch is imported, likewise a JAX array.
    """
    t = type(obj)
    try:
        return _known[t]
    except KeyError:
        return _classify(t)


def _classify(t: type) -> Optional[Any]:
    import sys

    fe: Optional[Any] = None
    roots = {c.__module__.partition(".")[0] for c in t.__mro__}
    if "torch" in roots and "torch" in sys.modules and issubclass(t, sys.modules["torch"].Tensor):
        from . import torch as torch_frontend

        fe = torch_frontend.FRONTEND
    elif roots & {"jax", "jaxlib"} and "jax" in sys.modules and issubclass(
            t, (sys.modules["jax"].Array,) + _tracer(sys.modules["jax"])):
        from . import jax as jax_frontend

        fe = jax_frontend.FRONTEND
    _known[t] = fe
    return fe


def _tracer(jax: Any) -> Tuple[type, ...]:
    """``(jax.core.Tracer,)`` where JAX has it: traced values are refused with a reason."""
    tracer = getattr(getattr(jax, "core", None), "Tracer", None)
    return (tracer,) if isinstance(tracer, type) else ()
