"""NumPy references for GatherElements / take_along_axis and GatherND (no
cugather code), and the references themselves checked against the ONNX node
test cases.  Other test modules import the references from here."""

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


@pytest.mark.parametrize("name", ELEMENTS_CASES + ND_CASES)
def test_references_match_onnx(name):
    attrs, (data, indices), expected = onnx_cases()[name]
    if name in ELEMENTS_CASES:
        got = elements_ref(data, indices, attrs.get("axis", 0))
    else:
        got = nd_ref(data, indices, attrs.get("batch_dims", 0))
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_elements_ref_modes_by_hand():
    data = np.array([[10, 11, 12], [20, 21, 22]])
    idx = np.array([[-1, 3, -4]])
    assert elements_ref(data, idx, 1, "wrap").tolist() == [[12, 10, 12]]
    assert elements_ref(data, idx, 1, "clip").tolist() == [[12, 12, 10]]
    assert elements_ref(data, idx, 1, "fill", fill_value=-7).tolist() == [[12, -7, -7]]
    with pytest.raises(IndexError):
        elements_ref(data, idx, 1, "raise")
    # broadcasting as numpy.take_along_axis
    assert elements_ref(data, np.array([[2], [0]]), 1, broadcast=True).tolist() == [[12], [20]]


def test_nd_ref_by_hand():
    data = np.arange(24).reshape(2, 3, 4)
    idx = np.array([[[1, -1]], [[0, 5]]])
    assert nd_ref(data, idx, 0, "clip").tolist() == [[data[1, 2].tolist()], [data[0, 2].tolist()]]
    got = nd_ref(data, np.array([[2], [-4]]), 1, "fill", fill_value=-1)
    assert got.tolist() == [data[0, 2].tolist(), [-1] * 4]
