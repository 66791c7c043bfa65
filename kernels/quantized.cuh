// cugather device code: GatherBlockQuantized (onnxruntime's com.microsoft
// contrib operator) -- gather rows of a block-quantized uint8 table (two 4-bit
// values per byte, low nibble first, or one 8-bit value) and dequantize them
// in the same pass: out = cast(float(q - zero_point) * float(scale)), the
// product in float32 and rounded once to the output type, as onnxruntime's CPU
// kernel computes it.  The bodies of the extern "C" entry points rendered from
// templates/gather.cu.j2; common.cuh comes first.
//
// U is the output element's storage (unsigned short: float16 or bfloat16 by
// kind, unsigned int: float32), Idx the index element type, MODE the
// out-of-range policy.  Shapes travel in QuantArgs, so one kernel serves
// every table.
#ifndef CUGATHER_QUANTIZED_CUH
#define CUGATHER_QUANTIZED_CUH

#if !defined(CG_QUANT_VALUES) || !defined(CG_QUANT_WIDE_VALUES) || !defined(CG_QUANT_MAX_RU)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

namespace cg {

// A chunk of CG_QUANT_VALUES values starting at a multiple of it lies in one
// block (block sizes are powers of two of at least 16), so a thread reads one
// scale and one zero point per chunk.
static_assert(CG_QUANT_VALUES == 16, "a chunk is 16 values: 8 packed bytes (4-bit) or 16 (8-bit)");

// Argument struct, passed by value (cugather/plan/layout.py mirrors it).
//
// The logical table (values unpacked) is viewed as (G, m1, nq, m2): G rows
// along the gather axis (axis 0), nq values along the quantize axis, m1 and m2
// the merged axes between and after them (m2 = 1 when the quantize axis is the
// last).  The output is (N, m1, nq, m2) for N index values.  scales is
// (G, m1, nb, m2) with nb = ceil(nq / block); zero_points (null when absent)
// is (G, m1, nzq, m2) with nzq = nb (8-bit) or ceil(nb / 2) (4-bit, two per
// byte along the quantize axis, low nibble first).  Everything C-contiguous.
struct QuantArgs {
    const unsigned char* data;
    const void* indices;
    char* out;
    u64* first_bad;  // raise mode: atomicMin of the positions of out-of-range indices
    const void* scales;
    const unsigned char* zero_points;  // null: the default zero point
    u64 rows;        // rows kernel: N * m1 output rows of nq values
    u64 total;       // general kernel: output elements
    i64 axis_len;    // G
    u64 m1;
    u64 nq;          // values along the quantize axis
    u64 m2;
    u64 nb;          // blocks along the quantize axis
    u64 nzq;         // zero-point units along the quantize axis
    u64 row_bytes;   // packed bytes of one data row of nq values (rows kernel)
    u64 chunks;      // chunks of CG_QUANT_VALUES values per row (rows kernel)
    Divisor m1_div;
    Divisor nq_div;
    Divisor m2_div;
    u32 bits;        // 4 or 8
    u32 log2_block;
    u32 default_zp;  // 1 << (bits - 1): onnxruntime's zero point for uint8 data without one
    u32 vec;         // rows kernel: 1 when rows and bases allow one load per chunk and 16-byte stores
    u32 values;      // rows kernel with vec: values per chunk (CG_QUANT_VALUES or CG_QUANT_WIDE_VALUES)
    u32 row_unroll;  // rows kernel with vec: rows per thread, 1 .. CG_QUANT_MAX_RU
    u64 fill[2];
};

// ---------------------------------------------------------------------------
// Bit casts and conversions, exact on every path: the host tier runs the
// portable versions, the device the PTX ones, and both round to nearest even.
// ---------------------------------------------------------------------------
__device__ __forceinline__ float bits_float(u32 b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

__device__ __forceinline__ u32 float_bits(float f)
{
    u32 b;
    memcpy(&b, &f, 4);
    return b;
}

// float16 bits -> float (exact; subnormals, infinities and NaN kept).
__device__ __forceinline__ float half_float(u32 h)
{
    const u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
        return bits_float(float_bits(v) | sign);
    }
    if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ float bf16_float(u32 h) { return bits_float(h << 16); }

// float -> float16 bits, round to nearest even (as cvt.rn.f16.f32 and numpy).
__device__ __forceinline__ u32 float_half_soft(float f)
{
    const u32 x = float_bits(f);
    const u32 sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
    if (ax < 0x38800000u) {                          // below 2^-14: a subnormal or zero
        if (ax < 0x33000000u) return sign;           // below 2^-25 rounds to 0
        const u32 e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        u32 q = m >> shift;
        const u32 rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        return sign | q;
    }
    const u32 r = ax - 0x38000000u;  // exponent rebased from 127 to 15
    u32 q = r >> 13;
    const u32 rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    return sign | q;
}

// float -> bfloat16 bits, round to nearest even (as cvt.rn.bf16.f32 and ml_dtypes).
__device__ __forceinline__ u32 float_bf16_soft(float f)
{
    const u32 x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // quiet NaN
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

// Output types: one(v) is one element's bits, two(lo, hi) two 2-byte elements
// packed low first (one conversion instruction for both on sm_80 and later).
struct OutF32 {
    typedef unsigned int T;
    static __device__ __forceinline__ T one(float v) { return float_bits(v); }
};

struct OutF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ T one(float v)
    {
#if defined(__CUDA_ARCH__)
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
#else
        return (T)float_half_soft(v);
#endif
    }
    static __device__ __forceinline__ u32 two(float lo, float hi)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        u32 d;  // the first source goes to the upper half
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
        return d;
#else
        return (u32)one(lo) | ((u32)one(hi) << 16);
#endif
    }
};

struct OutBF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ T one(float v)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
#else
        return (T)float_bf16_soft(v);
#endif
    }
    static __device__ __forceinline__ u32 two(float lo, float hi)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        u32 d;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
        return d;
#else
        return (u32)one(lo) | ((u32)one(hi) << 16);
#endif
    }
};

template <class O>
__device__ __forceinline__ float load_scale(const void* scales, u64 i);

template <>
__device__ __forceinline__ float load_scale<OutF32>(const void* scales, u64 i)
{
    return __ldg((const float*)scales + i);
}

template <>
__device__ __forceinline__ float load_scale<OutF16>(const void* scales, u64 i)
{
    return half_float(__ldg((const unsigned short*)scales + i));
}

template <>
__device__ __forceinline__ float load_scale<OutBF16>(const void* scales, u64 i)
{
    return bf16_float(__ldg((const unsigned short*)scales + i));
}

// The block's dequantization: value(q) = float(q - zp) * scale.  q - zp is
// formed exactly without an int-to-float conversion: 2^23 + q as a float is
// the bit pattern 0x4b000000 | q, and (2^23 + q) - (2^23 + zp) is exact.
struct Dequant {
    float base;   // 2^23 + zp
    float scale;
    __device__ __forceinline__ float operator()(u32 q) const
    {
        return (bits_float(0x4b000000u | q) - base) * scale;
    }
};

// Block `blk` of the zero points at unit offset `row` * nzq (+ m2 steps folded in
// by the caller through `at`): a nibble (4-bit) or a byte (8-bit).
__device__ __forceinline__ u32 zero_point(const QuantArgs& a, u64 at, u64 blk)
{
    if (!a.zero_points) return a.default_zp;
    if (a.bits == 4) {
        const u32 b = __ldg(a.zero_points + at);
        return (blk & 1u) ? (b >> 4) : (b & 15u);
    }
    return __ldg(a.zero_points + at);
}

// The fill value's element, for rows whose index takes the fill path.
template <class O>
__device__ __forceinline__ typename O::T fill_element(const u64 (&fill)[2])
{
    return fill_unit<typename O::T>(fill);
}

// ---------------------------------------------------------------------------
// rows: the quantize axis is the last (m2 = 1).  Output row r = n * m1 + b
// (index position n, merged middle position b) is data row idx * m1 + b.  A
// block is a (TX, TY) grid of threads: TX threads per row, each moving chunks
// tx, tx + TX, ... of a.values values (V) of up to a.row_unroll rows (RU:
// rows rt, rt + TY, ...), TY * RU rows per block tile, tiles over blockIdx.x
// -- the layout of copy_rows in common.cuh.
//
// With a.vec a chunk is one aligned load (V = 16 4-bit values: 8 bytes; 32:
// 16 bytes; 16 8-bit values: 16 bytes) and 16-byte streaming stores; every
// row's index is read first, then every row's packed bytes, scale and zero
// point, and only then the math and the stores, so RU loads of each kind are
// in flight per thread.  The plan keeps V <= block_size, so a chunk lies in
// one block: one scale and one zero point per chunk and row.  Without a.vec
// (misaligned operands, rows that are no multiple of a load) chunks of
// CG_QUANT_VALUES values take byte loads and element stores, bounded by the
// row's end, one row per thread.
// ---------------------------------------------------------------------------
static_assert(CG_QUANT_WIDE_VALUES == 32, "wide chunks are 32 4-bit values: one 16-byte load");

// Packed bytes of one chunk of V BITS-bit values, as 32-bit words.
template <int BITS, int V>
struct Packed {
    enum { BYTES = V * BITS / 8, WORDS = BYTES / 4 };
    u32 w[WORDS];
    __device__ __forceinline__ void load(const unsigned char* p)
    {
        if (BYTES == 8) {
            const uint2 q = __ldg((const uint2*)p);
            w[0] = q.x;
            w[1 % WORDS] = q.y;
        } else {
#pragma unroll
            for (int k = 0; k < BYTES / 16; ++k) {
                const uint4 q = __ldg((const uint4*)p + k);
                w[(4 * k) % WORDS] = q.x;
                w[(4 * k + 1) % WORDS] = q.y;
                w[(4 * k + 2) % WORDS] = q.z;
                w[(4 * k + 3) % WORDS] = q.w;
            }
        }
    }
    // Code of value k (low nibble first).
    __device__ __forceinline__ u32 code(int k) const
    {
        return BITS == 4 ? (w[k >> 3] >> (4 * (k & 7))) & 15u : (w[k >> 2] >> (8 * (k & 3))) & 255u;
    }
};

// Values k0 .. k0 + 8 (2-byte outputs: one 16-byte store) or k0 .. k0 + 4 (4-byte).
template <class O, class P>
__device__ __forceinline__ void store_values(unsigned short* dst, const P& p, int k0,
                                             const Dequant& dq)
{
    store_stream((uint4*)(dst + k0),
                 make_uint4(O::two(dq(p.code(k0)), dq(p.code(k0 + 1))),
                            O::two(dq(p.code(k0 + 2)), dq(p.code(k0 + 3))),
                            O::two(dq(p.code(k0 + 4)), dq(p.code(k0 + 5))),
                            O::two(dq(p.code(k0 + 6)), dq(p.code(k0 + 7)))));
}

template <class O, class P>
__device__ __forceinline__ void store_values(unsigned int* dst, const P& p, int k0,
                                             const Dequant& dq)
{
    store_stream((uint4*)(dst + k0), make_uint4(O::one(dq(p.code(k0))), O::one(dq(p.code(k0 + 1))),
                                                O::one(dq(p.code(k0 + 2))),
                                                O::one(dq(p.code(k0 + 3)))));
}

// V fill values from dst on (a multiple of 16 bytes).
template <class T, int V>
__device__ __forceinline__ void fill_values(T* dst, const u64 (&fill)[2])
{
    const uint4 f = fill_unit<uint4>(fill);  // the element repeated over 16 bytes
#pragma unroll
    for (int k = 0; k < V * (int)sizeof(T) / 16; ++k) store_stream((uint4*)dst + k, f);
}

// Block blk's zero point of data row `row`: a nibble (4-bit) or a byte (8-bit).
template <int BITS>
__device__ __forceinline__ u32 zero_point_of(const QuantArgs& a, u64 row, u64 blk)
{
    if (!a.zero_points) return a.default_zp;
    if (BITS == 4) {
        const u32 b = __ldg(a.zero_points + row * a.nzq + (blk >> 1));
        return (blk & 1u) ? (b >> 4) : (b & 15u);
    }
    return __ldg(a.zero_points + row * a.nzq + blk);
}

template <class O, class Idx, int MODE, int BITS, int V>
__device__ __forceinline__ void quant_rows_vec(const QuantArgs& a)
{
    typedef typename O::T T;
    typedef Packed<BITS, V> P;
    enum { RU = CG_QUANT_MAX_RU };
    const int ru = (int)a.row_unroll;
    const u64 ty = blockDim.y, tx = blockDim.x, row_tile = ty * (u64)ru;
    // Chunks outside, rows inside: nothing row-dependent stays live across
    // iterations (rows of up to TX chunks, the common case, take one chunk step).
    for (u64 c = threadIdx.x; c < a.chunks; c += tx) {
        const u64 blk = (c * V) >> a.log2_block;
        for (u64 rt = (u64)blockIdx.x * row_tile + threadIdx.y; rt < a.rows;
             rt += (u64)gridDim.x * row_tile) {
            i64 idx[RU];
            bool live[RU], ok[RU];
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {  // every row's index load first
                const u64 r = rt + (u64)kr * ty;
                live[kr] = kr < ru && r < a.rows;
                idx[kr] = live[kr] ? load_index((const Idx*)a.indices + Math64::div(a.m1_div, r)) : 0;
            }
            P p[RU];
            Dequant dq[RU];
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {  // then every row's packed bytes, scale, zero point
                const u64 r = rt + (u64)kr * ty;
                u64 n, b;  // recomputed: fewer live registers than keeping them
                divmod<Math64>(a.m1_div, r, n, b);
                i64 i = idx[kr];
                ok[kr] = live[kr] && resolve_checked<MODE>(i, a.axis_len, a.first_bad, n);
                const u64 row = (u64)i * a.m1 + b;
                if (ok[kr]) {
                    p[kr].load(a.data + row * a.row_bytes + c * P::BYTES);
                    dq[kr].scale = load_scale<O>(a.scales, row * a.nb + blk);
                    dq[kr].base = 8388608.0f + (float)zero_point_of<BITS>(a, row, blk);
                }
            }
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {  // then the math and the stores
                if (!live[kr]) continue;
                T* dst = (T*)a.out + (rt + (u64)kr * ty) * a.nq + c * V;
                if (may_skip<MODE>() && !ok[kr]) {
                    fill_values<T, V>(dst, a.fill);
                    continue;
                }
#pragma unroll
                for (int k = 0; k < V; k += 16 / (int)sizeof(T)) store_values<O>(dst, p[kr], k, dq[kr]);
            }
        }
    }
}

// Chunk c of CG_QUANT_VALUES values of a row whose packed bytes start at
// `src`, one byte and one element at a time, up to the row's nq values.
template <class O>
__device__ __forceinline__ void dequant_chunk_scalar(const QuantArgs& a, const unsigned char* src,
                                                     u64 c, const Dequant& dq, typename O::T* dst)
{
    const u64 first = c * CG_QUANT_VALUES;
#pragma unroll
    for (int k = 0; k < CG_QUANT_VALUES; ++k) {
        const u64 v = first + (u64)k;
        if (v < a.nq) {
            const u32 q = a.bits == 4 ? ((u32)__ldg(src + (v >> 1)) >> (4 * (u32)(v & 1u))) & 15u
                                      : (u32)__ldg(src + v);
            store_stream(dst + k, O::one(dq(q)));
        }
    }
}

template <class O>
__device__ __forceinline__ void fill_chunk_scalar(const QuantArgs& a, u64 c, typename O::T* dst)
{
    const typename O::T f = fill_element<O>(a.fill);
#pragma unroll
    for (int k = 0; k < CG_QUANT_VALUES; ++k)
        if (c * CG_QUANT_VALUES + (u64)k < a.nq) store_stream(dst + k, f);
}

template <class O, class Idx, int MODE>
__device__ __forceinline__ void quant_rows_scalar(const QuantArgs& a)
{
    typedef typename O::T T;
    const u64 ty = blockDim.y, tx = blockDim.x;
    for (u64 r = (u64)blockIdx.x * ty + threadIdx.y; r < a.rows; r += (u64)gridDim.x * ty) {
        u64 n, b;
        divmod<Math64>(a.m1_div, r, n, b);
        i64 i = load_index((const Idx*)a.indices + n);
        const bool ok = resolve_checked<MODE>(i, a.axis_len, a.first_bad, n);
        T* out_row = (T*)a.out + r * a.nq;
        if (may_skip<MODE>() && !ok) {  // raise mode's bad rows too: nothing is read
            for (u64 c = threadIdx.x; c < a.chunks; c += tx)
                fill_chunk_scalar<O>(a, c, out_row + c * CG_QUANT_VALUES);
            continue;
        }
        const u64 row = (u64)i * a.m1 + b;
        const unsigned char* src = a.data + row * a.row_bytes;
        for (u64 c = threadIdx.x; c < a.chunks; c += tx) {
            const u64 blk = (c * CG_QUANT_VALUES) >> a.log2_block;
            Dequant dq;
            dq.base = 8388608.0f + (float)zero_point(a, row * a.nzq + (a.bits == 4 ? blk >> 1 : blk), blk);
            dq.scale = load_scale<O>(a.scales, row * a.nb + blk);
            dequant_chunk_scalar<O>(a, src, c, dq, out_row + c * CG_QUANT_VALUES);
        }
    }
}

template <class O, class Idx, int MODE>
__device__ __forceinline__ void quant_rows(const QuantArgs& a)
{
    // a.vec, a.bits and a.values are uniform across the grid: no branch diverges.
    if (!a.vec) quant_rows_scalar<O, Idx, MODE>(a);
    else if (a.bits == 8) quant_rows_vec<O, Idx, MODE, 8, CG_QUANT_VALUES>(a);
    else if (a.values == CG_QUANT_WIDE_VALUES) quant_rows_vec<O, Idx, MODE, 4, CG_QUANT_WIDE_VALUES>(a);
    else quant_rows_vec<O, Idx, MODE, 4, CG_QUANT_VALUES>(a);
}

// ---------------------------------------------------------------------------
// general: any quantize axis (m2 >= 1).  One output element per thread and
// step of a grid-stride loop: its position splits into (n, b, j, k) over
// (N, m1, nq, m2), the data element is (idx, b, j, k), its block j >> log2_block.
// ---------------------------------------------------------------------------
template <class O, class Idx, int MODE>
__device__ __forceinline__ void quant_general(const QuantArgs& a)
{
    typedef typename O::T T;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < a.total; t += step) {
        u64 rest, k, j, n, b;
        divmod<Math64>(a.m2_div, t, rest, k);
        divmod<Math64>(a.nq_div, rest, rest, j);
        divmod<Math64>(a.m1_div, rest, n, b);
        i64 i = load_index((const Idx*)a.indices + n);
        const bool ok = resolve_checked<MODE>(i, a.axis_len, a.first_bad, n);
        if (may_skip<MODE>() && !ok) {
            store_stream((T*)a.out + t, fill_element<O>(a.fill));
            continue;
        }
        const u64 row = (u64)i * a.m1 + b;
        const u64 e = (row * a.nq + j) * a.m2 + k;  // logical element of the table
        const u64 blk = j >> a.log2_block;
        const u64 zat = (row * a.nzq + (a.bits == 4 ? blk >> 1 : blk)) * a.m2 + k;
        Dequant dq;
        dq.base = 8388608.0f + (float)zero_point(a, zat, blk);
        dq.scale = load_scale<O>(a.scales, (row * a.nb + blk) * a.m2 + k);
        const u32 q = a.bits == 4 ? ((u32)__ldg(a.data + (e >> 1)) >> (4 * (u32)(e & 1u))) & 15u
                                  : (u32)__ldg(a.data + e);
        store_stream((T*)a.out + t, O::one(dq(q)));
    }
}

// Entry points: U = unsigned short is float16, unsigned int float32; the bf16
// kinds take unsigned short as bfloat16.
template <class U> struct OutOf;
template <> struct OutOf<unsigned short> { typedef OutF16 type; };
template <> struct OutOf<unsigned int> { typedef OutF32 type; };

template <class U, class Idx, int MODE>
__device__ __forceinline__ void gather_quantized(const QuantArgs& a)
{
    quant_rows<typename OutOf<U>::type, Idx, MODE>(a);
}

template <class U, class Idx, int MODE>
__device__ __forceinline__ void gather_quantized_bf16(const QuantArgs& a)
{
    quant_rows<OutBF16, Idx, MODE>(a);
}

template <class U, class Idx, int MODE>
__device__ __forceinline__ void gather_quantized_general(const QuantArgs& a)
{
    quant_general<typename OutOf<U>::type, Idx, MODE>(a);
}

template <class U, class Idx, int MODE>
__device__ __forceinline__ void gather_quantized_general_bf16(const QuantArgs& a)
{
    quant_general<OutBF16, Idx, MODE>(a);
}

}  // namespace cg

#endif  // CUGATHER_QUANTIZED_CUH
