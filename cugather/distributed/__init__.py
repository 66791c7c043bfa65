"""cugather.distributed: gather from tables whose rows are sharded over GPUs and hosts.

One process per GPU (started by ``python -m cugather.distributed.run
--nproc-per-node N script.py`` or by torchrun)::

    import cupy, cugather.distributed as cgd

    comm = cgd.init()                            # RANK, WORLD_SIZE, ... from the environment
    table = cgd.ShardedTable(my_rows, comm)      # rows of rank 0, then rank 1, ...
    out = table.gather(indices, mode="wrap")     # == cugather.gather(whole_table, indices)

Or every GPU of one process (notebooks, tests)::

    group = cgd.init_local()
    table = cgd.ShardedTable([rows_gpu0, rows_gpu1], group)
    outs = table.gather([idx_gpu0, idx_gpu1])

Two transports: NCCL send/recv (``transport="nccl"``, any number of
hosts) and direct reads of peer memory (``transport="p2p"``, one host with
peer access; the default there).  Importing this package needs neither CuPy
nor NCCL nor a GPU; they are loaded when a job starts.
"""

from __future__ import annotations

import importlib

__all__ = ["init", "init_local", "Communicator", "LocalGroup", "ShardedTable",
           "ShardedIndexError", "PeerGather", "MAX_RANKS", "choose_transport"]

_WHERE = {
    "init": "comm", "init_local": "comm", "Communicator": "comm", "LocalGroup": "comm",
    "ShardedTable": "table", "ShardedIndexError": "exchange", "PeerGather": "peer",
    "MAX_RANKS": "plan", "choose_transport": "transport",
}


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cugather.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
