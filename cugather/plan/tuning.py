"""Tuning constants: the one home of every number that CUDA and Python share.

The planners size grids and blocks with these values, and the renderer writes
:data:`KERNEL_DEFINES` at the top of every generated source (the headers in
``kernels/`` have no defaults of their own and refuse to compile without
them), so the two sides cannot disagree.  Values were chosen by measurement
on an H200; BENCHMARKS.md lists what each alternative measured.  A kind
registered from another module brings the constants only its kernel uses in
its spec (``KindSpec.defines``), rendered into its own source alone: the
sharded kind's are in cugather/distributed/plan.py.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["KERNEL_DEFINES"]

#: Threads per block every kernel is launched with at most.
MAX_THREADS = 256
#: Dimensions a strided / elements / nd kernel splits its output into.
MAX_DIMS = 8

# rows: units per thread per row for 1-, 2- and 4-byte units (8- and 16-byte
# units move 16 bytes per thread per row); rows per thread at most.
ROWS_NARROW_CU = 1
ROWS_MAX_RU = 4
# chunks: units per thread along a long row; a row of more than MAX_THREADS *
# CHUNKS_CU units splits into chunks of at most CHUNKS_SPLIT threads' worth,
# blocks sized to share the row evenly (H200, rows of 24856 / 12440 / 40960 B:
# 3-5% faster than full 256-thread chunks and a short last one; 128 lost on
# rows of 523 and 717 units).
CHUNKS_CU = 4
CHUNKS_SPLIT = 192
# chunks16: chunks with CHUNKS16_CU units per thread for 2- and 4-byte units (64
# bytes in flight per thread for 4-byte units where chunks keeps 16), under a
# launch bound of CHUNKS16_BLOCKS blocks (at 6 NVRTC 12.9 spills raise and fill).
# H200, 12 held-out calls of 4-byte-unit rows of 732-12324 B from beyond L2,
# 111-716 MiB out: 1.10x chunks (0.73-0.95 -> 0.79-0.96 of the copy); tables in
# L2 and short calls 0.93x-1.02x (benchmarks/probe-chunks): a tuning candidate.
CHUNKS16_CU = 16
CHUNKS16_BLOCKS = 5
# Blocks of the one-dimensional kernels (scalar, flat, window, pack) and rows per
# block of the rows kernel halve, down to SPREAD_MIN_THREADS threads, while the
# grid has fewer blocks than the GPU has SMs: a short call then spreads its
# random loads over more SMs (H200, 8-15k picks: 3.42 -> 2.71 us back to back
# for 30 -> 120 blocks of 8-byte units; 32-thread blocks gained nothing more).
SPREAD_MIN_THREADS = 64
# scalar: independent loads in flight per thread (1 and 2 tie on H200; 4 and
# 8 are 10-25% slower on a table in L2: more registers, fewer threads).
SCALAR_ILP = 2
# inner: loads in flight per thread while a row is staged in shared memory.
STAGE_ILP = 8
# inner: an outer row's picks split into chunks, a block each, every block
# staging the row again: at least INNER_SM_BLOCKS blocks per SM, and chunks of
# at most INNER_CHUNK_BYTES out or INNER_ROW_CHUNKS staged rows, the larger
# (both 0: no cap, blocks per SM alone, the rule before; the probe times it).
# H200, the 59 sweep geometries inner runs with few outer rows
# (benchmarks/probe-inner): 32 KiB or one row 1.13x as fast as 4 blocks per SM
# alone (geometric mean; the worst, 37 rows of 22960 B with 3.6M picks each,
# from 0.45x to 0.89x the best peer), 16 KiB 1.05x, 64 KiB 1.11x, 8 blocks
# per SM alone 1.01x.
INNER_SM_BLOCKS = 4
INNER_CHUNK_BYTES = 32 << 10
INNER_ROW_CHUNKS = 1
# inner, chunks set by the byte cap: the blocks (chunks x outer rows) rounded up
# to whole waves of INNER_SM_BLOCKS per SM, the kernel's residency (55
# registers, 4 blocks of 256 threads).  One row of 5.4M picks at 32 KiB alone:
# 666 blocks, a second wave of 138 (4 blocks per SM alone: 528, one wave).
# H200 (benchmarks/probe-inner, results-balance.json): 1.005x the cap alone on
# the 63 sweep cases, 1.08x on 23 tuning geometries the cap had slowed (there
# still 0.90x the rule before the cap).
INNER_BALANCE = True
# slab: shared memory a block stages outer rows into at most (24 KB: 8 blocks of
# 256 threads per SM, against 4 at 48 KB), and blocks per SM the grid aims at.
SLAB_MAX_STAGE = 24 * 1024
SLAB_BLOCKS_PER_SM = 8
# slab and slabw writing SLAB_BIG_OUT bytes or more: SLAB_BIG_BLOCKS_PER_SM.
# H100 (benchmarks/probe-losers/align_ab.py, align-ab-h100.json), 111 slab and
# slabw plans of eight sweeps, 16 against 8 blocks a SM: 1.056x in geometric
# mean on the 51 writing 64 MiB or more (0.989x-1.224x), 0.955x on the smaller
# ones (down to 0.76x on 2-7 MB), so the smaller keep 8.
SLAB_BIG_OUT = 64 << 20
SLAB_BIG_BLOCKS_PER_SM = 16
# slab and slabw: the index blocks of a group (each stages the group again) at
# most this many times the picks per axis element, 0 for no limit.  H200, the 63
# slab plans it changes among six held-out sweeps and the seed-1004 tuning
# geometries (benchmarks/probe-slab/grid.py): 2 ran 1.14x as fast as no limit
# (1 1.12x, 4 1.08x); 1534 outer rows of 3243 B with 1286 picks 1.68x.
SLAB_STAGE_RATIO = 2
# slab: index loads per thread in flight before the first pick is written.
# slabw: output bytes per store, of consecutive picks, by unit width (4 or 8;
# the unit itself: no slabw kernel for that unit).
SLAB_ILP = 4
SLAB_WORD = {1: 4, 2: 4, 4: 8}
# slab: 1 to store on whole 32-unit stretches of the output at any row phase
# (kernels/gather.cuh slab_aligned), 0 to store each row from its first unit.
# H100 (align-ab-h100.json): 0.62x in geometric mean over 77 slab plans of
# eight sweeps, 0.27x-1.31x; rows whose starts fall off 32-byte sectors gain
# (10583 float32 picks a row: 0.85 to 1.29 of a copy) and aligned rows lose
# more (8000 uint8 picks: 1.60 to 0.29), each lane resolving two picks.
SLAB_ALIGN = 0
# window: 16-byte output chunks per thread; rows up to this many bytes take
# the window kernel when the rows kernel could only move them in 1- or 2-byte
# units (over the random sweep: 1.04x-2.07x the rows kernel there; with
# 4- and 8-byte units the rows kernel was 2-40% faster).
WINDOW_ILP = 2
WINDOW_MAX_ROW = 2048
# bcast (an axis of length 1 in wrap or clip mode) takes bcastw, window's 16-byte
# chunks with no index read, instead of bcast's one load per unit, for rows of
# at least BCASTW_MIN_ROW[unit] bytes in outputs of more than BCASTW_MIN_OUT.
# H100 (benchmarks/probe-bcast): 1-byte units 1.14x-2.76x bcast on rows of
# 953 B-25 KB, 0.80x-0.84x on rows of 25-155 B; 2-byte units 1.05x-1.42x on
# rows of 5-25 KB, 0.62x on 1 KB rows; 4- and 8-byte units (bcast at 2.1-2.2x
# the copy) 0.73x-1.0x; outputs of 55-376 KB 0.77x-0.85x, of 22 MB and more
# the gains above.
BCASTW_MIN_ROW = {1: 512, 2: 4096}
BCASTW_MIN_OUT = 1 << 20
# pack (rows of 3 to 15 bytes as 16-byte chunks, the window kernel's loop): rows a
# chunk may touch at most (1 + 5 for 3-byte rows; 2-byte rows, 9, measured 0.4-0.6x
# the scalar kernel), and chunks per thread.  Loading all of a chunk's rows before
# merging any (106 registers, 2 blocks per SM) was 1.5-2.4x slower on outputs of
# 50 MB and more, and up to 1.6x faster only on calls of a few microseconds.
PACK_ROWS = 6
PACK_ILP = 2
# weave (rows of two units or more under 16 bytes, tiles of 32 x WEAVE_RU rows
# a warp woven in shared memory): rows per lane, which rows a lane takes (0:
# consecutive ones, 1: one in every 32), and the __launch_bounds__
# minimum resident blocks of the fast32 kernels (one fewer for fast64 and for
# fast32's fill mode with 1-byte units: 1-byte units spill there at 4; at 6, 40
# registers, fast32 spills too).  A tuning candidate.
WEAVE_RU = 4
WEAVE_LANES = 0
WEAVE_BLOCKS = 4
# slabr (rows of two units or more under 16 bytes from a staged table, tiles of
# 32 x SLABR_RU rows a warp woven in shared memory): rows per lane, and the
# __launch_bounds__ minimum resident blocks, which the grid fills once (a
# block's stage and tiles take up to 24 KB + 15 KB of shared memory).
SLABR_RU = 4
SLABR_BLOCKS = 4
# slabf on rows of a chunk or more in 4- or 8-byte units (32-bit index math):
# chunks a warp's tile takes, per lane (each tile's row indices loaded once,
# one per lane, and passed by shuffle; 0: an index load per unit, flat's
# chunks); prototypes with 1, 2 and 4 ran within 3% of each other on 20- to
# 100-byte rows.  Its grid fills at most SLABF_TILE_BLOCKS_PER_SM blocks a SM,
# one wave (6 resident at its launch bounds): against slab's 8, a second wave
# of 2, 1.06-1.15x on 100-300 MB outputs of 20- to 100-byte rows (H100,
# benchmarks/probe-tinyrows).
SLABF_TILE = 2
SLABF_TILE_BLOCKS_PER_SM = 4
# slabr's order 1 (a warp's picks written to every outer row of its group, each
# index loaded once per group) where its groups have two outer rows or more,
# each at least SLABR_ORDER_PICKS picks, and either every outer row starts its
# output 16-byte aligned (picks x row bytes a multiple of 16) or the indices
# take SLABR_ORDER_INDEX_BYTES or more (read from DRAM again by each outer row
# in order 0).  Else order 0 (tiles of the whole output, which pack the rows of
# several outer rows into one tile).  An outer row that starts mid-chunk has
# each of its tiles stored byte by byte at both ends in order 1: 9241's
# (683, 3, 1, 7) int8 axis 1 ran 0.67x order 0 (H100, BENCHMARKS.md).
SLABR_ORDER_PICKS = 1024
SLABR_ORDER_INDEX_BYTES = 32 << 20
# weave's edges, a probe setting (BENCHMARKS.md, "weave's edges"): 1 has a warp
# read the two blocks holding the table's first and last bytes once, when a
# tile first needs them, where 0 has each lane read such a block word by word
# (out of line).  H100, in one process: 1.11x on tables of a few dozen bytes to
# a few KB (1.75x on 77 bytes), 0.94x over the probe's 24 larger tables.
WEAVE_EDGES = 0
# flat (rows of 1- to 8-byte units as 16-byte output chunks): __launch_bounds__
# minimum resident blocks by (unit, index math), low enough that no mode spills
# (the NVRTC tier checks every architecture); a chunk of 1- or 2-byte units holds
# 16 or 8 of them, so those take fewer.
FLAT_BLOCKS = {(8, "fast32"): 6, (8, "fast64"): 6, (4, "fast32"): 6, (4, "fast64"): 4,
               (2, "fast32"): 4, (2, "fast64"): 3, (1, "fast32"): 4, (1, "fast64"): 2}
# raise mode's bounds check holds more registers: NVRTC 12.2 spills the 4-byte
# kernels at 6 blocks.
FLAT_BLOCKS_RAISE = {(4, "fast32"): 5}
# span (long rows as aligned 16-byte chunks, a warp's segment of a row staged in
# its own slice of shared memory by cp.async): threads per block (at most
# MAX_THREADS, the launch bounds' block size; 128 and 256 within 1% on odd rows
# from DRAM, 128 ahead on a 2 MB table) and chunks per lane per segment (2 and 8
# 0.5-2% behind 4); rows of fewer bytes than SPAN_MIN_ROW are not its (a row
# then leaves most lanes of its warp idle); __launch_bounds__ minimum resident
# blocks of MAX_THREADS (4: at most 64 registers; at 5, fill mode spills).
SPAN_THREADS = 128
SPAN_V = 4
SPAN_MIN_ROW = 256
SPAN_BLOCKS = 4
# lean (one unit per thread, nothing unrolled): rows of one unit of any size, and
# rows of several units in outputs of at most LEAN_MAX_OUT bytes; a tuning table
# decides where within that, the rules take it for short calls only.  Short
# calls cost the launch and two dependent loads, and random rows from DRAM gain
# from the most loads in flight: over the H200 tuning geometries of 1-64 MiB
# out, lean was the fastest candidate on 183 of 225 with 16-byte units, 4-5%
# ahead.  The 63 held-out plans the table fitted with those timings changes,
# most of them to lean, ran 1.047x as fast (benchmarks/probe-short/ab.py).
LEAN_MAX_OUT = 64 << 20
# The rules' short calls: outputs of at most SHORT_CALL_OUT bytes.  Rows of
# more than SHORT_CHUNKS_UNITS units under 16 B take chunks, the others lean.
SHORT_CALL_OUT = 1 << 20
SHORT_CHUNKS_UNITS = 16
# The rules' flat for rows of several 4- or 8-byte units of at most
# FLAT_RULE_MAX_ROW bytes (outputs over SHORT_CALL_OUT, 16-byte aligned), where
# they took the rows kernel: over the 1328 tuning geometries of that kind,
# flat took 1.009x-1.040x the fastest candidate's time (by row length), rows
# 1.14x-1.19x; flat was slower than rows by more than 3% on 8 (at most 1.07x).
# Longer rows keep rows: flat 1.04x-1.07x against rows' 1.13x-1.17x there, but
# up to 1.22x slower than rows on 1-3 KB rows from tables of a few KB.
FLAT_RULE_MAX_ROW = 512
# The rules' kinds for rows of one unit under 16 B (outputs over SHORT_CALL_OUT,
# 16-byte aligned), tried in order before scalar; empty: scalar.  With
# ("flatv", "flat") (flatv where the index count fills its chunks, else flat),
# the 1126 tuning geometries where the rules took scalar on such rows take
# 0.952x its time in geometric mean (tables in L2 0.68x-0.95x by unit, DRAM
# 0.97x-1.01x); plan by plan on an H100 the rules alone ran 1.022x over 190
# held-out plans.  The table is fitted under it (a rule change reranks its
# leaves): with the leaves of its earlier losers timed (seed 1025), the refit
# ran 1.031x over the 39 plans it changes; BENCHMARKS.md, "The one-unit rule,
# shipped".
ONE_UNIT_RULE: Tuple[str, ...] = ("flatv", "flat")
# elements: slots per thread (2 with 8 resident blocks beat 4 and 8).
ELEMENTS_ILP = 2
# elements_row (a data row staged in shared memory per output row): picks per
# thread whose indices are loaded before the row is staged.
ELEMENTS_ROW_PICKS = 4
# nd: rows per thread for rows of at most MAX_THREADS units (2 beat 1, 4, 8),
# units per thread along longer rows.
ND_SHORT_RU = 2
ND_LONG_CU = 4
# __launch_bounds__ minimum resident blocks of the fast32 rows kernels by
# unit width and of the chunks kernel (more threads, more loads in flight;
# the NVRTC tier checks that none spills).
ROWS_BLOCKS_U16 = 6
ROWS_BLOCKS_U8 = 5
ROWS_BLOCKS_NARROW = 8
CHUNKS_BLOCKS = 8
# quantized (GatherBlockQuantized): values per thread per chunk of a row.
# A chunk is QUANT_VALUES (16) values: one 8-byte load of 4-bit values, one
# 16-byte load of 8-bit ones; QUANT_WIDE_VALUES (32 4-bit values, one 16-byte
# load) is a variant the planner takes only when forced.  A chunk never spans
# two blocks, so a thread reads one scale and one zero point per chunk and
# row.  Rows per thread at most: QUANT_MAX_RU (all loads of up to that many
# rows are in flight before any math, as in the rows kernel).  __launch_bounds__
# minimum resident blocks of the row kernels: QUANT_BLOCKS_WRAP_CLIP for 2-byte
# outputs with int64 indices in wrap and clip mode, QUANT_BLOCKS otherwise (4
# spills there on sm_90 or sm_75 with some NVRTC from 12.2 on; the NVRTC tier
# checks that none spills).  Measured on an
# H200 (bench --quantized --variants, 262144 x 2304 4-bit table, block 32,
# 65536 indices, float16 out, wrap): 16 values x 4 rows at min 4 blocks
# 3.12 TB/s (75% of copy); at min 3 2.59; 32 values x 4 rows 1.92; 16 values
# x 2 rows 2.64; the 8-bit table at 16 x 4, min 4: 3.35 TB/s (80%).
QUANT_VALUES = 16
QUANT_WIDE_VALUES = 32
QUANT_MAX_RU = 4
QUANT_BLOCKS = 3
QUANT_BLOCKS_WRAP_CLIP = 4
# Blocks of a bounds-check kernel at most (a grid-stride loop does the rest).
CHECK_GRID_MAX = 4096

# Cache policy knobs of the kernels (1 = on):
#   STREAM_STORES  evict-first output stores (st.global.cs), leaving L2 to the table;
#   STREAM_INDICES evict-first index loads (measured 0.55x on inner_axis: kernels reread
#                  indices once per outer slice, and index tuples share sectors);
#   ND_SLICE_NO_L1 GatherND slices of two units or more skip L1 allocation (+4% on 1 KB,
#                  +14% on 128 B slices; the rows kernels measured 0% to -26% and keep it).
STREAM_STORES = 1
STREAM_INDICES = 0
ND_SLICE_NO_L1 = 1

#: ``#define`` lines rendered into every kernel source, by macro name.
KERNEL_DEFINES = {
    "CG_MAX_THREADS": MAX_THREADS,
    "CG_MAX_DIMS": MAX_DIMS,
    "CG_ROWS_NARROW_CU": ROWS_NARROW_CU,
    "CG_ROWS_MAX_RU": ROWS_MAX_RU,
    "CG_CHUNKS_CU": CHUNKS_CU,
    "CG_CHUNKS16_CU": CHUNKS16_CU,
    "CG_SCALAR_ILP": SCALAR_ILP,
    "CG_SLAB_ILP": SLAB_ILP,
    "CG_SLAB_WORD_U1": SLAB_WORD[1],
    "CG_SLAB_WORD_U2": SLAB_WORD[2],
    "CG_SLAB_WORD_U4": SLAB_WORD[4],
    "CG_SLAB_ALIGN": SLAB_ALIGN,
    "CG_STAGE_ILP": STAGE_ILP,
    "CG_WINDOW_ILP": WINDOW_ILP,
    "CG_PACK_ROWS": PACK_ROWS,
    "CG_PACK_ILP": PACK_ILP,
    "CG_WEAVE_RU": WEAVE_RU,
    "CG_WEAVE_LANES": WEAVE_LANES,
    "CG_WEAVE_EDGES": WEAVE_EDGES,
    "CG_SLABR_RU": SLABR_RU,
    "CG_SLABF_TILE": SLABF_TILE,
    "CG_SPAN_V": SPAN_V,
    "CG_ELEMENTS_ILP": ELEMENTS_ILP,
    "CG_ELEMENTS_ROW_PICKS": ELEMENTS_ROW_PICKS,
    "CG_ND_SHORT_RU": ND_SHORT_RU,
    "CG_ND_LONG_CU": ND_LONG_CU,
    "CG_STREAM_STORES": STREAM_STORES,
    "CG_STREAM_INDICES": STREAM_INDICES,
    "CG_ND_SLICE_NO_L1": ND_SLICE_NO_L1,
    "CG_QUANT_VALUES": QUANT_VALUES,
    "CG_QUANT_WIDE_VALUES": QUANT_WIDE_VALUES,
    "CG_QUANT_MAX_RU": QUANT_MAX_RU,
}
