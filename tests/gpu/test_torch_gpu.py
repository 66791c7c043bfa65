"""torch tensors on the GPU: cugather.torch, torch.ops.cugather and the public ops.

References are torch's own operators (index_select, gather, advanced
indexing, nn.functional.embedding, their backward) and finite differences
(gradcheck); float8 tables, which torch cannot gather on CUDA, are checked
byte for byte against index_select on a uint8 view of the same memory.
Stream tests hold a torch stream with a busy kernel: work wrongly sent to
another stream would read the table before the stream wrote it.
"""

from __future__ import annotations

import numpy as np
import pytest

from support import gpu as g

pytestmark = pytest.mark.gpu

SPIN_MS = 100
# Every dtype torch.index_select supports on CUDA.
INDEX_SELECT_DTYPES = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32",
                       "int64", "uint8", "bool", "complex64", "complex128")
FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
          "float8_e8m0fnu")
# Same-size dtypes index_select does support, for dtypes it does not.
VIEW_AS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


@pytest.fixture(scope="module")
def torch():
    torch = g.torch_cuda()
    import cugather.torch  # noqa: F401  (registers torch.ops.cugather)

    return torch


def _table(torch, dtype, shape=(300, 24)):
    td = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(3)
    if td.is_floating_point or td.is_complex:
        return torch.randn(shape, device="cuda", generator=gen).to(td)
    if td == torch.bool:
        return torch.randint(0, 2, shape, device="cuda", generator=gen).bool()
    raw = torch.randint(0, 256, shape[:-1] + (shape[-1] * td.itemsize,), device="cuda",
                        dtype=torch.uint8, generator=gen)
    return raw.view(td)


def _ids(torch, n, size, low=None):
    gen = torch.Generator(device="cuda").manual_seed(5)
    return torch.randint(-n if low is None else low, n, (size,), device="cuda", generator=gen)


def _byte_table(torch, dtype, shape=(300, 24)):
    """A table of a dtype torch cannot gather (float8, uint16...), random bytes."""
    td = getattr(torch, dtype)
    raw = _table(torch, "uint8", shape[:-1] + (shape[-1] * td.itemsize,))
    return raw.view(td)


# ---------------------------------------------------------------- against torch
@pytest.mark.parametrize("dtype", INDEX_SELECT_DTYPES)
def test_gather_matches_index_select(torch, dtype):
    import cugather.torch as ct

    table = _table(torch, dtype)
    ids = _ids(torch, 300, 1000)
    want = torch.index_select(table, 0, ids % 300)
    for got in (ct.gather(table, ids, 0, mode="raise"), torch.ops.cugather.gather(table, ids)):
        assert got.dtype == table.dtype and got.device == table.device
        assert torch.equal(got, want)
    cols = _ids(torch, 24, 50)
    assert torch.equal(ct.gather(table, cols, 1, mode="wrap"),
                       torch.index_select(table, 1, cols % 24))


@pytest.mark.parametrize("dtype", FLOAT8 + ("uint16", "uint32", "uint64"))
def test_dtypes_torch_cannot_gather_against_a_same_size_view(torch, dtype):
    import cugather.torch as ct

    if not hasattr(torch, dtype):
        pytest.skip(f"torch {torch.__version__} has no {dtype}")
    table = _byte_table(torch, dtype)
    view = getattr(torch, VIEW_AS[table.element_size()])
    ids = _ids(torch, 300, 1000)
    got = ct.gather(table, ids, 0, mode="wrap")
    assert got.dtype == table.dtype
    assert torch.equal(got.view(view), torch.index_select(table.view(view), 0, ids % 300))
    got = torch.ops.cugather.gather_elements(table, (ids % 24).reshape(-1, 1).expand(-1, 5)[:300],
                                             1, "wrap")
    want = torch.gather(table.view(view), 1, (ids % 24).reshape(-1, 1).expand(-1, 5)[:300])
    assert torch.equal(got.view(view), want)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_fill_writes_the_dtype_s_own_bytes(torch, dtype):
    import cugather.torch as ct

    td = getattr(torch, dtype)
    table = _table(torch, "float32").to(td)
    view = getattr(torch, VIEW_AS[table.element_size()])
    ids = _ids(torch, 600, 1000)  # half of them out of range
    got = ct.gather(table, ids, 0, mode="fill", fill_value=-2.0)
    assert got.dtype == td
    keep = (ids >= -300) & (ids < 300)
    rows = table.view(view)[torch.where(keep, torch.where(ids < 0, ids + 300, ids), 0)]
    fill = torch.tensor(-2.0).to(td).view(view).cuda()  # the CPU conversion's bytes
    assert torch.equal(got.view(view), torch.where(keep[:, None], rows, fill))


@pytest.mark.parametrize("mode", ["raise", "wrap", "clip", "fill"])
def test_every_op_matches_torch_indexing(torch, mode):
    import cugather.torch as ct

    data = _table(torch, "float32", (20, 30, 4))
    span = 1 if mode == "raise" else 3

    def fix(i, n):  # what the mode makes of an index, by torch ops
        if mode == "wrap":
            return i % n, None
        j = torch.where(i < 0, i + n, i)
        if mode == "clip":
            return j.clamp(0, n - 1), None
        keep = (j >= 0) & (j < n)
        return torch.where(keep, j, 0), keep

    fill = torch.tensor(-7.0, device="cuda")
    # gather on axis 1
    ids = _ids(torch, 30 * span, 40)
    j, keep = fix(ids, 30)
    want = data[:, j]
    if keep is not None:
        want = torch.where(keep[None, :, None], want, fill)
    assert torch.equal(ct.gather(data, ids, 1, mode=mode, fill_value=-7.0), want)
    # take (numpy semantics: clip clamps negatives to 0, axis=None flattens)
    if mode != "fill":
        flat = _ids(torch, 2400 * span, 70)
        tj = flat.clamp(0, 2399) if mode == "clip" else fix(flat, 2400)[0]
        assert torch.equal(ct.take(data, flat, mode=mode), data.reshape(-1)[tj])
    # gather_elements on axis 1, indices smaller than data on the other axes
    rows = _ids(torch, 30 * span, 10 * 50 * 3).reshape(10, 50, 3)
    j, keep = fix(rows, 30)
    want = torch.gather(data[:10, :, :3], 1, j)
    if keep is not None:
        want = torch.where(keep, want, fill)
    assert torch.equal(ct.gather_elements(data, rows, 1, mode=mode, fill_value=-7.0), want)
    # gather_nd, tuples of 2
    a, b = _ids(torch, 20 * span, 60), _ids(torch, 30 * span, 60).flip(0)
    (ja, ka), (jb, kb) = fix(a, 20), fix(b, 30)
    want = data[ja, jb]
    if ka is not None:
        want = torch.where((ka & kb)[:, None], want, fill)
    got = torch.ops.cugather.gather_nd(data, torch.stack([a, b], -1), 0, mode, -7.0)
    assert torch.equal(got, want)


def test_raise_names_the_bad_index_and_leaves_out_untouched(torch):
    import cugather.torch as ct

    table = _table(torch, "float32")
    ids = torch.tensor([0, 5, 300, 2], device="cuda")
    with pytest.raises(IndexError, match=r"index 300 is out of bounds for axis 0 with size 300"):
        ct.gather(table, ids)
    out = torch.full((4, 24), 9.0, device="cuda")
    with pytest.raises(IndexError, match="index 300"):
        ct.gather(table, ids, out=out)
    assert bool((out == 9.0).all())
    with pytest.raises(IndexError, match="index 300"):
        torch.ops.cugather.gather(table, ids)


def test_out_and_host_indices(torch):
    import cugather.torch as ct

    table = _table(torch, "float16")
    out = torch.empty(3, 24, dtype=torch.float16, device="cuda")
    got = ct.gather(table, [4, -1, 7], out=out)
    assert got is out
    assert torch.equal(out, table[[4, 299, 7]])
    got = ct.gather(table, torch.tensor([1, 2], dtype=torch.int16))  # CPU int16: copied, cast
    assert torch.equal(got, table[[1, 2]])
    with pytest.raises(TypeError, match="out has dtype"):
        ct.gather(table, [1], out=torch.empty(1, 24, device="cuda"))


# ---------------------------------------------------------------- streams, graphs
def _spin(torch, stream):
    from cugather import validate

    g.spin(validate.external_stream(g.cp(), stream.cuda_stream), SPIN_MS)


def test_runs_on_torch_s_current_stream(torch):
    import cugather.torch as ct

    src = _table(torch, "float32")
    ids = _ids(torch, 300, 500)
    table = torch.zeros_like(src)
    ct.gather(table, ids, mode="wrap")  # compiled and bound before the timed part
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _spin(torch, s)
        table.copy_(src)
        eager = ct.gather(table, ids, mode="wrap")
        op = torch.ops.cugather.gather(table, ids, 0, "clip")
    s.synchronize()
    assert torch.equal(eager, src[ids % 300])
    assert torch.equal(op, src[torch.where(ids < 0, ids + 300, ids)])


def test_stream_argument_wins(torch):
    import cugather.torch as ct

    src = _table(torch, "float32")
    ids = _ids(torch, 300, 500)
    table = torch.zeros_like(src)
    ct.gather(table, ids, mode="wrap")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _spin(torch, s)
        table.copy_(src)
    got = ct.gather(table, ids, mode="wrap", stream=s)  # current stream: the default one
    s.synchronize()
    assert torch.equal(got, src[ids % 300])


@pytest.mark.parametrize("mode", ["wrap", "clip", "fill"])
def test_cuda_graph_capture_and_replay(torch, mode):
    import cugather.torch as ct

    table = _table(torch, "float32")
    ids = _ids(torch, 600, 256)
    calls = (lambda: ct.gather(table, ids, 0, mode=mode, fill_value=1.5),
             lambda: torch.ops.cugather.gather(table, ids, 0, mode, 1.5),
             lambda: torch.ops.cugather.gather_nd(table, ids.reshape(-1, 1), 0, mode, 1.5))
    side = torch.cuda.Stream()  # warm up off the capture stream, as torch's docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call() for call in calls]
    ids.copy_(_ids(torch, 600, 256, low=-900))
    graph.replay()
    torch.cuda.synchronize()
    if mode == "wrap":
        j, keep = ids % 300, None
    else:
        j = torch.where(ids < 0, ids + 300, ids)
        keep = (j >= 0) & (j < 300)
        j = j.clamp(0, 299) if mode == "clip" else torch.where(keep, j, 0)
        keep = keep if mode == "fill" else None
    want = table[j]
    if keep is not None:
        want = torch.where(keep[:, None], want, torch.tensor(1.5, device="cuda"))
    for out in outs:
        assert torch.equal(out, want), mode


# ---------------------------------------------------------------- compile
def _embedding_modules(torch):
    class Embed(torch.nn.Module):
        def __init__(self, table, through_cugather):
            super().__init__()
            self.table = torch.nn.Parameter(table.clone())
            self.through_cugather = through_cugather

        def forward(self, ids):
            if self.through_cugather:
                rows = torch.ops.cugather.gather(self.table, ids, 0, "clip", 0)
            else:
                rows = torch.nn.functional.embedding(ids, self.table)
            return torch.relu(rows).sum(-1)

    return Embed


def test_compile_fullgraph_matches_embedding_with_gradients(torch):
    Embed = _embedding_modules(torch)
    table = _table(torch, "float32", (1000, 64))
    ids = _ids(torch, 1000, 32 * 20, low=0).reshape(32, 20)
    mine, theirs = Embed(table, True), Embed(table, False)
    torch._dynamo.reset()
    compiled = torch.compile(mine, fullgraph=True)
    got, want = compiled(ids), theirs(ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(mine.table.grad, theirs.table.grad, rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------- autograd
@pytest.mark.parametrize("mode", ["raise", "wrap", "clip", "fill"])
def test_gradcheck_float64(torch, mode):
    data = torch.randn(6, 7, 3, dtype=torch.float64, device="cuda", requires_grad=True)
    span = 1 if mode == "raise" else 2
    ids = _ids(torch, 7 * span, 9)
    rows = _ids(torch, 7 * span, 6 * 4 * 3).reshape(6, 4, 3)
    tuples = torch.stack([_ids(torch, 6 * span, 5), _ids(torch, 7 * span, 5).flip(0)], -1)
    ops = torch.ops.cugather
    checks = [lambda x: ops.gather(x, ids, 1, mode, 0.5),
              lambda x: ops.gather_elements(x, rows, 1, mode, 0.5),
              lambda x: ops.gather_nd(x, tuples, 0, mode, 0.5)]
    if mode != "fill":
        checks.append(lambda x: ops.take(x, ids, None, mode))
    for check in checks:
        assert torch.autograd.gradcheck(check, (data,))


def test_gradients_match_torch_own_backward(torch):
    data = torch.randn(50, 16, device="cuda", requires_grad=True)
    ids = _ids(torch, 50, 4000, low=0)
    weight = torch.randn(4000, 16, device="cuda")
    (torch.ops.cugather.gather(data, ids, 0, "wrap") * weight).sum().backward()
    mine, data.grad = data.grad.clone(), None
    (torch.index_select(data, 0, ids) * weight).sum().backward()
    torch.testing.assert_close(mine, data.grad, rtol=1e-5, atol=1e-4)
    rows = _ids(torch, 16, 50 * 9, low=0).reshape(50, 9)
    w2 = torch.randn(50, 9, device="cuda")
    data.grad = None
    (torch.ops.cugather.gather_elements(data, rows, 1) * w2).sum().backward()
    mine, data.grad = data.grad.clone(), None
    (torch.gather(data, 1, rows) * w2).sum().backward()
    torch.testing.assert_close(mine, data.grad, rtol=1e-5, atol=1e-5)


def test_deterministic_gradients(torch):
    data = torch.randn(64, 32, device="cuda", requires_grad=True)
    ids = _ids(torch, 64, 200000, low=0)  # many repeats: atomics would reorder the sums
    weight = torch.randn(200000, 32, device="cuda")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(3):
            data.grad = None
            (torch.ops.cugather.gather(data, ids, 0, "wrap") * weight).sum().backward()
            grads.append(data.grad.clone())
    finally:
        torch.use_deterministic_algorithms(previous)
    assert all(torch.equal(grads[0], gr) for gr in grads[1:])
    want = torch.zeros(64, 32, dtype=torch.float64, device="cuda").index_add_(
        0, ids, weight.double())
    torch.testing.assert_close(grads[0].double(), want, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- the public ops
def test_public_ops_return_torch_tensors_and_cupy_on_request(torch):
    import cugather
    from cugather import frontends

    cp = g.cp()
    table = _table(torch, "float32")
    ids = _ids(torch, 300, 100)
    got = cugather.gather(table, ids, mode="wrap")
    assert isinstance(got, torch.Tensor) and torch.equal(got, table[ids % 300])
    got = cugather.take(table, ids, mode="wrap")
    assert isinstance(got, torch.Tensor) and torch.equal(got, table.reshape(-1)[ids % 7200])
    f8 = _byte_table(torch, "float8_e4m3fn")
    got = cugather.gather(f8, ids, mode="wrap")
    assert got.dtype == f8.dtype
    assert torch.equal(got.view(torch.uint8), f8.view(torch.uint8)[ids % 300])
    with frontends.using_output("cupy"):
        got = cugather.gather(table, ids, mode="wrap")
        assert isinstance(got, cp.ndarray)
        assert np.array_equal(cp.asnumpy(got), table[ids % 300].cpu().numpy())
        with pytest.raises(TypeError, match="CuPy cannot hold"):
            cugather.gather(f8, ids, mode="wrap")


# ---------------------------------------------------------------- the front door's memo
def _memo_cases(torch):
    """(name, data, indices) pairs that share a first geometry and then each change
    one thing the memo must see."""
    table = _table(torch, "float32", (300, 24))
    ids = _ids(torch, 300, 64, low=0)
    wide = _table(torch, "float32", (300, 48))
    neg = torch._neg_view(table)
    return [
        ("first", table, ids),
        ("again", table, ids),
        ("other table, same geometry", _table(torch, "float32", (300, 24)) + 1, ids),
        ("other indices, same geometry", table, ids.flip(0)),
        ("shape", table[:200], ids % 200),
        ("dtype", table.view(torch.int32), ids),
        ("strides", wide[:, ::2], ids),
        ("alignment", wide.reshape(-1)[4:4 + 7200].view(300, 24), ids),
        ("negative bit", neg, ids),
        ("int32 indices", table, ids.to(torch.int32)),
        ("strided indices", table, torch.stack([ids, ids], 1)[:, 0]),
        ("2-d indices", table, ids.reshape(8, 8)),
        ("back to the first", table, ids),
    ]


@pytest.mark.parametrize("entry", ["cugather.gather", "cugather.torch.gather",
                                   "torch.ops.cugather.gather"])
def test_the_memo_sees_every_change_of_geometry(torch, entry):
    import cugather
    import cugather.torch as ct
    from cugather.ops import gather as ops_gather

    call = {"cugather.gather": lambda d, i: cugather.gather(d, i, mode="wrap"),
            "cugather.torch.gather": lambda d, i: ct.gather(d, i, mode="wrap"),
            "torch.ops.cugather.gather": lambda d, i: torch.ops.cugather.gather(d, i, 0, "wrap",
                                                                                  0)}[entry]
    op = ops_gather._shared_op(ops_gather.GatherOp, 0, "wrap", 0)
    for name, data, idx in _memo_cases(torch):
        got = call(data, idx)
        want = torch.index_select(data.resolve_neg(), 0, idx.long().reshape(-1)).reshape(
            tuple(idx.shape) + tuple(data.shape[1:]))
        assert isinstance(got, torch.Tensor), name
        assert got.dtype == data.dtype and got.is_contiguous(), name
        assert torch.equal(got, want), name
        if name in ("first", "again", "back to the first"):
            assert op._runtime.native[0] is not None, f"{name}: the memo was not set"


def test_the_memo_raises_the_same_error_and_honours_set_output(torch):
    import cugather
    import cugather.torch as ct
    from cugather import frontends

    cp = g.cp()
    table = _table(torch, "float32")
    ok = torch.tensor([0, 5, 7, 2], device="cuda")
    bad = torch.tensor([0, 5, -301, 2], device="cuda")
    for _ in range(2):  # the second call of each runs on the memo
        assert torch.equal(ct.gather(table, ok), table[ok])
        assert torch.equal(cugather.gather(table, ok), table[ok])
    for fn in (ct.gather, cugather.gather, lambda d, i: torch.ops.cugather.gather(d, i)):
        with pytest.raises(IndexError, match=r"index -301 is out of bounds for axis 0 with "
                                             r"size 300 \(at indices\[2\]"):
            fn(table, bad)
    with frontends.using_output("cupy"):
        got = cugather.gather(table, ok)
        assert isinstance(got, cp.ndarray)
        assert isinstance(ct.gather(table, ok), torch.Tensor)  # cugather.torch: always torch
    assert isinstance(cugather.gather(table, ok), torch.Tensor)


def test_the_registered_op_redispatches_for_grads_and_dispatch_modes(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    table = _table(torch, "float32").requires_grad_()
    ids = _ids(torch, 300, 50, low=0)
    with torch.no_grad():
        got = torch.ops.cugather.gather(table, ids, 0, "wrap", 0)
    assert got.grad_fn is None and torch.equal(got, table.detach()[ids])
    got = torch.ops.cugather.gather(table, ids, 0, "wrap", 0)
    assert got.grad_fn is not None
    got.sum().backward()
    want = torch.zeros_like(table).index_add_(0, ids, torch.ones(50, 24, device="cuda"))
    assert torch.equal(table.grad, want)
    with Log():
        got = torch.ops.cugather.gather(table.detach(), ids, 0, "wrap", 0)
    assert "cugather.gather.default" in seen
    assert torch.equal(got, table.detach()[ids])
