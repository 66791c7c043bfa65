typedef long long i64; typedef unsigned long long u64; typedef unsigned int u32;
__device__ __forceinline__ u32 fdiv(u32 n, u32 m, u32 l) { return (__umulhi(m, n) + n) >> l; }

// write ceilings
extern "C" __global__ void w4(u32* p, u64 n) { for (u64 i = blockIdx.x*(u64)blockDim.x+threadIdx.x; i < n; i += (u64)gridDim.x*blockDim.x) p[i] = (u32)i; }
extern "C" __global__ void w4cs(u32* p, u64 n) { for (u64 i = blockIdx.x*(u64)blockDim.x+threadIdx.x; i < n; i += (u64)gridDim.x*blockDim.x) __stcs(p+i, (u32)i); }
extern "C" __global__ void w16(uint4* p, u64 n) { for (u64 i = blockIdx.x*(u64)blockDim.x+threadIdx.x; i < n; i += (u64)gridDim.x*blockDim.x) p[i] = make_uint4(i,i,i,i); }
extern "C" __global__ void w16cs(uint4* p, u64 n) { for (u64 i = blockIdx.x*(u64)blockDim.x+threadIdx.x; i < n; i += (u64)gridDim.x*blockDim.x) __stcs(p+i, make_uint4(i,i,i,i)); }
extern "C" __global__ void empty_k(int x) { }

// flat16: the output as 16-byte chunks of V = 16 / sizeof(U) units; a unit at flat
// position g is (row, u) = divmod(g, units), row is (o, n) = divmod(row, n_idx).
template <class U, class Idx, int V, int ILP, bool CS>
__device__ __forceinline__ void flat16(const char* data, const Idx* idx, char* out, u32 total,
    u32 units, u32 mu, u32 lu, u32 n_idx, u32 mn, u32 ln, i64 s_outer, i64 s_axis, i64 axis_len)
{
    const u32 chunks = (total + V - 1) / V;
    for (u32 base = blockIdx.x * blockDim.x * ILP + threadIdx.x; base < chunks; base += gridDim.x * blockDim.x * ILP) {
        U v[ILP][V];
        #pragma unroll
        for (int q = 0; q < ILP; ++q) {
            const u32 c = base + q * blockDim.x;
            if (c >= chunks) continue;
            u32 g = c * V;
            u32 row = fdiv(g, mu, lu); u32 u = g - row * units;
            u32 o = fdiv(row, mn, ln); u32 n = row - o * n_idx;
            i64 ii[V]; u32 uu[V]; u32 oo[V];
            #pragma unroll
            for (int k = 0; k < V; ++k) {
                uu[k] = u; oo[k] = o;
                ii[k] = (g + k < total) ? (i64)__ldg(idx + n) : 0;
                if (++u == units) { u = 0; if (++n == n_idx) { n = 0; ++o; } }
            }
            #pragma unroll
            for (int k = 0; k < V; ++k) {
                i64 i = ii[k]; if (i < 0) i += axis_len;
                v[q][k] = (g + k < total) ? __ldg((const U*)(data + (i64)oo[k] * s_outer + i * s_axis) + uu[k]) : U();
            }
        }
        #pragma unroll
        for (int q = 0; q < ILP; ++q) {
            const u32 c = base + q * blockDim.x;
            if (c >= chunks) continue;
            const u32 g = c * V;
            if (g + V <= total) {
                uint4 w; 
                U* t = (U*)&w;
                #pragma unroll
                for (int k = 0; k < V; ++k) t[k] = v[q][k];
                if (CS) __stcs((uint4*)out + c, w); else ((uint4*)out)[c] = w;
            } else {
                for (int k = 0; k < V; ++k) if (g + k < total) ((U*)out)[g + k] = v[q][k];
            }
        }
    }
}

#define FLAT(NAME, U, IDX, V, ILP, CS) extern "C" __global__ void __launch_bounds__(256) NAME(const char* data, const IDX* idx, char* out, u32 total, \
    u32 units, u32 mu, u32 lu, u32 n_idx, u32 mn, u32 ln, i64 s_outer, i64 s_axis, i64 axis_len) \
    { flat16<U, IDX, V, ILP, CS>(data, idx, out, total, units, mu, lu, n_idx, mn, ln, s_outer, s_axis, axis_len); }
FLAT(flat_u4_i64_1, u32, i64, 4, 1, true)
FLAT(flat_u4_i64_2, u32, i64, 4, 2, true)
FLAT(flat_u4_i64_1n, u32, i64, 4, 1, false)
FLAT(flat_u2_i64_1, unsigned short, i64, 8, 1, true)
FLAT(flat_u2_i64_2, unsigned short, i64, 8, 2, true)
FLAT(flat_u8_i64_1, u64, i64, 2, 1, true)
FLAT(flat_u8_i64_2, u64, i64, 2, 2, true)
FLAT(flat_u8_i64_4, u64, i64, 2, 4, true)
FLAT(flat_u4_i32_1, u32, int, 4, 1, true)
FLAT(flat_u4_i32_2, u32, int, 4, 2, true)

// slab with V consecutive indices per thread and V-unit stores where the row allows
template <class U, int V>
__device__ __forceinline__ void slabv(const U* table, const i64* idx, U* out, u32 outer, u32 axis_len, u32 n_idx)
{
    extern __shared__ __align__(16) unsigned char sm[];
    U* st = (U*)sm;
    for (u32 j = threadIdx.x; j < outer * axis_len; j += blockDim.x) st[j] = table[j];
    __syncthreads();
    for (u32 t = blockIdx.x * blockDim.x + threadIdx.x; t * V < n_idx; t += gridDim.x * blockDim.x) {
        const u32 n0 = t * V;
        u32 ii[V];
        #pragma unroll
        for (int k = 0; k < V; ++k) { i64 i = n0 + k < n_idx ? idx[n0 + k] : 0; if (i < 0) i += axis_len; ii[k] = (u32)i; }
        const U* src = st;
        U* dst = out + n0;
        for (u32 r = 0; r < outer; ++r) {
            U v[V];
            #pragma unroll
            for (int k = 0; k < V; ++k) v[k] = src[ii[k]];
            if ((((u64)dst) & 15) == 0 && n0 + V <= n_idx) {
                uint4 w; U* tt = (U*)&w;
                #pragma unroll
                for (int k = 0; k < V; ++k) tt[k] = v[k];
                __stcs((uint4*)dst, w);
            } else if ((((u64)dst) & 7) == 0 && n0 + V <= n_idx && V * sizeof(U) == 16) {
                uint2 w0, w1; U* t0 = (U*)&w0; U* t1 = (U*)&w1;
                #pragma unroll
                for (int k = 0; k < V / 2; ++k) { t0[k] = v[k]; t1[k] = v[k + V / 2]; }
                __stcs((uint2*)dst, w0); __stcs((uint2*)dst + 1, w1);
            } else {
                #pragma unroll
                for (int k = 0; k < V; ++k) if (n0 + k < n_idx) __stcs(dst + k, v[k]);
            }
            src += axis_len;
            dst += n_idx;
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) slabv_u4(const u32* table, const i64* idx, u32* out, u32 outer, u32 axis_len, u32 n_idx) { slabv<u32, 4>(table, idx, out, outer, axis_len, n_idx); }
extern "C" __global__ void __launch_bounds__(256) slabv_u8(const u64* table, const i64* idx, u64* out, u32 outer, u32 axis_len, u32 n_idx) { slabv<u64, 2>(table, idx, out, outer, axis_len, n_idx); }
struct Big { unsigned long long w[34]; };
extern "C" __global__ void empty_big(Big b) { if (b.w[33] == 12345) b.w[0] = 1; }
