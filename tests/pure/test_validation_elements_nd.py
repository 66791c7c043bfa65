"""Argument checks of gather_elements / take_along_axis / gather_nd that need
no GPU: they fail before any device work, naming the argument and value."""

import importlib.util

import numpy as np
import pytest

import cugather


@pytest.mark.parametrize("fn", [cugather.gather_elements, cugather.gather_nd])
@pytest.mark.parametrize("mode", ["bogus", "", None, "clip_numpy", "RAISE"])
def test_bad_mode(fn, mode):
    with pytest.raises(ValueError, match=r"mode must be one of \('raise', 'wrap', 'clip', 'fill'\)"):
        fn(np.zeros((3, 1)), np.zeros((3, 1), np.int64), mode=mode)


@pytest.mark.parametrize("batch_dims", [1.0, "1", None, True, [1]])
def test_batch_dims_must_be_an_integer(batch_dims):
    with pytest.raises(TypeError, match=f"batch_dims must be an integer, got "
                                        f"{type(batch_dims).__name__}"):
        cugather.gather_nd(np.zeros((3, 1)), np.zeros((3, 1), np.int64), batch_dims)


def test_host_data_is_rejected_with_advice():
    if importlib.util.find_spec("cupy") is None:  # nothing can run: say what to install
        with pytest.raises(ImportError, match=r"needs CuPy.*pip install 'cugather\[cuda12\]'"):
            cugather.gather_elements(np.zeros((3, 2)), [[0, 1]])
        return
    with pytest.raises(TypeError, match=r"data must be a cupy.ndarray .*numpy.ndarray"):
        cugather.gather_elements(np.zeros((3, 2)), [[0, 1]])
    with pytest.raises(TypeError, match=r"data must be a cupy.ndarray .*list"):
        cugather.gather_nd([[1, 2]], [[0]])
    with pytest.raises(TypeError, match=r"arr must be a cupy.ndarray"):
        cugather.take_along_axis(np.zeros((3, 2)), np.zeros((3, 1), np.int64), 1)


def test_public_api_has_numpy_style_docstrings():
    for fn in (cugather.gather_elements, cugather.take_along_axis, cugather.gather_nd):
        doc = fn.__doc__
        for section in ("Parameters\n    ----------", "Returns\n    -------",
                        "Raises\n    ------"):
            assert section in doc, (fn.__name__, section)
    assert "host synchronisation" in cugather.gather_nd.__doc__
