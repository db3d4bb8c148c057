// The CPU emulator of gpu_emu.hpp: fibers with a hand-written x86-64 context switch, block and
// warp barriers, and the host runtime calls on plain host memory.
#include "engine/backends/gpu/emu/gpu_emu.hpp"
#include "engine/backends/gpu/gpu_runtime.hpp"

#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "model/quant/quant.hpp"

// Under AddressSanitizer the fiber switches are announced (so ASan knows which stack is live)
// and a fiber stack is unpoisoned before it is reused: a fiber that ends never returns from its
// frames, so their redzones would otherwise stay poisoned for the next block's fibers.
#if defined(__SANITIZE_ADDRESS__)
#define LOOM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_EMU_ASAN 1
#endif
#endif
#ifdef LOOM_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the GPU emulator's context switch is written for x86-64"
#endif

// loom_emu_switch(&save_sp, new_sp): saves the callee-saved registers on the current stack,
// stores the stack pointer in *save_sp, switches to new_sp and restores from there.
asm(R"(
.text
.globl loom_emu_switch
.type loom_emu_switch,@function
loom_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size loom_emu_switch, .-loom_emu_switch
)");
extern "C" void loom_emu_switch(void** save_sp, void* new_sp);

namespace loom::emu {

ThreadCtx g_ctx;

namespace {

constexpr size_t kStack = 128 * 1024;

struct Fiber {
    void* sp = nullptr;
    char* stack = nullptr;
    void* fake_stack = nullptr;  // ASan's fake-stack handle while the fiber is switched out
    dim3 tid;
    bool done = false;
    bool waiting = false;
    unsigned wait_gen = 0;  // generation of the barrier it waits on
    bool warp_wait = false;
};

struct BlockState {
    std::vector<Fiber> fibers;
    int alive = 0;
    int arrived = 0;
    unsigned gen = 0;
    std::vector<int> warp_alive, warp_arrived;
    std::vector<unsigned> warp_gen;
    std::vector<uint64_t> slots;  // one per thread
    int cur = -1;
    void* sched_sp = nullptr;
    const void* sched_bottom = nullptr;  // the scheduler's stack, as ASan reports it
    size_t sched_size = 0;
    const std::function<void()>* body = nullptr;
    std::vector<uint8_t> dyn;
};

BlockState g_b;
std::vector<char*> g_stacks;

// Kernel -> its raised dynamic shared memory limit; like g_b, used by the launching thread only.
std::unordered_map<const void*, size_t> g_smem_limit;

char* stack_for(size_t i) {
    while (g_stacks.size() <= i) {
        void* p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        g_stacks.push_back(static_cast<char*>(p));
    }
    return g_stacks[i];
}

// Switches from fiber `f` to the scheduler; returns when the scheduler resumes `f`.
// dying: `f` has finished and is never resumed (ASan frees its fake stack).
void to_scheduler(Fiber& f, bool dying) {
#ifdef LOOM_EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack, g_b.sched_bottom, g_b.sched_size);
#endif
    loom_emu_switch(&f.sp, g_b.sched_sp);
#ifdef LOOM_EMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &g_b.sched_bottom, &g_b.sched_size);
#endif
}

// Switches from the scheduler to fiber i (its stack is stack_for(i)); returns when it yields.
void to_fiber(size_t i, Fiber& f) {
#ifdef LOOM_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, g_stacks[i], kStack);
    loom_emu_switch(&g_b.sched_sp, f.sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    (void)i;
    loom_emu_switch(&g_b.sched_sp, f.sp);
#endif
}

void yield_to_scheduler() { to_scheduler(g_b.fibers[static_cast<size_t>(g_b.cur)], false); }

void release_block_if_ready() {
    if (g_b.arrived > 0 && g_b.arrived >= g_b.alive) {
        g_b.arrived = 0;
        ++g_b.gen;
    }
}
void release_warp_if_ready(int w) {
    if (g_b.warp_arrived[static_cast<size_t>(w)] > 0 &&
        g_b.warp_arrived[static_cast<size_t>(w)] >= g_b.warp_alive[static_cast<size_t>(w)]) {
        g_b.warp_arrived[static_cast<size_t>(w)] = 0;
        ++g_b.warp_gen[static_cast<size_t>(w)];
    }
}

[[noreturn]] void fiber_entry() {
#ifdef LOOM_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_b.sched_bottom, &g_b.sched_size);
#endif
    (*g_b.body)();
    Fiber& f = g_b.fibers[static_cast<size_t>(g_b.cur)];
    f.done = true;
    --g_b.alive;
    const int w = g_b.cur / LOOM_EMU_WARP;
    --g_b.warp_alive[static_cast<size_t>(w)];
    release_block_if_ready();
    release_warp_if_ready(w);
    to_scheduler(f, true);
    std::abort();
}

void warp_barrier() {
    const int idx = g_b.cur;
    const int w = idx / LOOM_EMU_WARP;
    const unsigned gen = g_b.warp_gen[static_cast<size_t>(w)];
    ++g_b.warp_arrived[static_cast<size_t>(w)];
    release_warp_if_ready(w);
    while (g_b.warp_gen[static_cast<size_t>(w)] == gen) yield_to_scheduler();
}

}  // namespace

void* dyn_smem() { return g_b.dyn.data(); }

void syncthreads() {
    const unsigned gen = g_b.gen;
    ++g_b.arrived;
    release_block_if_ready();
    while (g_b.gen == gen) yield_to_scheduler();
}

void syncwarp() { warp_barrier(); }

int lane() { return g_b.cur % LOOM_EMU_WARP; }

uint64_t exchange(uint64_t bits, int src) {
    const int idx = g_b.cur;
    const int base = idx - idx % LOOM_EMU_WARP;
    g_b.slots[static_cast<size_t>(idx)] = bits;
    warp_barrier();
    const int s = base + src;
    const uint64_t r = (src >= 0 && src < LOOM_EMU_WARP && s < static_cast<int>(g_b.fibers.size()))
                           ? g_b.slots[static_cast<size_t>(s)]
                           : bits;
    warp_barrier();
    return r;
}

int set_max_dyn_smem(const void* key, size_t bytes) {
    g_smem_limit[key] = bytes;
    return 0;
}

void launch(const void* key, dim3 grid, dim3 block, size_t dyn_smem_bytes, const std::function<void()>& body) {
    const size_t n = size_t{block.x} * block.y * block.z;
    if (n == 0 || n > 1024) throw std::runtime_error("emu: block of " + std::to_string(n) + " threads");
    if (dyn_smem_bytes > gpu::kDefaultDynSmemBytes) {
        const auto it = g_smem_limit.find(key);
        if (it == g_smem_limit.end() || it->second < dyn_smem_bytes)
            throw std::runtime_error("emu: " + std::to_string(dyn_smem_bytes) +
                                     " bytes of dynamic shared memory without the kernel's limit raised "
                                     "(gpuFuncSetMaxDynamicSmem), which CUDA refuses above 48 KiB");
    }
    const size_t nwarps = (n + LOOM_EMU_WARP - 1) / LOOM_EMU_WARP;
    g_b.fibers.assign(n, Fiber{});
    g_b.slots.assign(n, 0);
    g_b.body = &body;
    g_b.dyn.resize(dyn_smem_bytes + 16);
    for (size_t i = 0; i < n; ++i) stack_for(i);
    g_ctx.gdim = grid;
    g_ctx.bdim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                g_ctx.bid = dim3(bx, by, bz);
                std::memset(g_b.dyn.data(), 0xFF, g_b.dyn.size());
                g_b.alive = static_cast<int>(n);
                g_b.arrived = 0;
                g_b.warp_alive.assign(nwarps, 0);
                g_b.warp_arrived.assign(nwarps, 0);
                g_b.warp_gen.assign(nwarps, 0);
                for (size_t i = 0; i < n; ++i) {
                    Fiber& f = g_b.fibers[i];
                    f = Fiber{};
                    f.tid = dim3(static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y),
                                 static_cast<unsigned>(i / (size_t{block.x} * block.y)));
                    ++g_b.warp_alive[i / LOOM_EMU_WARP];
                    // Initial stack: six zero registers, then fiber_entry as the return address,
                    // then a fake return address (so fiber_entry starts with rsp % 16 == 8).
#ifdef LOOM_EMU_ASAN
                    ASAN_UNPOISON_MEMORY_REGION(stack_for(i), kStack);
#endif
                    char* top = stack_for(i) + kStack;
                    auto* sp = reinterpret_cast<void**>(top);
                    *--sp = nullptr;
                    *--sp = reinterpret_cast<void*>(&fiber_entry);
                    for (int r = 0; r < 6; ++r) *--sp = nullptr;
                    f.sp = sp;
                }
                // Round-robin until every fiber has finished.
                size_t done = 0;
                while (done < n) {
                    done = 0;
                    for (size_t i = 0; i < n; ++i) {
                        Fiber& f = g_b.fibers[i];
                        if (f.done) {
                            ++done;
                            continue;
                        }
                        g_b.cur = static_cast<int>(i);
                        g_ctx.tid = f.tid;
                        to_fiber(i, f);
                    }
                }
            }
    g_b.cur = -1;
}

float half_to_float(uint16_t h) { return model::fp16_to_fp32(h); }
uint16_t float_to_half(float f) { return model::fp32_to_fp16(f); }

}  // namespace loom::emu

// ---- host runtime -----------------------------------------------------------------------
namespace {

// Emulated device memory: allocations are host memory, counted against kEmuMemory so that
// gpuMemGetInfo reports what is left (the KV pool's default size depends on it). Allocations up
// to kPoison bytes are filled with 0xA5 so that unwritten outputs show up; larger ones (the KV
// pool) are left as the system gives them, so that their pages cost nothing until written.
constexpr size_t kEmuMemory = size_t{4} << 30;
constexpr size_t kPoison = size_t{256} << 20;
std::unordered_map<void*, size_t> g_sizes;
size_t g_used = 0;

void* host_alloc(size_t n) {
    void* p = std::aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (p && n <= kPoison) std::memset(p, 0xA5, n);
    return p;
}

}  // namespace

gpuError_t gpuMalloc(void** p, size_t n) {
    *p = host_alloc(n);
    if (!*p) return 2;
    g_sizes[*p] = n;
    g_used += n;
    return 0;
}
gpuError_t gpuFree(void* p) {
    if (auto it = g_sizes.find(p); it != g_sizes.end()) {
        g_used -= it->second;
        g_sizes.erase(it);
    }
    std::free(p);
    return 0;
}
gpuError_t gpuMallocHost(void** p, size_t n) {
    *p = host_alloc(n);
    return *p ? 0 : 2;
}
gpuError_t gpuFreeHost(void* p) {
    std::free(p);
    return 0;
}
gpuError_t gpuMemcpy(void* d, const void* s, size_t n, int) {
    if (n) std::memmove(d, s, n);
    return 0;
}
gpuError_t gpuMemcpyAsync(void* d, const void* s, size_t n, int k, gpuStream_t) { return gpuMemcpy(d, s, n, k); }
gpuError_t gpuMemsetAsync(void* d, int v, size_t n, gpuStream_t) {
    std::memset(d, v, n);
    return 0;
}
gpuError_t gpuStreamCreate(gpuStream_t* s) {
    *s = nullptr;
    return 0;
}
gpuError_t gpuStreamDestroy(gpuStream_t) { return 0; }
gpuError_t gpuStreamSynchronize(gpuStream_t) { return 0; }
gpuError_t gpuEventCreate(gpuEvent_t* e) {
    *e = new double(0);
    return 0;
}
gpuError_t gpuEventDestroy(gpuEvent_t e) {
    delete e;
    return 0;
}
gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t) {
    *e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return 0;
}
gpuError_t gpuEventSynchronize(gpuEvent_t) { return 0; }
gpuError_t gpuEventElapsedTime(float* ms, gpuEvent_t a, gpuEvent_t b) {
    *ms = static_cast<float>(*b - *a);
    return 0;
}
gpuError_t gpuGetLastError() { return 0; }
gpuError_t gpuDeviceSynchronize() { return 0; }
gpuError_t gpuMemGetInfo(size_t* f, size_t* t) {
    *t = kEmuMemory;
    *f = g_used < kEmuMemory ? kEmuMemory - g_used : 0;
    return 0;
}
const char* gpuGetErrorString(gpuError_t e) { return e == 0 ? "no error" : "emulated allocation failed"; }
