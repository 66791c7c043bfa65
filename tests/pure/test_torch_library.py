"""torch.ops.cugather on a CPU-only torch: registration, fake shapes, CPU semantics,
torch.compile(fullgraph=True), opcheck, gradients.

The CPU implementation is built from torch's own operators; every result is
compared with NumPy (tests/support/reference.py, tests/support/fuzzcases.py) and gradients
with finite differences (gradcheck) and with torch.index_select's /
torch.gather's own backward.  Skips where torch is not installed (CI installs
a pinned CPU build in one job).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0 "
                                            "gives a CPU build; CI's torch job does)")

import cugather.torch as ct  # noqa: E402  (registers torch.ops.cugather)
from support import fuzzcases  # noqa: E402
from support.reference import gather_ref  # noqa: E402

OPS = ("gather", "take", "gather_elements", "gather_nd")
MODES = ("raise", "wrap", "clip", "fill")


def _rng():
    return np.random.default_rng(20)


def _inputs(rng, name, out_of_range, dtype=np.float64):
    """(data, indices) of op ``name``: data (5, 7, 3), gathered on axis 1."""
    data = rng.standard_normal((5, 7, 3)).astype(dtype)
    span = 3 if out_of_range else 1
    if name in ("gather", "take"):
        idx = rng.integers(-7 * span, 7 * span, size=(4, 2))
    elif name == "gather_elements":
        idx = rng.integers(-7 * span, 7 * span, size=(4, 9, 2))
    else:
        idx = np.stack([rng.integers(-5 * span, 5 * span, size=(6,)),
                        rng.integers(-7 * span, 7 * span, size=(6,))], axis=-1)
    return data, idx


def _call(name, data, idx, mode, fill=-7.0):
    ops = torch.ops.cugather
    if name == "gather":
        return ops.gather(data, idx, 1, mode, fill)
    if name == "take":
        return ops.take(data, idx, 1, mode)
    if name == "gather_elements":
        return ops.gather_elements(data, idx, 1, mode, fill)
    return ops.gather_nd(data, idx, 0, mode, fill)


def _reference(name, data, idx, mode, fill=-7.0):
    if name == "gather":
        return gather_ref(data, idx, 1, mode, fill)
    if name == "take":
        return np.take(data, np.mod(idx, 7) if mode == "wrap" else idx, axis=1, mode=mode)
    if name == "gather_elements":
        return fuzzcases.elements_ref(data, idx, 1, mode, fill)
    return fuzzcases.nd_ref(data, idx, 0, mode, fill)


def _modes(name):
    return ("raise", "wrap", "clip") if name == "take" else MODES


# ---------------------------------------------------------------- registration
def test_every_op_is_registered_for_cuda_and_cpu_with_a_schema():
    for name in OPS:
        qualified = f"cugather::{name}"
        for key in ("CUDA", "CPU"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key), (name, key)
        schema = str(getattr(torch.ops.cugather, name).default._schema)
        assert schema.startswith(qualified + "(Tensor ") and schema.endswith("-> Tensor"), schema
    assert "Scalar fill_value=0" in str(torch.ops.cugather.gather.default._schema)


@pytest.mark.parametrize("dtype", ["float32", "float8_e4m3fn", "bfloat16", "int16"])
def test_fake_shapes_and_dtypes(dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode

    td = getattr(torch, dtype)
    with FakeTensorMode():
        data = torch.empty(5, 7, 3, dtype=td)
        ops = torch.ops.cugather
        assert ops.gather(data, torch.empty(4, 2, dtype=torch.int64), 1).shape == (5, 4, 2, 3)
        assert ops.gather(data, torch.empty((), dtype=torch.int32), -1).shape == (5, 7)
        assert ops.take(data, torch.empty(4, 2, dtype=torch.int64)).shape == (4, 2)
        assert ops.take(data, torch.empty(6, dtype=torch.bool), 0).shape == (6, 7, 3)
        assert ops.gather_elements(data, torch.empty(5, 9, 2, dtype=torch.int64),
                                   1).shape == (5, 9, 2)
        out = ops.gather_nd(data, torch.empty(6, 2, dtype=torch.int64), 0)
        assert out.shape == (6, 3) and out.dtype == td
        assert ops.gather_nd(data, torch.empty(5, 4, 1, dtype=torch.int64), 1).shape == (5, 4, 3)


def test_fake_raises_the_eager_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        data = torch.empty(5, 7)
        idx = torch.empty(3, dtype=torch.int64)
        with pytest.raises(ValueError, match="mode must be one of"):
            torch.ops.cugather.gather(data, idx, 0, "nearest")
        with pytest.raises(TypeError, match="indices must be an integer array"):
            torch.ops.cugather.gather(data, torch.empty(3), 0)
        with pytest.raises(np.exceptions.AxisError):
            torch.ops.cugather.gather(data, idx, 2)
        with pytest.raises(ValueError, match="exceed data of shape"):
            torch.ops.cugather.gather_elements(data, torch.empty(5, 9, dtype=torch.int64), 0)
        with pytest.raises(ValueError, match="batch_dims must be in"):
            torch.ops.cugather.gather_nd(data, torch.empty(5, 1, dtype=torch.int64), 2)


# ---------------------------------------------------------------- CPU semantics
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("out_of_range", [False, True])
def test_cpu_matches_numpy(name, out_of_range):
    rng = _rng()
    data, idx = _inputs(rng, name, out_of_range)
    for mode in _modes(name):
        try:
            want = _reference(name, data, idx, mode)
        except IndexError:
            with pytest.raises(IndexError, match=r"is out of bounds for axis \d with size \d"):
                _call(name, torch.from_numpy(data), torch.from_numpy(idx), mode)
            continue
        got = _call(name, torch.from_numpy(data), torch.from_numpy(idx), mode)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} {mode}")


def test_cpu_raise_names_the_first_bad_index():
    data = torch.zeros(3, 4)
    idx = torch.tensor([[0, 1], [9, -5]])
    with pytest.raises(IndexError, match=r"index 9 is out of bounds for axis 1 with size 4 "
                                         r"\(at indices\[1, 0\]; valid range \[-4, 3\]\)"):
        torch.ops.cugather.gather(data, idx, 1)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_cpu_byte_dtypes_against_the_uint_view(dtype):
    rng = _rng()
    td = getattr(torch, dtype)
    raw = torch.from_numpy(rng.integers(0, 256, size=(6, 5 * td.itemsize), dtype=np.uint8))
    data = raw.view(td)
    idx = torch.from_numpy(rng.integers(-12, 12, size=(7,)))
    got = torch.ops.cugather.gather(data, idx, 0, "fill", 1.0)
    assert got.dtype == td
    bits = got.view(torch.uint8 if td.itemsize == 1 else torch.int16).numpy()
    want = gather_ref(data.view(torch.uint8 if td.itemsize == 1 else torch.int16).numpy(),
                      idx.numpy(), 0, "fill", 0)
    one = np.frombuffer(torch.tensor(1.0, dtype=td).reshape(1).view(torch.uint8).numpy()
                        .tobytes(), dtype=want.dtype)[0]
    keep = ((idx >= -6) & (idx < 6)).numpy()
    want[~keep] = one
    np.testing.assert_array_equal(bits, want)


def test_eager_entries_take_cpu_tensors_through_the_operator():
    rng = _rng()
    data, idx = _inputs(rng, "gather", True)
    got = ct.gather(torch.from_numpy(data), torch.from_numpy(idx), 1, mode="wrap")
    np.testing.assert_array_equal(got.numpy(), gather_ref(data, idx, 1, "wrap"))
    got = ct.take(torch.from_numpy(data), idx.tolist(), mode="clip")  # a list of indices
    np.testing.assert_array_equal(got.numpy(), np.take(data, idx, mode="clip"))
    with pytest.raises(ValueError, match="out= and stream= are for eager calls on CUDA"):
        ct.gather(torch.from_numpy(data), torch.from_numpy(idx), 1, out=torch.empty(1))


# ---------------------------------------------------------------- compile, opcheck
class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(50, 8, dtype=torch.float64))

    def forward(self, ids, rows):
        x = torch.ops.cugather.gather(self.table, ids, 0, "clip", 0)
        y = torch.ops.cugather.gather_elements(self.table, rows, 1, "wrap", 0)
        z = torch.ops.cugather.gather_nd(self.table, ids.reshape(-1, 1) % 50, 0, "fill", 0.5)
        w = torch.ops.cugather.take(self.table, ids, None, "wrap")
        return x.sum(-1) * 2 + y.sum() + z.sum() + w.sum()


def test_compile_fullgraph_traces_every_op_in_one_graph():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    module = _Embed()
    ids = torch.randint(-60, 60, (4, 3))
    rows = torch.randint(-20, 20, (50, 3))
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    got = compiled(ids, rows)
    assert counter.frame_count == 1
    np.testing.assert_allclose(got.detach().numpy(), module(ids, rows).detach().numpy())
    got.sum().backward()  # the registered backward, traced through AOT autograd
    assert module.table.grad is not None and module.table.grad.abs().sum() > 0


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    rng = _rng()
    data, idx = _inputs(rng, name, True)
    t = torch.from_numpy(data).requires_grad_()
    for mode in ("wrap", "clip", "fill") if name != "take" else ("wrap", "clip"):
        i = torch.from_numpy(idx)
        args = {"gather": (t, i, 1, mode, -7.0), "take": (t, i, 1, mode),
                "gather_elements": (t, i, 1, mode, -7.0), "gather_nd": (t, i, 0, mode, -7.0)}
        torch.library.opcheck(getattr(torch.ops.cugather, name), args[name])


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", OPS)
def test_gradcheck(name):
    rng = _rng()
    data, idx = _inputs(rng, name, True)
    i = torch.from_numpy(idx)
    for mode in ("wrap", "clip", "fill") if name != "take" else ("wrap", "clip"):
        t = torch.from_numpy(data).requires_grad_()
        assert torch.autograd.gradcheck(lambda x: _call(name, x, i, mode), (t,)), (name, mode)


def test_gradients_match_torch_own_backward():
    rng = _rng()
    data = torch.from_numpy(rng.standard_normal((6, 5))).requires_grad_()
    idx = torch.tensor([0, 3, 3, -1, 4, 0])
    weight = torch.from_numpy(rng.standard_normal((6, 6)))
    (torch.ops.cugather.gather(data, idx, 1) * weight).sum().backward()
    mine = data.grad.clone()
    data.grad = None
    (torch.index_select(data, 1, idx % 5) * weight).sum().backward()
    torch.testing.assert_close(mine, data.grad, rtol=0, atol=1e-12)
    rows = torch.randint(0, 5, (4, 7))
    w2 = torch.from_numpy(rng.standard_normal((4, 7)))
    data.grad = None
    (torch.ops.cugather.gather_elements(data, rows, 1) * w2).sum().backward()
    mine = data.grad.clone()
    data.grad = None
    (torch.gather(data, 1, rows) * w2).sum().backward()
    torch.testing.assert_close(mine, data.grad, rtol=0, atol=1e-12)


def test_deterministic_mode_gives_identical_gradients():
    rng = _rng()
    data = torch.from_numpy(rng.standard_normal((40, 16)).astype(np.float32)).requires_grad_()
    idx = torch.from_numpy(rng.integers(0, 40, size=(3000,)))
    grads = []
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            data.grad = None
            torch.ops.cugather.gather(data, idx, 0, "wrap").sum().backward()
            grads.append(data.grad.clone())
    finally:
        torch.use_deterministic_algorithms(previous)
    assert torch.equal(grads[0], grads[1])
    counts = np.bincount(idx.numpy(), minlength=40).astype(np.float32)
    np.testing.assert_allclose(grads[0].numpy(), np.repeat(counts[:, None], 16, axis=1))
