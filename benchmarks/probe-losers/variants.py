"""A plan's main kernel rendered with some ``#define`` lines of
``tuning.KERNEL_DEFINES`` set otherwise, compiled once per source text and
bound to the plan's launch (the probes of this folder)."""
import dataclasses
from cupy.cuda import function as cf
from cugather.compile.compiler import LoadedKernel, arch_for_device, compile_source
from cugather.compile.render import render
from cugather.plan.tuning import KERNEL_DEFINES
from cugather.runtime.binding import BoundKernel

_BUILT = {}


def bound_variant(plan, **defines):
    """``plan.main`` rendered with ``defines`` (macro name: value), bound."""
    src = render(plan.main.key)
    text = src.text
    for name, value in defines.items():
        old, new = f"#define {name} {KERNEL_DEFINES[name]}", f"#define {name} {value}"
        assert old in text, (name, plan.main.key)
        text = text.replace(old, new)
    if text not in _BUILT:
        ck = compile_source(dataclasses.replace(src, text=text), arch_for_device(0), ())
        module = cf.Module()
        module.load(ck.binary)
        _BUILT[text] = LoadedKernel(ck, 0, module, module.get_function(plan.main.key.entry))
    return BoundKernel(_BUILT[text], plan.main)
