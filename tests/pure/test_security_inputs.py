"""Inputs a review found unchecked: jit.compile's dtype (the CLI's cases are in test_cli.py)."""

import numpy as np
import pytest

from cugather import jit
from cugather.inspect import api as _api
from support.jit import compiles


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


@pytest.mark.parametrize("dtype,what", [
    (object, "object"), ("U5", "str"), ("S3", "bytes"), ("datetime64[ns]", "datetime64"),
    ("timedelta64[s]", "timedelta64"), ([("a", "i4"), ("b", object)], "holds objects"),
])
def test_compile_refuses_dtypes_no_op_gathers(dtype, what):
    for unit in (None, 8):
        with pytest.raises(ValueError, match=rf"dtype must be one that an op gathers .*\({what}\)"):
            jit.compile("rows", dtype, "int64", unit=unit)
    assert compiles() == 0


def test_records_and_numbers_still_get_a_unit():
    assert _api._unit("V6", None) == 2 and _api._unit(np.float16, None) == 2
    assert _api._unit([("a", "u1"), ("b", "u1")], None) == 2
