"""The NumPy references of tests/support/reference_elements_nd.py against the ONNX node test cases."""

import numpy as np
import pytest

from support.reference_elements_nd import ELEMENTS_CASES, ND_CASES, elements_ref, nd_ref, onnx_cases


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
