// Kernels that exercise tests/hostsim/cuda_shim.h itself, so that the host
// tier cannot pass because the execution model is too lenient.  Built with
// hostsim.build.load_source and checked by tests/test_hostsim.py.

struct SelfArgs {
    const int* in;
    int* out;
    const unsigned long long* in64;
    unsigned long long* out64;
    int mode;
    int pad;
};

// Block-reverse through static shared memory: right only with a real barrier.
extern "C" __global__ void __launch_bounds__(256) st_reverse(const SelfArgs a)
{
    __shared__ int buf[256];
    const int t = threadIdx.x;
    const int base = blockIdx.x * blockDim.x;
    buf[t] = __ldg(a.in + base + t);
    __syncthreads();
    a.out[base + t] = buf[blockDim.x - 1 - t];
}

// Dynamic shared memory: rotate by one; thread 0 first records what the
// last slot held before anyone wrote it (the per-block poison).
extern "C" __global__ void st_dynamic(const SelfArgs a)
{
    CG_DYNAMIC_SMEM(int, buf);
    const int t = threadIdx.x;
    const int n = blockDim.x;
    const int base = blockIdx.x * n;
    if (t == 0) a.out[gridDim.x * n + blockIdx.x] = buf[n - 1];
    __syncthreads();
    buf[t] = __ldg(a.in + base + t);
    __syncthreads();
    a.out[base + t] = buf[(t + 1) % n];
}

// Warp collectives: six results per thread.
extern "C" __global__ void st_warp(const SelfArgs a)
{
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const int v = __ldg(a.in + g);
    int* o = a.out + 6 * g;
    o[0] = __shfl_sync(0xffffffffu, v, 3);
    o[1] = __shfl_up_sync(0xffffffffu, v, 1);
    o[2] = __shfl_down_sync(0xffffffffu, v, 2);
    o[3] = __shfl_xor_sync(0xffffffffu, v, 5);
    o[4] = (int)__ballot_sync(0xffffffffu, v & 1);
    o[5] = __syncthreads_count(v & 1);
}

// 32- and 64-bit high products, and an atomic minimum over the grid.
extern "C" __global__ void st_arith(const SelfArgs a)
{
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long x = __ldg(a.in64 + 2 * g), y = __ldg(a.in64 + 2 * g + 1);
    a.out64[3 * g] = __umulhi((unsigned int)x, (unsigned int)y);
    a.out64[3 * g + 1] = __umul64hi(x, y);
    atomicMin(a.out64 + 3 * gridDim.x * blockDim.x, x);
    a.out64[3 * g + 2] = 0;
}

// Misbehaviour the host tier must report, one per mode.
extern "C" __global__ void st_faulty(const SelfArgs a)
{
    const int t = threadIdx.x;
    if (a.mode == 0) {          // load before the input
        a.out[t] = __ldg(a.in + t - 1);
    } else if (a.mode == 1) {   // barrier reached by part of the block
        if (t < 5) __syncthreads();
    } else if (a.mode == 2) {   // wild store
        if (t == 7) *(volatile int*)(unsigned long)16 = 1;
    } else if (a.mode == 3) {   // misaligned 16-byte load
        const uint4 v = __ldg((const uint4*)((const char*)a.in + 4));
        a.out[t] = (int)v.x;
    } else if (a.mode == 4) {   // shuffle waiting for lanes that exited
        if ((t & 31) < 16) a.out[t] = __shfl_sync(0xffffffffu, t, 0);
    } else if (a.mode == 5) {   // atomic outside the outputs
        atomicMin((unsigned long long*)(a.out64 - 1), 0ull);
    }
}
