"""Independent NumPy references for GatherElements / take_along_axis and
GatherND (no cugather code), and the ONNX node test cases they are checked
against (tests/pure/test_reference.py)."""

import functools

import numpy as np
import pytest

ELEMENTS_CASES = ("test_gather_elements_0", "test_gather_elements_1",
                  "test_gather_elements_negative_indices")
ND_CASES = ("test_gathernd_example_int32", "test_gathernd_example_float32",
            "test_gathernd_example_int32_batch_dim1")


def _normalise(idx, n, mode):
    """(indices mapped into [0, n), mask of the values that keep their element)."""
    idx = np.asarray(idx).astype(np.int64)
    in_range = (idx >= -n) & (idx < n)
    if mode == "raise":
        if not in_range.all():
            raise IndexError("out of range")
        return np.where(idx < 0, idx + n, idx), in_range
    if mode == "wrap":
        return (idx % n if n else idx), np.ones_like(in_range)
    if mode == "clip":
        return np.clip(np.where(in_range & (idx < 0), idx + n, idx), 0, max(n - 1, 0)), \
            np.ones_like(in_range)
    if mode == "fill":
        return np.where(in_range, np.where(idx < 0, idx + n, idx), 0), in_range
    raise ValueError(mode)


def elements_ref(data, indices, axis, mode="raise", fill_value=0, broadcast=False):
    """GatherElements (``broadcast=False``: indices address data's leading
    corner) or take_along_axis (``broadcast=True``) from numpy.take_along_axis."""
    data = np.asarray(data)
    indices = np.asarray(indices)
    axis = axis % data.ndim
    n = data.shape[axis]
    norm, keep = _normalise(indices, n, mode)
    if not broadcast:
        data = data[tuple(slice(None) if d == axis else slice(0, k)
                          for d, k in enumerate(indices.shape))]
    if n == 0:  # only reachable in fill mode: everything is filled
        shape = np.broadcast_shapes(data.shape[:axis] + (1,) + data.shape[axis + 1:],
                                    indices.shape[:axis] + (1,) + indices.shape[axis + 1:])
        return np.full(shape[:axis] + indices.shape[axis:axis + 1] + shape[axis + 1:],
                       fill_value, dtype=data.dtype)
    out = np.take_along_axis(data, norm, axis)
    if mode == "fill":
        out = np.where(np.broadcast_to(keep, out.shape), out,
                       np.asarray(fill_value).astype(data.dtype))
    return out


def nd_ref(data, indices, batch_dims=0, mode="raise", fill_value=0):
    """GatherND by NumPy fancy indexing, one batch at a time."""
    data = np.asarray(data)
    indices = np.asarray(indices)
    b, m = batch_dims, indices.shape[-1]
    bounds = data.shape[b:b + m]
    comps, keep = [], np.ones(indices.shape[:-1], dtype=bool)
    for k, n in enumerate(bounds):
        norm, ok = _normalise(indices[..., k], n, mode)
        comps.append(norm)
        keep &= ok
    out_shape = indices.shape[:-1] + data.shape[b + m:]
    n_batch = int(np.prod(data.shape[:b], dtype=np.int64))
    slice_shape = data.shape[b + m:]
    out = np.zeros((n_batch, int(np.prod(indices.shape[b:-1], dtype=np.int64))) + slice_shape,
                   dtype=data.dtype)
    if out.size and all(bounds):
        flat = data.reshape((n_batch,) + data.shape[b:])
        per = [c.reshape(n_batch, -1) for c in comps]
        for i in range(n_batch):
            out[i] = flat[i][tuple(c[i] for c in per)]
    out = out.reshape(out_shape)
    if mode == "fill":
        mask = keep.reshape(keep.shape + (1,) * len(slice_shape))
        out = np.where(mask, out, np.asarray(fill_value).astype(data.dtype))
    return out


@functools.lru_cache(maxsize=1)
def onnx_cases() -> dict:
    """name -> (attributes, inputs, expected output) of the gather family node tests."""
    onnx_node = pytest.importorskip("onnx.backend.test.case.node")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = onnx_node.collect_testcases()  # once per process
    found = {}
    for case in cases:
        if case.name in ELEMENTS_CASES + ND_CASES:
            node = case.model.graph.node[0]
            attrs = {a.name: a.i for a in node.attribute}
            (inputs, outputs), = case.data_sets
            found[case.name] = (attrs, [np.asarray(x) for x in inputs], np.asarray(outputs[0]))
    return found
