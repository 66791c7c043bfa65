"""What ranks tell each other about their shards at construction, and peer mapping.

Each rank publishes one small JSON record (rows, row shape, dtype, GPU, host
identity, NCCL, and how to reach its shard: a CUDA IPC handle with the
offset inside the allocation between processes, the address itself in one
process).  Every rank checks every record the same way, so a mismatch
raises the same error everywhere.  Then each rank maps the other shards
into its own GPU and the ranks agree whether all of them could.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Optional

import numpy

from .. import validate as _arrays
from . import peer as _peer

__all__ = ["describe", "parse", "check_records", "map_peers", "host_identity"]

_VERSION = 1
_FIELDS: dict[str, Any] = {"v": int, "rows": int, "row_shape": list, "dtype": (str, list), "device": int,
           "bus": str, "host": str, "nccl": bool, "error": (str, type(None)),
           "ipc": (list, type(None)), "ptr": int, "why": str}


def host_identity() -> str:
    """This machine: host name and boot id (two containers of one host may differ: safe)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def describe(comm, rows, error: Optional[str], local: bool) -> bytes:
    """This rank's record; ``rows`` is its validated shard (None when ``error``)."""
    cp = _arrays.cupy_module()
    rec = {"v": _VERSION, "rows": 0, "row_shape": [], "dtype": "|u1", "device": comm.device,
           "bus": cp.cuda.runtime.deviceGetPCIBusId(comm.device), "host": host_identity(),
           "nccl": comm.has_nccl, "error": error, "ipc": None, "ptr": 0, "why": ""}
    if rows is not None:
        rec.update(rows=int(rows.shape[0]), row_shape=list(rows.shape[1:]),
                   dtype=numpy.lib.format.dtype_to_descr(rows.dtype),
                   ptr=int(rows.data.ptr) if rows.size else 0)
        if rows.size and not local:
            try:
                handle, offset = _peer.export_shard(rows)
                rec["ipc"] = [handle.hex(), int(offset)]
            except Exception as e:  # e.g. memory from cudaMallocAsync: no legacy IPC
                rec["why"] = f"rank {comm.rank} cannot export its shard by CUDA IPC ({e})"
    return json.dumps(rec).encode()


def parse(raw: bytes, rank: int) -> dict:
    """A record, checked field by field; ValueError names the rank and the fault."""
    try:
        rec = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"rank {rank} sent a malformed shard record ({e})") from None
    if not isinstance(rec, dict) or rec.get("v") != _VERSION:
        raise ValueError(f"rank {rank} sent a shard record of another version or shape")
    for name, kind in _FIELDS.items():
        if not isinstance(rec.get(name), kind) or isinstance(rec.get(name), bool) != (kind is bool):
            raise ValueError(f"rank {rank}'s shard record has a bad {name!r}: {rec.get(name)!r}")
    if rec["rows"] < 0 or any(not isinstance(n, int) or n < 0 for n in rec["row_shape"]):
        raise ValueError(f"rank {rank}'s shard record has a bad shape")
    rec["dtype"] = numpy.lib.format.descr_to_dtype(
        [tuple(f) for f in rec["dtype"]] if isinstance(rec["dtype"], list) else rec["dtype"])
    return rec


def check_records(records: list) -> None:
    """The same ValueError on every rank if any rank failed or shards disagree."""
    for q, rec in enumerate(records):
        if rec["error"]:
            raise ValueError(f"rank {q} rejected its local_rows: {rec['error']}")
    first = records[0]
    for q, rec in enumerate(records[1:], 1):
        if rec["row_shape"] != first["row_shape"] or rec["dtype"] != first["dtype"]:
            raise ValueError(
                f"every rank's local_rows must have the same row shape and dtype: rank 0 has "
                f"rows {tuple(first['row_shape'])} of {first['dtype']}, rank {q} rows "
                f"{tuple(rec['row_shape'])} of {rec['dtype']}")


def map_peers(comm, records: list, local: bool) -> tuple:
    """(bases as seen from this rank's GPU, keys of opened IPC mappings, why not or "").

    Never raises: a failure is a reason, so that every rank still takes part
    in the agreement that follows.
    """
    cp = _arrays.cupy_module()
    rt = cp.cuda.runtime
    bases: list[int] = []
    opened: list[Any] = []
    try:
        if local:
            peers = [rec["device"] for q, rec in enumerate(records) if q != comm.rank and rec["rows"]]
            _peer.enable_peer_access(comm.device, sorted(set(peers)))
            return [rec["ptr"] for rec in records], opened, ""
        for q, rec in enumerate(records):
            if q == comm.rank or not rec["rows"]:
                bases.append(rec["ptr"] if q == comm.rank else 0)
                continue
            if rec["ipc"] is None:
                raise RuntimeError(rec["why"] or f"rank {q} published no IPC handle")
            if rec["host"] != records[comm.rank]["host"]:
                raise RuntimeError(f"rank {q} runs on another host")
            theirs = rt.deviceGetByPCIBusId(rec["bus"])
            if theirs != comm.device and not rt.deviceCanAccessPeer(comm.device, theirs):
                raise RuntimeError(f"GPU {comm.device} cannot access rank {q}'s GPU {theirs}")
            address, key = _peer.open_shard(bytes.fromhex(rec["ipc"][0]), rec["ipc"][1],
                                             comm.device)
            opened.append(key)
            bases.append(address)
        return bases, opened, ""
    except Exception as e:
        for key in opened:
            try:
                _peer.close_shard(key)
            except Exception:
                pass
        return [], [], f"rank {comm.rank}: {e}"
