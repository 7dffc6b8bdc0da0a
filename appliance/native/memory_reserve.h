/* reserve_memory: memory the analysis process touches once at start-up instead of page by page while flows wait
 * (included by dpi.c; appliance/analysis/memory.py calls it).
 *
 * Why: analysis keeps state per agent, per domain and per destination, and a new agent's state is new memory. Each
 * 4 KiB page of it is cleared by the kernel on its first touch, a page fault of 1.7-2.8 us on this kind of virtual
 * machine: 1,300-2,000 a pass of the bench corpus in the analysis process (new agents each pass), 2-5 ms of its
 * ~60 (docs/figures.md, 2026-12-02). Touched at start-up, before the first flow, the same pages cost nothing later:
 *
 *   - Python's object arenas (obmalloc, 1 MiB each on 64-bit 3.11) come from a pool mapped and populated here,
 *     through PyObject_SetArenaAllocator. An arena Python frees goes back onto the pool's free list, still
 *     resident, and is handed out again; past the pool, arenas come from the allocator that was in place
 *     (mmap/munmap), as before. The pool is never unmapped: the process keeps it for its lifetime.
 *   - The C heap (glibc malloc: objects over 512 bytes, dict and list tables, frame payloads) is grown by
 *     `heap_bytes`, touched and freed again, with the trim threshold above it so that free() keeps it, and
 *     the mmap threshold fixed at 32 MiB (glibc's own ceiling for it) so that a frame's payload comes from
 *     that heap instead of a fresh mapping each time.
 *
 * The price is resident memory from the start (arena_bytes + heap_bytes), which `analysis.memory_prefault_mb`
 * sets (0: none of this). Call once, on the main thread, with the interpreter lock, before other threads
 * allocate much (the heap part reserves the main thread's malloc arena); a second call raises RuntimeError.
 *
 * reserve_memory(arena_bytes, heap_bytes) -> (arena_bytes reserved, heap_bytes touched)
 */

#include <errno.h>
#include <malloc.h>
#include <sys/mman.h>

#define MR_HEAP_STEP ((size_t)1 << 20)   /* the heap is grown in blocks of this size (under the mmap threshold) */
#define MR_MMAP_THRESHOLD ((size_t)32 << 20)

static struct {
    char *base, *next, *end;      /* the pool: [base, end), handed out up to next */
    size_t chunk;                 /* the arena size, from the first request (Python asks one size only) */
    void *free_list;              /* freed arenas, linked through their first word */
    PyObjectArenaAllocator fallback;
    int installed;
} mr_pool;

static void *mr_alloc(void *ctx, size_t size)
{
    (void)ctx;
    if (mr_pool.chunk == 0)
        mr_pool.chunk = size;
    if (size == mr_pool.chunk) {
        if (mr_pool.free_list != NULL) {
            void *p = mr_pool.free_list;
            mr_pool.free_list = *(void **)p;
            return p;
        }
        if ((size_t)(mr_pool.end - mr_pool.next) >= size) {
            void *p = mr_pool.next;
            mr_pool.next += size;
            return p;
        }
    }
    return mr_pool.fallback.alloc(mr_pool.fallback.ctx, size);
}

static void mr_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if ((char *)ptr >= mr_pool.base && (char *)ptr < mr_pool.end) {  /* kept resident, for the next arena */
        *(void **)ptr = mr_pool.free_list;
        mr_pool.free_list = ptr;
        return;
    }
    mr_pool.fallback.free(mr_pool.fallback.ctx, ptr, size);
}

/* The pool: `bytes` rounded down to whole 1 MiB, aligned to 1 MiB (arenas then lose nothing to pool alignment),
 * populated by the kernel in one call. 0, or -1 with an exception. */
static int mr_arena_pool(size_t bytes)
{
    const size_t align = (size_t)1 << 20;
    bytes &= ~(align - 1);
    if (bytes == 0)
        return 0;
    char *mapped = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    char *base = (char *)(((uintptr_t)mapped + align - 1) & ~(uintptr_t)(align - 1));
    if (base > mapped)
        munmap(mapped, (size_t)(base - mapped));
    char *end = base + bytes;
    if (mapped + bytes + align > end)
        munmap(end, (size_t)(mapped + bytes + align - end));
    /* MADV_POPULATE_WRITE (Linux 5.14) faults every page in one call, and says ENOMEM instead of calling the OOM
     * killer when memory runs out: then nothing is kept. Without it (EINVAL), one write per page. */
    int populated = -1;
#ifdef MADV_POPULATE_WRITE
    populated = madvise(base, bytes, MADV_POPULATE_WRITE);
    if (populated != 0 && errno != EINVAL) {
        int err = errno;
        munmap(base, bytes);
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
#endif
    if (populated != 0) {
        for (size_t i = 0; i < bytes; i += 4096)
            ((volatile char *)base)[i] = 0;
    }
    mr_pool.base = mr_pool.next = base;
    mr_pool.end = end;
    PyObject_GetArenaAllocator(&mr_pool.fallback);
    PyObjectArenaAllocator pool = {NULL, mr_alloc, mr_free};
    PyObject_SetArenaAllocator(&pool);
    return 0;
}

/* The main malloc arena grown by `bytes`, touched, and kept by free(). The bytes actually touched. */
static size_t mr_heap(size_t bytes)
{
    if (bytes == 0)
        return 0;
    /* Fixed thresholds (setting them turns off glibc's dynamic ones): trimmed only past twice the reserve. */
    mallopt(M_MMAP_THRESHOLD, (int)MR_MMAP_THRESHOLD);
    size_t trim = 2 * bytes < (size_t)INT_MAX ? 2 * bytes : (size_t)INT_MAX;
    mallopt(M_TRIM_THRESHOLD, (int)(trim > MR_MMAP_THRESHOLD ? trim : MR_MMAP_THRESHOLD));
    size_t n = bytes / MR_HEAP_STEP, done = 0;
    void **blocks = calloc(n ? n : 1, sizeof(void *));
    if (blocks == NULL)
        return 0;
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(MR_HEAP_STEP - 64);  /* under the step with malloc's header: whole pages, adjacent */
        if (blocks[i] == NULL)
            break;
        memset(blocks[i], 0, MR_HEAP_STEP - 64);
        done += MR_HEAP_STEP;
    }
    for (size_t i = n; i-- > 0;)  /* newest first: each joins the top chunk as it is freed */
        free(blocks[i]);
    free(blocks);
    return done;
}

static PyObject *reserve_memory(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "reserve_memory(arena_bytes, heap_bytes)");
        return NULL;
    }
    Py_ssize_t arena = PyLong_AsSsize_t(args[0]), heap = PyLong_AsSsize_t(args[1]);
    if ((arena == -1 || heap == -1) && PyErr_Occurred())
        return NULL;
    if (arena < 0 || heap < 0) {
        PyErr_SetString(PyExc_ValueError, "reserve_memory: sizes are bytes, 0 or more");
        return NULL;
    }
    if (mr_pool.installed) {
        PyErr_SetString(PyExc_RuntimeError, "reserve_memory: already called in this process");
        return NULL;
    }
    mr_pool.installed = 1;
    if (mr_arena_pool((size_t)arena) < 0)
        return NULL;
    size_t touched = mr_heap((size_t)heap);
    return Py_BuildValue("(nn)", (Py_ssize_t)(mr_pool.end - mr_pool.base), (Py_ssize_t)touched);
}
