// A small CUDA execution model for the host C++ compiler.
//
// The kernels' rendered source is compiled unchanged after this header.  Each
// CUDA thread of a block is a ucontext fiber with its own stack, so local
// variables are per thread and __syncthreads() is a real barrier; blocks run
// one after another on the calling OS thread.  Block-shared memory is a
// `static` (one block is live at a time); dynamic shared memory is a buffer
// poisoned at the start of every block, ending right at an inaccessible page.
//
// Checks a GPU would make (or silently get wrong) become launch errors:
// loads through __ldg outside the registered readable ranges, stores through
// __st* intrinsics and atomics outside the writable ranges, divergent or
// deadlocked barriers, warp operations with a lane that has exited, and
// memory faults (caught with a signal handler and reported, not a crash).
#ifndef CUGATHER_HOSTSIM_CUDA_SHIM_H
#define CUGATHER_HOSTSIM_CUDA_SHIM_H

#include <csetjmp>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

// ---------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static   // one block is live at a time
#define __constant__ static
#define CGSIM_EXPORT extern "C" __attribute__((visibility("default")))

// Dynamic shared memory: the launch's buffer, poisoned per block.
#define CG_DYNAMIC_SMEM(type, name) type* const name = reinterpret_cast<type*>(::cgsim::dynamic_smem)

// ---------------------------------------------------------------------------
// Vector types (CUDA's sizes and alignments)
// ---------------------------------------------------------------------------
#define CGSIM_VEC2(T, name, al) \
    struct __align__(al) name { T x, y; }; \
    static inline name make_##name(T x, T y) { name v; v.x = x; v.y = y; return v; }
#define CGSIM_VEC4(T, name, al) \
    struct __align__(al) name { T x, y, z, w; }; \
    static inline name make_##name(T x, T y, T z, T w) { name v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
CGSIM_VEC2(signed char, char2, 2)
CGSIM_VEC4(signed char, char4, 4)
CGSIM_VEC2(unsigned char, uchar2, 2)
CGSIM_VEC4(unsigned char, uchar4, 4)
CGSIM_VEC2(short, short2, 4)
CGSIM_VEC4(short, short4, 8)
CGSIM_VEC2(unsigned short, ushort2, 4)
CGSIM_VEC4(unsigned short, ushort4, 8)
CGSIM_VEC2(int, int2, 8)
CGSIM_VEC4(int, int4, 16)
CGSIM_VEC2(unsigned int, uint2, 8)
CGSIM_VEC4(unsigned int, uint4, 16)
CGSIM_VEC2(long long, longlong2, 16)
CGSIM_VEC2(unsigned long long, ulonglong2, 16)
CGSIM_VEC2(float, float2, 8)
CGSIM_VEC4(float, float4, 16)
CGSIM_VEC2(double, double2, 16)
#undef CGSIM_VEC2
#undef CGSIM_VEC4

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

static uint3 threadIdx;
static uint3 blockIdx;
static dim3 blockDim;
static dim3 gridDim;
static const int warpSize = 32;

// ---------------------------------------------------------------------------
// Execution state
// ---------------------------------------------------------------------------
namespace cgsim {

typedef unsigned long long u64;

enum { READY = 0, AT_BARRIER = 1, AT_WARP = 2, DONE = 3 };
enum { MAX_BLOCK = 1024, STACK_BYTES = 256 * 1024, MAX_RANGES = 8, ERR_BYTES = 2048 };

struct Fiber {
    ucontext_t ctx;
    char* stack;       // STACK_BYTES usable, one guard page below
    int state;
    unsigned warp_mask;  // lanes a pending warp operation waits for
};

struct Range { u64 lo, hi; };

static Fiber* fibers;              // MAX_BLOCK of them, stacks mapped on first use
static ucontext_t scheduler;
static int current;                // linear thread index of the running fiber
static int n_threads;
static void (*kernel_fn)(const void*);
static const void* kernel_args;
static unsigned char* dynamic_smem;
static size_t dynamic_bytes;
static u64 exchange[MAX_BLOCK];    // values passed by warp and block collectives
static Range readable[MAX_RANGES], writable[MAX_RANGES];
static int n_readable, n_writable;  // 0: unchecked
static char error[ERR_BYTES];
static bool failed;
static sigjmp_buf fault_return;
static volatile sig_atomic_t in_kernel;
static volatile void* fault_address;
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

struct Hold {  // <mutex> would double the compile time of every library
    Hold() { pthread_mutex_lock(&launch_lock); }
    ~Hold() { pthread_mutex_unlock(&launch_lock); }
};

static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char* fmt, ...)
{
    if (failed) return;  // the first error is the one to read
    failed = true;
    int n = snprintf(error, ERR_BYTES, "block (%u,%u,%u) thread (%u,%u,%u): ", blockIdx.x,
                     blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error + n, ERR_BYTES - n, fmt, ap);
    va_end(ap);
}

static bool in_ranges(const Range* r, int n, const void* p, size_t bytes)
{
    const u64 lo = (u64)(uintptr_t)p, hi = lo + bytes;
    for (int i = 0; i < n; ++i)
        if (lo >= r[i].lo && hi <= r[i].hi) return true;
    return false;
}

template <class T>
static inline T checked_load(const T* p, const char* what)
{
    if ((uintptr_t)p % alignof(T)) {  // a GPU faults on a misaligned access
        fail("%s reads %zu bytes at %p, misaligned (not a multiple of %zu)", what, sizeof(T), (const void*)p,
             alignof(T));
        T zero;
        memset(&zero, 0, sizeof zero);
        return zero;
    }
    if (n_readable && !in_ranges(readable, n_readable, p, sizeof(T))) {
        fail("%s reads %zu bytes at %p, outside every input buffer", what, sizeof(T), (const void*)p);
        T zero;
        memset(&zero, 0, sizeof zero);
        return zero;
    }
    return *p;
}

template <class T>
static inline bool store_ok(T* p, const char* what)
{
    if ((uintptr_t)p % alignof(T)) {
        fail("%s writes %zu bytes at %p, misaligned (not a multiple of %zu)", what, sizeof(T), (void*)p,
             alignof(T));
        return false;
    }
    if (n_writable && !in_ranges(writable, n_writable, p, sizeof(T))) {
        fail("%s writes %zu bytes at %p, outside every output buffer", what, sizeof(T), (void*)p);
        return false;
    }
    return true;
}

static inline int lane() { return current & 31; }

// Hand control back to the scheduler until it makes this fiber READY again.
static void wait(int state)
{
    fibers[current].state = state;
    swapcontext(&fibers[current].ctx, &scheduler);
}

static void syncthreads() { wait(AT_BARRIER); }

// Lanes of the calling warp that exist in this block.
static unsigned warp_lanes()
{
    const int first = current & ~31;
    const int n = n_threads - first < 32 ? n_threads - first : 32;
    return n == 32 ? 0xffffffffu : ((1u << n) - 1u);
}

static void syncwarp(unsigned mask)
{
    if (!(mask >> lane() & 1u)) fail("warp operation with mask 0x%08x excludes the calling lane", mask);
    fibers[current].warp_mask = mask & warp_lanes();
    wait(AT_WARP);
}

// Every lane of `mask` publishes `v`; returns the values of the whole warp.
static const u64* warp_exchange(unsigned mask, u64 v)
{
    exchange[current] = v;
    syncwarp(mask);
    return exchange + (current & ~31);
}

template <class T>
static inline u64 to_bits(T v)
{
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    u64 b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
static inline T from_bits(u64 b)
{
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T>
static T shuffle(unsigned mask, T var, int src, int width)
{
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fail("shuffle width %d is not a power of two in [1, 32]", width);
    const u64* w = warp_exchange(mask, to_bits(var));
    T r = var;
    if (src >= 0) {
        const int base = lane() & ~(width - 1);
        const int from = base + (src & (width - 1));
        if (!((mask & warp_lanes()) >> from & 1u))
            fail("shuffle reads lane %d, which is not in mask 0x%08x", from, mask);
        else
            r = from_bits<T>(w[from]);
    }
    syncwarp(mask);  // nobody overwrites a slot before every lane has read
    return r;
}

static u64 block_reduce(int pred, int op)  // 0: count, 1: and, 2: or
{
    exchange[current] = pred != 0;
    syncthreads();
    u64 acc = op == 1 ? 1 : 0;
    for (int t = 0; t < n_threads; ++t)
        acc = op == 0 ? acc + exchange[t] : op == 1 ? (acc & exchange[t]) : (acc | exchange[t]);
    syncthreads();
    return acc;
}

}  // namespace cgsim

// ---------------------------------------------------------------------------
// Device functions
// ---------------------------------------------------------------------------
static inline void __syncthreads() { cgsim::syncthreads(); }
static inline int __syncthreads_count(int p) { return (int)cgsim::block_reduce(p, 0); }
static inline int __syncthreads_and(int p) { return (int)cgsim::block_reduce(p, 1); }
static inline int __syncthreads_or(int p) { return (int)cgsim::block_reduce(p, 2); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { cgsim::syncwarp(mask); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

template <class T>
static inline T __shfl_sync(unsigned mask, T var, int src, int width = 32)
{
    return cgsim::shuffle(mask, var, src, width);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32)
{
    const int l = cgsim::lane() & (width - 1);
    const int src = l >= (int)delta ? (cgsim::lane() - (int)delta) : -1;  // keep own value
    return cgsim::shuffle(mask, var, src, width);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32)
{
    const int l = cgsim::lane() & (width - 1);
    const int src = l + (int)delta < width ? (cgsim::lane() + (int)delta) : -1;
    return cgsim::shuffle(mask, var, src, width);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32)
{
    return cgsim::shuffle(mask, var, cgsim::lane() ^ lane_mask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    const cgsim::u64* w = cgsim::warp_exchange(mask, pred != 0);
    unsigned r = 0;
    const unsigned live = mask & cgsim::warp_lanes();
    for (int l = 0; l < 32; ++l)
        if ((live >> l & 1u) && w[l]) r |= 1u << l;
    cgsim::syncwarp(mask);
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred)
{
    return __ballot_sync(mask, pred) == (mask & cgsim::warp_lanes());
}

static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift)
{
    return (unsigned int)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift)
{
    return (unsigned int)(((((unsigned long long)hi << 32) | lo) << (shift & 31u)) >> 32);
}
static inline long long __mul64hi(long long a, long long b)
{
    return (long long)(((__int128)a * b) >> 64);
}

// Read-only and cache-hinted loads: checked against the readable ranges.
template <class T> static inline T __ldg(const T* p) { return cgsim::checked_load(p, "__ldg"); }
template <class T> static inline T __ldca(const T* p) { return cgsim::checked_load(p, "__ldca"); }
template <class T> static inline T __ldcg(const T* p) { return cgsim::checked_load(p, "__ldcg"); }
template <class T> static inline T __ldcs(const T* p) { return cgsim::checked_load(p, "__ldcs"); }
template <class T> static inline T __ldlu(const T* p) { return cgsim::checked_load(p, "__ldlu"); }
template <class T> static inline T __ldcv(const T* p) { return cgsim::checked_load(p, "__ldcv"); }
#define CGSIM_STORE(name) \
    template <class T> static inline void name(T* p, T v) { if (cgsim::store_ok(p, #name)) *p = v; }
CGSIM_STORE(__stwb)
CGSIM_STORE(__stcg)
CGSIM_STORE(__stcs)
CGSIM_STORE(__stwt)
#undef CGSIM_STORE

// Atomics: fibers of one launch share an OS thread and switch only at
// barriers, so a plain read-modify-write is atomic here.
#define CGSIM_ATOMIC(name, T, expr) \
    static inline T name(T* p, T v) { \
        if (!cgsim::store_ok(p, #name)) return (T)0; \
        T old = *p; *p = (expr); return old; \
    }
#define CGSIM_ATOMIC_INT(T) \
    CGSIM_ATOMIC(atomicAdd, T, old + v) \
    CGSIM_ATOMIC(atomicSub, T, old - v) \
    CGSIM_ATOMIC(atomicExch, T, v) \
    CGSIM_ATOMIC(atomicMin, T, v < old ? v : old) \
    CGSIM_ATOMIC(atomicMax, T, v > old ? v : old) \
    CGSIM_ATOMIC(atomicAnd, T, old & v) \
    CGSIM_ATOMIC(atomicOr, T, old | v) \
    CGSIM_ATOMIC(atomicXor, T, old ^ v) \
    static inline T atomicCAS(T* p, T cmp, T v) { \
        if (!cgsim::store_ok(p, "atomicCAS")) return (T)0; \
        T old = *p; if (old == cmp) *p = v; return old; \
    }
CGSIM_ATOMIC_INT(int)
CGSIM_ATOMIC_INT(unsigned int)
CGSIM_ATOMIC_INT(long long)
CGSIM_ATOMIC_INT(unsigned long long)
CGSIM_ATOMIC(atomicAdd, float, old + v)
CGSIM_ATOMIC(atomicAdd, double, old + v)
CGSIM_ATOMIC(atomicExch, float, v)
#undef CGSIM_ATOMIC_INT
#undef CGSIM_ATOMIC

// ---------------------------------------------------------------------------
// The launcher
// ---------------------------------------------------------------------------
namespace cgsim {

static void fiber_main()
{
    kernel_fn(kernel_args);
    fibers[current].state = DONE;  // uc_link returns to the scheduler
}

static void on_fault(int sig, siginfo_t* info, void*)
{
    if (!in_kernel) {  // not ours: die as the default action would
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    fault_address = info->si_addr;
    siglongjmp(fault_return, sig);
}

static bool map_stack(Fiber& f)
{
    if (f.stack) return true;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void* m = mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    mprotect(m, page, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    f.stack = (char*)m + page;
    return true;
}

static const char* state_name(int s)
{
    return s == READY ? "running" : s == AT_BARRIER ? "__syncthreads" : s == AT_WARP ? "warp op" : "exited";
}

// Releases what can be released; false when the block can make no progress.
static bool release_waiters()
{
    int at_barrier = 0, done = 0;
    for (int t = 0; t < n_threads; ++t) {
        at_barrier += fibers[t].state == AT_BARRIER;
        done += fibers[t].state == DONE;
    }
    bool released = false;
    if (at_barrier == n_threads) {
        for (int t = 0; t < n_threads; ++t) fibers[t].state = READY;
        return true;
    }
    for (int w = 0; w < n_threads; w += 32) {
        const int end = w + 32 < n_threads ? w + 32 : n_threads;
        unsigned waiting = 0, mask = 0, exited = 0;
        for (int t = w; t < end; ++t) {
            if (fibers[t].state == AT_WARP) {
                waiting |= 1u << (t - w);
                mask |= fibers[t].warp_mask;
            } else if (fibers[t].state == DONE) {
                exited |= 1u << (t - w);
            }
        }
        if (!waiting) continue;
        if (mask & exited) {
            fail("warp %d: lanes 0x%08x wait in a warp operation for lanes 0x%08x that exited",
                 w / 32, waiting, mask & exited);
            return false;
        }
        if ((waiting & mask) == mask) {
            for (int t = w; t < end; ++t)
                if (waiting >> (t - w) & 1u) fibers[t].state = READY;
            released = true;
        }
    }
    if (!released && at_barrier && done + at_barrier == n_threads)
        fail("__syncthreads reached by %d threads of %d; the other %d exited (divergent barrier)",
             at_barrier, n_threads, done);
    return released;
}

static bool run_block()
{
    if (dynamic_bytes) memset(dynamic_smem, 0xCD, dynamic_bytes);  // undefined at block start
    for (int t = 0; t < n_threads; ++t) {
        Fiber& f = fibers[t];
        if (!map_stack(f)) {
            fail("cannot map a fiber stack");
            return false;
        }
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK_BYTES;
        f.ctx.uc_link = &scheduler;
        makecontext(&f.ctx, fiber_main, 0);
        f.state = READY;
        f.warp_mask = 0;
    }
    const unsigned bx = blockDim.x, by = blockDim.y;
    for (;;) {
        for (int t = 0; t < n_threads; ++t) {
            if (fibers[t].state != READY) continue;
            current = t;
            threadIdx.x = t % bx;
            threadIdx.y = (t / bx) % by;
            threadIdx.z = t / (bx * by);
            swapcontext(&scheduler, &fibers[t].ctx);
        }
        bool all_done = true;
        for (int t = 0; t < n_threads; ++t) all_done &= fibers[t].state == DONE;
        if (all_done) return true;
        if (!release_waiters()) {
            if (!failed) {
                char states[256] = "";
                int n = 0;
                for (int t = 0; t < n_threads && n < 200; ++t)
                    if (fibers[t].state != DONE)
                        n += snprintf(states + n, sizeof states - n, " t%d:%s", t, state_name(fibers[t].state));
                fail("block deadlocked:%s", states);
            }
            return false;
        }
    }
}

// Runs kernel(args) over the grid.  0 on success, else a message in err.
static int launch(void (*kernel)(const void*), const void* args, const unsigned* grid,
                  const unsigned* block, size_t shared_bytes, const u64* ranges, int n_read,
                  int n_write, char* err, size_t err_bytes)
{
    Hold hold;
    failed = false;
    error[0] = 0;
    const u64 threads = (u64)block[0] * block[1] * block[2];
    if (threads == 0 || threads > MAX_BLOCK) {
        snprintf(err, err_bytes, "block (%u,%u,%u) has %llu threads; 1 to %d allowed", block[0],
                 block[1], block[2], threads, (int)MAX_BLOCK);
        return 1;
    }
    if (n_read > MAX_RANGES || n_write > MAX_RANGES || n_read < 0 || n_write < 0) {
        snprintf(err, err_bytes, "at most %d readable and %d writable ranges", (int)MAX_RANGES,
                 (int)MAX_RANGES);
        return 1;
    }
    n_readable = n_read;
    n_writable = n_write;
    for (int i = 0; i < n_read; ++i) readable[i] = Range{ranges[2 * i], ranges[2 * i + 1]};
    for (int i = 0; i < n_write; ++i)
        writable[i] = Range{ranges[2 * (n_read + i)], ranges[2 * (n_read + i) + 1]};
    if (!fibers) fibers = (Fiber*)calloc(MAX_BLOCK, sizeof(Fiber));

    // Dynamic shared memory ends at an inaccessible page.
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = ((shared_bytes + 255) / 256 * 256 + page - 1) / page * page;
    char* smem_map = (char*)mmap(nullptr, span + page, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (smem_map == (char*)MAP_FAILED) {
        snprintf(err, err_bytes, "cannot map %zu bytes of dynamic shared memory", shared_bytes);
        return 1;
    }
    mprotect(smem_map + span, page, PROT_NONE);
    dynamic_bytes = shared_bytes;
    dynamic_smem = (unsigned char*)(smem_map + span - (shared_bytes + 255) / 256 * 256);

    kernel_fn = kernel;
    kernel_args = args;
    n_threads = (int)threads;
    blockDim = dim3(block[0], block[1], block[2]);
    gridDim = dim3(grid[0], grid[1], grid[2]);

    // Faults inside the kernel come back here as errors.
    static char alt_stack[64 * 1024];
    stack_t alt, old_alt;
    alt.ss_sp = alt_stack;
    alt.ss_size = sizeof alt_stack;
    alt.ss_flags = 0;
    sigaltstack(&alt, &old_alt);
    struct sigaction sa, old_segv, old_bus;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);

    int sig = sigsetjmp(fault_return, 1);
    if (sig == 0) {
        in_kernel = 1;
        for (unsigned z = 0; z < grid[2] && !failed; ++z)
            for (unsigned y = 0; y < grid[1] && !failed; ++y)
                for (unsigned x = 0; x < grid[0] && !failed; ++x) {
                    blockIdx.x = x;
                    blockIdx.y = y;
                    blockIdx.z = z;
                    if (!run_block()) break;
                }
    } else {
        const void* a = (const void*)fault_address;
        const char* where = "";
        if ((char*)a >= smem_map + span && (char*)a < smem_map + span + page)
            where = " (just past the dynamic shared memory)";
        else if ((char*)a >= (char*)dynamic_smem - page && (char*)a < (char*)dynamic_smem)
            where = " (just before the dynamic shared memory)";
        fail("%s at address %p%s", sig == SIGSEGV ? "segmentation fault" : "bus error", a, where);
    }
    in_kernel = 0;
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaltstack(&old_alt, nullptr);
    munmap(smem_map, span + page);
    dynamic_smem = nullptr;
    n_readable = n_writable = 0;
    if (failed) {
        snprintf(err, err_bytes, "%s", error);
        return 1;
    }
    return 0;
}

}  // namespace cgsim

// UBSan reports go to <path>.<pid>, where the runner looks after each launch
// (the sanitizer reads UBSAN_OPTIONS only from the environment the process
// started with).
extern "C" void __sanitizer_set_report_path(const char* path)
    __attribute__((weak, visibility("default")));
CGSIM_EXPORT void cgsim_report_to(const char* path)
{
    if (__sanitizer_set_report_path) __sanitizer_set_report_path(path);
}

#endif  // CUGATHER_HOSTSIM_CUDA_SHIM_H
