"""``transport="auto"`` and the NCCL rounds: the rules, in one place, from numbers.

Measured on 2 x H200 joined by 18 NVLinks (DESIGN.md, "Scale-out"):
a kernel on GPU 1 reading random 512-byte rows of GPU 0 through peer access
moved 376 GB/s, ``cudaMemcpyPeerAsync`` 396 GB/s, NCCL send/recv both ways at
once 356 GB/s each way (NVLink 4: 450 GB/s each way).  The NCCL transport
moves every remote row twice more through HBM (gathered into a send buffer
on the owner, written into the caller's order on arrival) and synchronises
with the host once per call; peer reads move each row once and never
synchronise.  So on one host with peer access between every pair, peer
reads are expected to win at every size; across hosts only NCCL applies.
``python -m cugather bench --distributed`` measures both in one run: update
the constants here from its JSON when the numbers say otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from .exchange import ROUNDS
from .plan import MAX_RANKS

__all__ = ["Facts", "choose_transport", "choose_rounds", "P2P_MAX_RANKS", "ROUND_BYTES"]

#: Peer reads need every shard's base in one argument block.
P2P_MAX_RANKS = MAX_RANKS
#: Bytes of requested rows per round of the NCCL exchange (the largest request
#: of any rank decides).  Fewer rounds cost fewer launches and groups; more
#: overlap one round's transfer with the next round's gathers.  32 MiB keeps a
#: 4096 x 512 B request (2 MiB) in one round and splits 1M x 512 B (512 MiB)
#: into 8, which measured 2.97 ms per call against 3.09 ms in one round
#: (uniform indices; 3.38 against 3.50 ms skewed) on 2 x H200.
ROUND_BYTES = 32 << 20


@dataclass(frozen=True)
class Facts:
    """What every rank agreed on at construction."""

    ranks: int
    one_host: bool        # every rank reported the same host identity
    peer_ready: bool      # every rank mapped every other shard (IPC, or peer access in-process)
    nccl: bool            # every rank has an NCCL communicator
    why_not_peer: str = ""


def choose_transport(facts: Facts) -> tuple:
    """(transport, reason) for ``transport="auto"``.

    Peer reads when every rank is on one host and has mapped every other
    shard (376 GB/s peer reads against 356 GB/s NCCL send/recv on 2 x H200,
    one pass over HBM instead of three, no host synchronisation); NCCL
    otherwise (several hosts, no peer access, more than P2P_MAX_RANKS ranks).
    """
    if facts.peer_ready and facts.one_host and facts.ranks <= P2P_MAX_RANKS:
        return "p2p", "one host, peer access between every pair of ranks"
    if facts.nccl:
        return "nccl", f"peer reads unavailable: {facts.why_not_peer or 'not one host'}"
    raise RuntimeError(f"no transport: peer reads are unavailable ({facts.why_not_peer}) and "
                       f"not every rank has NCCL")


def choose_rounds(largest_request_bytes: int) -> int:
    """Rounds of the NCCL row exchange for the largest request of any rank."""
    want = -(-int(largest_request_bytes) // ROUND_BYTES)
    return next((r for r in ROUNDS if r >= want), ROUNDS[-1])
