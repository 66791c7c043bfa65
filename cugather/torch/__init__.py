"""cugather for torch: registered operators and direct eager entries.

``import cugather.torch`` registers, with ``torch.library`` (``define`` /
``impl``, the cheapest registration per call)::

    torch.ops.cugather.gather(data, indices, axis=0, mode="raise", fill_value=0)
    torch.ops.cugather.take(a, indices, axis=None, mode="raise")
    torch.ops.cugather.gather_elements(data, indices, axis=0, mode="raise", fill_value=0)
    torch.ops.cugather.gather_nd(data, indices, batch_dims=0, mode="raise", fill_value=0)

* CUDA: cugather's kernels, launched on torch's current stream with the
  output from torch's allocator, so ``torch.cuda.graph`` captures them in
  ``wrap``, ``clip`` and ``fill`` mode (``raise`` reads a flag back to the
  host, which capture forbids).  Any dtype of 1 to 16 bytes, float8 and
  bfloat16 included: a gather moves bytes.
* CPU: the same semantics built from torch's own operators
  (:mod:`cugather.torch.reference`), so the operators run, trace and pass
  ``torch.library.opcheck`` on a CPU-only torch too.
* A fake implementation (shapes and dtypes), so ``torch.compile(fullgraph=True)``
  traces a module calling them with no graph break.
* Autograd with respect to ``data``: torch's ``index_add_`` /
  ``scatter_add_`` / ``index_put_(accumulate=True)``, deterministic under
  ``torch.use_deterministic_algorithms(True)``.

The functions of this module (:func:`gather`, :func:`take`,
:func:`gather_elements`, :func:`gather_nd`) are the lowest-cost eager entry
on CUDA tensors: straight to the op runtime, no dispatcher.  They take the
registered operator instead when autograd needs it (``data.requires_grad``),
under ``torch.compile``, and for CPU tensors; ``out=`` and ``stream=`` are
eager-only.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch.library import Library

from .. import validate
from ..frontends import torch as _fe
from ..ops import elements as _elements
from ..ops import gather as _gather
from ..ops import nd as _nd
from ..plan.elements import elements_shape
from ..plan.nd import nd_shape
from . import reference

__all__ = ["gather", "take", "gather_elements", "gather_nd", "LIBRARY"]

# ---------------------------------------------------------------- eager, on CUDA
_view, _prepare_indices, _prepare_out, _BACKEND = (
    _fe.view_of, _fe.FRONTEND.prepare_indices, _fe.FRONTEND.prepare_out, _fe.BACKEND)


_shared_ops, _fast = _gather._ops, _fe.fast_tensor


def _op(take: bool, axis: int, mode: str, fill_value: Any) -> Any:
    """The op cugather.gather / take share for these settings (ops.gather's registry)."""
    cls = _gather._TakeOp if take else _gather.GatherOp
    if take:
        fill_value = 0
    if type(axis) is int and type(mode) is str and type(fill_value) is int:
        op = _shared_ops.get((cls, int, axis, mode, fill_value))  # as gather() looks it up
        if op is not None:
            return op
    return _gather._shared_op(cls, axis, mode, fill_value)


def _gather_cuda(data: Any, indices: Any, axis: int, mode: str, fill_value: Any,
                 out: Any = None, stream: Any = None, take: bool = False) -> Any:
    op = _op(take, axis, mode, fill_value)
    if out is None and stream is None:
        result = _fast(op._runtime, data, indices)  # the front door's memo
        if result is not None:
            return result
    if stream is not None:
        with _fe.FRONTEND.on_stream(stream):
            return _gather_cuda(data, indices, axis, mode, fill_value, out, None, take)
    d: Any = _view(data)
    if d.ndim == 0 and take:
        d = d.reshape((1,))
    i = _prepare_indices(indices, d.device, take)
    if out is None:
        result = _gather.run(op, d, i, None, stream, d.device, _BACKEND).base
        if stream is None:
            _gather.remember_native(op, _fe.FRONTEND, data, indices, d, i)
        return result
    return _gather.run(op, d, i, _prepare_out(out), stream, d.device, _BACKEND).base


def _take_cuda(a: Any, indices: Any, axis: Optional[int], mode: str, out: Any = None,
               stream: Any = None) -> Any:
    if axis is None:
        a, axis = a.reshape(-1), 0
    return _gather_cuda(a, indices, axis, mode, 0, out, stream, take=True)


def _elements_cuda(data: Any, indices: Any, axis: int, mode: str, fill_value: Any,
                   out: Any = None, stream: Any = None) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    if stream is not None:
        with _fe.FRONTEND.on_stream(stream):
            return _elements_cuda(data, indices, axis, mode, fill_value, out)
    d = _view(data)
    if d.ndim == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    i = _prepare_indices(indices, d.device)
    return _elements.run("elements", d, i, axis, None if out is None else _prepare_out(out), mode,
                         fill_value, stream, d.device, _BACKEND).base


def _nd_cuda(data: Any, indices: Any, batch_dims: int, mode: str, fill_value: Any,
             out: Any = None, stream: Any = None) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    if stream is not None:
        with _fe.FRONTEND.on_stream(stream):
            return _nd_cuda(data, indices, batch_dims, mode, fill_value, out)
    d = _view(data)
    i = _prepare_indices(indices, d.device)
    return _nd.run(d, i, int(batch_dims), None if out is None else _prepare_out(out), mode,
                   fill_value, stream, d.device, _BACKEND).base


_compiling = torch.compiler.is_compiling


def _through_op(data: Any, out: Any, stream: Any) -> bool:
    """Whether a call must go through the registered operator (autograd, compile, CPU)."""
    if not (data.requires_grad or not data.is_cuda or _compiling()):
        return False
    if out is not None or stream is not None:
        raise ValueError("out= and stream= are for eager calls on CUDA tensors that need no "
                         "gradient; torch.ops.cugather.* run on torch's current stream")
    return True


def _tensor(indices: Any, data: Any) -> Any:
    return indices if isinstance(indices, torch.Tensor) else torch.as_tensor(
        indices, device=data.device)


def gather(data: Any, indices: Any, axis: int = 0, *, mode: str = "raise",
           fill_value: Any = 0, out: Any = None, stream: Any = None) -> Any:
    """ONNX Gather on torch tensors (``cugather.gather``'s semantics and modes).

    Returns a torch tensor of ``data``'s dtype on its device, computed on
    torch's current stream (or ``stream``).  ``"raise"`` mode costs one host
    synchronisation; ``"wrap"``, ``"clip"`` and ``"fill"`` never synchronise.
    """
    if _through_op(data, out, stream):
        return torch.ops.cugather.gather(data, _tensor(indices, data), axis, mode, fill_value)
    return _gather_cuda(data, indices, axis, mode, fill_value, out, stream)


def take(a: Any, indices: Any, axis: Optional[int] = None, *, mode: str = "raise",
         out: Any = None, stream: Any = None) -> Any:
    """``numpy.take`` on torch tensors (``cugather.take``'s semantics)."""
    if _through_op(a, out, stream):
        return torch.ops.cugather.take(a, _tensor(indices, a), axis, mode)
    validate.check_mode(mode, validate.TAKE_MODES)
    return _take_cuda(a, indices, axis, mode, out, stream)


def gather_elements(data: Any, indices: Any, axis: int = 0, *, mode: str = "raise",
                    fill_value: Any = 0, out: Any = None, stream: Any = None) -> Any:
    """ONNX GatherElements (``torch.gather`` with cugather's modes) on torch tensors."""
    if _through_op(data, out, stream):
        return torch.ops.cugather.gather_elements(data, _tensor(indices, data), axis, mode,
                                                  fill_value)
    return _elements_cuda(data, indices, axis, mode, fill_value, out, stream)


def gather_nd(data: Any, indices: Any, batch_dims: int = 0, *, mode: str = "raise",
              fill_value: Any = 0, out: Any = None, stream: Any = None) -> Any:
    """ONNX GatherND on torch tensors (``cugather.gather_nd``'s semantics)."""
    if _through_op(data, out, stream):
        return torch.ops.cugather.gather_nd(data, _tensor(indices, data), batch_dims, mode,
                                            fill_value)
    return _nd_cuda(data, indices, batch_dims, mode, fill_value, out, stream)


# ---------------------------------------------------------------- the operators
LIBRARY = Library("cugather", "DEF")
LIBRARY.define('gather(Tensor data, Tensor indices, int axis=0, str mode="raise", '
               'Scalar fill_value=0) -> Tensor')
LIBRARY.define('take(Tensor a, Tensor indices, int? axis=None, str mode="raise") -> Tensor')
LIBRARY.define('gather_elements(Tensor data, Tensor indices, int axis=0, str mode="raise", '
               'Scalar fill_value=0) -> Tensor')
LIBRARY.define('gather_nd(Tensor data, Tensor indices, int batch_dims=0, str mode="raise", '
               'Scalar fill_value=0) -> Tensor')


def _take_mode(mode: str) -> str:
    return "clip_numpy" if mode == "clip" else mode


def _take_cpu(a: Any, indices: Any, axis: Optional[int] = None, mode: str = "raise") -> Any:
    validate.check_mode(mode, validate.TAKE_MODES)
    if axis is None:
        a, axis = a.reshape(-1), 0
    elif a.dim() == 0:
        a = a.reshape(1)
    return reference.gather(a, indices, axis, _take_mode(mode))


# Registered kernels get the arguments as the caller passed them: defaults repeated.
def _gather_cuda_op(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                    fill_value: Any = 0) -> Any:
    return _gather_cuda(data, indices, axis, mode, fill_value)


def _take_cuda_op(a: Any, indices: Any, axis: Optional[int] = None, mode: str = "raise") -> Any:
    validate.check_mode(mode, validate.TAKE_MODES)
    return _take_cuda(a, indices, axis, mode)


def _elements_cuda_op(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                      fill_value: Any = 0) -> Any:
    return _elements_cuda(data, indices, axis, mode, fill_value)


def _nd_cuda_op(data: Any, indices: Any, batch_dims: int = 0, mode: str = "raise",
                fill_value: Any = 0) -> Any:
    return _nd_cuda(data, indices, batch_dims, mode, fill_value)


def _gather_cpu(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    return reference.gather(data, indices, axis, mode, fill_value)


def _elements_cpu(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                  fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    return reference.elements(data, indices, axis, mode, fill_value)


def _nd_cpu(data: Any, indices: Any, batch_dims: int = 0, mode: str = "raise",
            fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    return reference.nd(data, indices, batch_dims, mode, fill_value)


for _name, _cuda, _cpu in (("gather", _gather_cuda_op, _gather_cpu),
                           ("take", _take_cuda_op, _take_cpu),
                           ("gather_elements", _elements_cuda_op, _elements_cpu),
                           ("gather_nd", _nd_cuda_op, _nd_cpu)):
    LIBRARY.impl(_name, _cuda, "CUDA")
    LIBRARY.impl(_name, _cpu, "CPU")


# ---------------------------------------------------------------- fake (shapes)
def _integer_indices(indices: Any, allow_bool: bool = False) -> None:
    validate.index_dtype(_fe.numpy_dtype(indices.dtype), allow_bool)


def _gather_fake(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                 fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    _integer_indices(indices)
    if data.dim() == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    axis = validate.normalize_axis(axis, data.dim())
    return data.new_empty(reference.gather_shape(data.shape, indices.shape, axis))


def _take_fake(a: Any, indices: Any, axis: Optional[int] = None, mode: str = "raise") -> Any:
    validate.check_mode(mode, validate.TAKE_MODES)
    _integer_indices(indices, allow_bool=True)
    if axis is None:
        return a.new_empty(tuple(indices.shape))
    shape = tuple(a.shape) or (1,)
    axis = validate.normalize_axis(axis, len(shape))
    return a.new_empty(reference.gather_shape(shape, indices.shape, axis))


def _elements_fake(data: Any, indices: Any, axis: int = 0, mode: str = "raise",
                   fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    _integer_indices(indices)
    if data.dim() == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    axis = validate.normalize_axis(axis, data.dim())
    return data.new_empty(elements_shape(data.shape, indices.shape, axis))


def _nd_fake(data: Any, indices: Any, batch_dims: int = 0, mode: str = "raise",
             fill_value: Any = 0) -> Any:
    validate.check_mode(mode, validate.GATHER_MODES)
    _integer_indices(indices)
    return data.new_empty(nd_shape(data.shape, indices.shape, batch_dims))


for _name, _fake in (("gather", _gather_fake), ("take", _take_fake),
                     ("gather_elements", _elements_fake), ("gather_nd", _nd_fake)):
    torch.library.register_fake(f"cugather::{_name}", _fake, lib=LIBRARY)


# ---------------------------------------------------------------- autograd
# One kernel per operator at the Autograd key (what torch.library.register_autograd
# registers, plus a shortcut): a call that needs a gradient goes through an
# autograd.Function; a call on plain CUDA tensors that needs none, with no
# dispatch mode active, launches straight away instead of redispatching below
# autograd through Python a second time (on an H200 the dispatcher's share of
# a tiny call fell from 11.5 to 5.3 us); anything else (fake and functional tensors under torch.compile, CPU
# tensors, dispatch modes) redispatches, as register_autograd's kernel does.
_below_autograd = torch._C._AutoDispatchBelowAutograd
_after_autograd = torch._C._after_autograd_keyset
_grad_enabled = torch.is_grad_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _gather_grad(inputs: Tuple[Any, ...], grad: Any) -> Any:
    data, indices, axis, mode = inputs[:4]
    return reference.gather_backward(grad, indices, tuple(data.shape), axis, mode)


def _take_grad(inputs: Tuple[Any, ...], grad: Any) -> Any:
    a, indices, axis, mode = inputs
    shape, mode = tuple(a.shape), _take_mode(mode)
    if axis is None:
        return reference.gather_backward(grad, indices, (math.prod(shape),), 0,
                                         mode).reshape(shape)
    if not shape:
        return reference.gather_backward(grad, indices, (1,), axis, mode).reshape(())
    return reference.gather_backward(grad, indices, shape, axis, mode)


def _elements_grad(inputs: Tuple[Any, ...], grad: Any) -> Any:
    data, indices, axis, mode = inputs[:4]
    return reference.elements_backward(grad, indices, tuple(data.shape), axis, mode)


def _nd_grad(inputs: Tuple[Any, ...], grad: Any) -> Any:
    data, indices, batch_dims, mode = inputs[:4]
    return reference.nd_backward(grad, indices, tuple(data.shape), batch_dims, mode)


def _autograd_kernel(name: str, direct: Any, grad_of: Any, defaults: Tuple[Any, ...]) -> Any:
    op = getattr(torch.ops.cugather, name).default

    def redispatch(keyset: Any, args: Tuple[Any, ...]) -> Any:
        with _below_autograd():
            return op.redispatch(keyset & _after_autograd, *args)

    class Backward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, keyset: Any, *args: Any) -> Any:
            out = redispatch(keyset, args)
            # The dispatcher drops trailing arguments equal to their defaults.
            inputs = args + defaults[len(args):]
            ctx.save_for_backward(inputs[1])
            ctx.shape, ctx.rest, ctx.n_args = tuple(inputs[0].shape), inputs[2:], len(args)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            indices, = ctx.saved_tensors
            inputs = (_Shape(ctx.shape), indices) + ctx.rest
            # keyset, data, then the indices and the other arguments as given
            return (None, grad_of(inputs, grad)) + (None,) * (ctx.n_args - 1)

    Backward.__name__ = Backward.__qualname__ = f"CugatherBackwardFor_{name}"

    def kernel(keyset: Any, *args: Any) -> Any:
        data = args[0]
        if _grad_enabled() and data.requires_grad:
            return Backward.apply(keyset, *args)
        if (type(data) in _PLAIN and type(args[1]) is torch.Tensor and data.is_cuda
                and not _dispatch_modes()):
            return direct(*args)
        return redispatch(keyset, args)

    return kernel


class _Shape:
    """What a backward formula reads of ``data``: its shape."""

    __slots__ = ("shape",)

    def __init__(self, shape: Tuple[int, ...]) -> None:
        self.shape = shape


for _name, _direct, _grad, _defaults in (
        ("gather", _gather_cuda_op, _gather_grad, (None, None, 0, "raise", 0)),
        ("take", _take_cuda_op, _take_grad, (None, None, None, "raise")),
        ("gather_elements", _elements_cuda_op, _elements_grad, (None, None, 0, "raise", 0)),
        ("gather_nd", _nd_cuda_op, _nd_grad, (None, None, 0, "raise", 0))):
    LIBRARY.impl(_name, _autograd_kernel(_name, _direct, _grad, _defaults), "Autograd",
                 with_keyset=True)
