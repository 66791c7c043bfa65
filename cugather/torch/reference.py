"""The gather ops' semantics in torch's own operators: the CPU implementation and
the gradients.

Every function here works on any device and traces under ``torch.compile``
(the CPU forward and every backward); out-of-range modes behave as the
kernels do (``kernels/common.cuh``'s ``resolve``): ``wrap`` takes indices
modulo the size, ``clip`` counts negatives from the end then clamps,
``take``'s ``clip`` (``clip_numpy``) clamps negatives to 0, ``fill`` writes
the fill value for indices outside ``[-n, n)``, ``raise`` raises the same
IndexError as the CUDA path.  Gradients are built from torch's scatter-add
operators (``index_add_``, ``scatter_add_``, ``index_put_(accumulate=True)``),
which are deterministic when ``torch.use_deterministic_algorithms(True)``
asks for it.
"""

from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple

import torch

from ..plan.elements import elements_shape
from ..plan.nd import nd_shape
from ..validate import normalize_axis

__all__ = ["resolve", "gather", "elements", "nd", "gather_backward", "elements_backward",
           "nd_backward", "gather_shape"]


def resolve(indices: Any, n: int, mode: str) -> Tuple[Any, Any]:
    """(int64 indices in ``[0, n)``, mask of the valid ones or None) for ``mode``."""
    i = indices.to(torch.int64)
    if mode == "wrap":
        return (torch.remainder(i, n) if n else i), None
    if mode == "clip_numpy":
        return i.clamp(0, max(n - 1, 0)), None
    shifted = torch.where(i < 0, i + n, i)
    if mode == "clip":
        return shifted.clamp(0, max(n - 1, 0)), None
    keep = (shifted >= 0) & (shifted < n)
    return torch.where(keep, shifted, 0), keep


def _raise_first_bad(indices: Any, keep: Any, axes: Sequence[int], bounds: Sequence[int]) -> None:
    """The CUDA path's IndexError for the first index outside its range, if any."""
    bad = (~keep).reshape(-1).nonzero()
    if bad.numel() == 0:
        return
    pos = int(bad[0, 0])
    k = pos % len(bounds)
    value = int(indices.reshape(-1)[pos])
    where: List[int] = []
    rest = pos
    for dim in reversed(tuple(indices.shape)):
        where.append(rest % dim)
        rest //= dim
    n = bounds[k]
    raise IndexError(f"index {value} is out of bounds for axis {axes[k]} with size {n} "
                     f"(at indices{where[::-1]}; valid range [{-n}, {n - 1}])")


def _fill(out: Any, keep: Any, fill_value: Any) -> Any:
    return torch.where(keep, out, torch.full((), fill_value, dtype=out.dtype, device=out.device))


def _empty_axis(out_shape: Tuple[int, ...], like: Any, mode: str, fill_value: Any,
                count: int) -> Any:
    """The result when an addressed axis is empty: fill everywhere, else IndexError."""
    if mode != "fill" and count:
        raise IndexError("cannot gather from an empty axis (every index is out of bounds)")
    return torch.full(out_shape, fill_value, dtype=like.dtype, device=like.device)


def gather_shape(data_shape: Sequence[int], indices_shape: Sequence[int],
                 axis: int) -> Tuple[int, ...]:
    """ONNX Gather's output shape (``axis`` normalised)."""
    d = tuple(data_shape)
    return d[:axis] + tuple(indices_shape) + d[axis + 1:]


def gather(data: Any, indices: Any, axis: int, mode: str, fill_value: Any = 0) -> Any:
    """ONNX Gather along ``axis`` (kernel ``mode``: take's clip is ``clip_numpy``)."""
    if data.dim() == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    axis = normalize_axis(axis, data.dim())
    n = data.shape[axis]
    if n == 0:
        return _empty_axis(gather_shape(data.shape, indices.shape, axis), data, mode, fill_value,
                           indices.numel())
    safe, keep = resolve(indices, n, mode)
    if mode == "raise":
        _raise_first_bad(indices, keep, (axis,), (n,))
    out = data[(slice(None),) * axis + (safe,)]
    if mode == "fill":
        out = _fill(out, keep.reshape((1,) * axis + keep.shape + (1,) * (data.dim() - axis - 1)),
                    fill_value)
    return out.contiguous()


def _coordinates(shape: Tuple[int, ...], axis: int, safe: Any) -> Tuple[Any, ...]:
    """Advanced-indexing tuple picking ``safe`` along ``axis`` at every position of ``shape``."""
    coords = []
    for d, k in enumerate(shape):
        if d == axis:
            coords.append(safe)
        else:
            view = [1] * len(shape)
            view[d] = k
            coords.append(torch.arange(k, device=safe.device).view(view))
    return tuple(coords)


def elements(data: Any, indices: Any, axis: int, mode: str, fill_value: Any = 0) -> Any:
    """ONNX GatherElements (``torch.gather`` with cugather's modes)."""
    if data.dim() == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    axis = normalize_axis(axis, data.dim())
    out_shape = elements_shape(data.shape, indices.shape, axis)
    n = data.shape[axis]
    if n == 0 or indices.numel() == 0:
        return _empty_axis(out_shape, data, mode, fill_value, indices.numel())
    safe, keep = resolve(indices, n, mode)
    if mode == "raise":
        _raise_first_bad(indices, keep, (axis,), (n,))
    out = data[_coordinates(tuple(indices.shape), axis, safe)]
    if mode == "fill":
        out = _fill(out, keep, fill_value)
    return out.contiguous()


def _nd_components(data: Any, indices: Any, b: int, mode: str) -> Tuple[List[Any], Any]:
    m = indices.shape[-1]
    bounds = tuple(data.shape[b:b + m])
    comps: List[Any] = []
    keeps: List[Any] = []
    for k, n in enumerate(bounds):
        safe, keep = resolve(indices[..., k], n, mode)
        comps.append(safe)
        keeps.append(keep)
    if keeps[0] is None:
        return comps, None
    if mode == "raise":
        _raise_first_bad(indices, torch.stack(keeps, dim=-1), tuple(range(b, b + m)), bounds)
    keep = keeps[0]
    for k in keeps[1:]:
        keep = keep & k
    return comps, keep


def nd(data: Any, indices: Any, batch_dims: int, mode: str, fill_value: Any = 0) -> Any:
    """ONNX GatherND with ``batch_dims``."""
    b = batch_dims
    out_shape = nd_shape(data.shape, indices.shape, b)
    m = indices.shape[-1]
    slice_shape = tuple(data.shape[b + m:])
    if 0 in tuple(data.shape[b:b + m]):
        return _empty_axis(out_shape, data, mode, fill_value, indices.numel())
    if math.prod(out_shape) == 0:
        return data.new_empty(out_shape)
    comps, keep = _nd_components(data, indices, b, mode)
    n_batch = math.prod(data.shape[:b])
    per_batch = math.prod(indices.shape[b:-1])
    flat = data.reshape((n_batch,) + tuple(data.shape[b:]))
    batch = torch.arange(n_batch, device=indices.device).view(n_batch, 1)
    out = flat[(batch,) + tuple(c.reshape(n_batch, per_batch) for c in comps)]
    out = out.reshape(out_shape)
    if mode == "fill":
        out = _fill(out, keep.reshape(keep.shape + (1,) * len(slice_shape)), fill_value)
    return out.contiguous()


# ---------------------------------------------------------------- gradients
def _masked(grad: Any, keep: Any, shape: Tuple[int, ...]) -> Any:
    return grad if keep is None else torch.where(keep.reshape(shape), grad, 0)


def gather_backward(grad: Any, indices: Any, data_shape: Sequence[int], axis: int,
                    mode: str) -> Any:
    """The gradient of :func:`gather` with respect to data (``index_add_``)."""
    data_shape = tuple(data_shape)
    axis = normalize_axis(axis, len(data_shape))
    out = grad.new_zeros(data_shape)
    n = data_shape[axis]
    if n == 0 or indices.numel() == 0:
        return out
    safe, keep = resolve(indices, n, "wrap" if mode == "raise" else mode)
    rest = len(data_shape) - axis - 1
    g = _masked(grad, keep, (1,) * axis + tuple(keep.shape if keep is not None else ()) +
                (1,) * rest)
    flat = safe.reshape(-1)
    g = g.reshape(data_shape[:axis] + (flat.numel(),) + data_shape[axis + 1:])
    return out.index_add_(axis, flat, g)


def elements_backward(grad: Any, indices: Any, data_shape: Sequence[int], axis: int,
                      mode: str) -> Any:
    """The gradient of :func:`elements` with respect to data (``scatter_add_``)."""
    data_shape = tuple(data_shape)
    axis = normalize_axis(axis, len(data_shape))
    out = grad.new_zeros(data_shape)
    n = data_shape[axis]
    if n == 0 or indices.numel() == 0:
        return out
    safe, keep = resolve(indices, n, "wrap" if mode == "raise" else mode)
    return out.scatter_add_(axis, safe, _masked(grad, keep, tuple(indices.shape)))


def nd_backward(grad: Any, indices: Any, data_shape: Sequence[int], batch_dims: int,
                mode: str) -> Any:
    """The gradient of :func:`nd` with respect to data (``index_put_(accumulate=True)``)."""
    data_shape = tuple(data_shape)
    b = batch_dims
    out = grad.new_zeros(data_shape)
    m = indices.shape[-1]
    if 0 in data_shape[b:b + m] or grad.numel() == 0:
        return out
    comps, keep = _nd_components(out, indices, b, "wrap" if mode == "raise" else mode)
    slice_shape = data_shape[b + m:]
    n_batch = math.prod(data_shape[:b])
    per_batch = math.prod(indices.shape[b:-1])
    g = _masked(grad, keep, tuple(indices.shape[:-1]) + (1,) * len(slice_shape))
    flat = out.view((n_batch,) + data_shape[b:])
    batch = torch.arange(n_batch, device=indices.device).view(n_batch, 1)
    flat.index_put_((batch,) + tuple(c.reshape(n_batch, per_batch) for c in comps),
                    g.reshape((n_batch, per_batch) + slice_shape), accumulate=True)
    return out
