/*
 * FAKE NCCL + CUDA driver API, for testing collkit's purego binding ONLY.
 *
 * The tests of package transport/nccl build it into a temporary directory
 * and load it through COLLKIT_NCCL_LIB/COLLKIT_CUDA_LIB set in a test-only
 * search environment. It is never built into collkit, never on any search
 * path, and users cannot select it.
 *
 * It implements the symbols collkit binds for a world of ONE rank, so every
 * collective is a copy. "Device memory" is host memory that the fake keeps
 * in a table, so the binding's device paths run here element by element,
 * and the fake behaves as the real libraries do where collkit could get it
 * wrong:
 *  - work queued on a stream (copies, collectives) runs only when
 *    cuStreamQuery finds it done, after a few "not ready" answers: reading
 *    a result before the stream finished reads stale data;
 *  - a communicator records the stream of its first launch and fails a
 *    launch on any other stream, or on one not made by cuStreamCreate;
 *  - calls need a current context on the calling thread (cuCtxSetCurrent),
 *    as the driver does; device arguments must lie in live device
 *    allocations;
 *  - non-blocking communicators (ncclCommInitRankConfig with blocking 0)
 *    return ncclInProgress from init, collectives and ncclCommSplit, whose
 *    child is NULL until a later ncclCommGetAsyncError of the parent
 *    reports success, as non-blocking NCCL does;
 *  - cuPointerGetAttributes reports memory type 0 for unknown (host or
 *    freed) pointers, as the real one does, and the device ordinal of the
 *    context an allocation was made in.
 * It can be told to hang a stream, hang init, block inside a launch until
 * ncclCommAbort, or report an asynchronous error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size; unsigned int magic; unsigned int version;
  int blocking; int cgaClusterSize; int minCTAs; int maxCTAs;
  const char *netName; int splitShare;
} ncclConfig_t;

typedef struct fctx { int dev; } fctx;
enum { OP_COPY, OP_PUSH, OP_POP, OP_SET };
typedef struct { int kind; char *dst; const char *src; size_t n; int v; } fop;
typedef struct fstream { int live; int delay; int nops; fop ops[64]; } fstream;
typedef struct fcomm {
  int id, nonblocking, inprogress, asyncerr, aborted;
  fctx *ctx; fstream *stream;
  struct fcomm **late; struct fcomm *child; /* a split's child, delivered late */
} fcomm;
typedef struct { uintptr_t p; size_t n; int type; int dev; } falloc;

enum { MODE_OK = 0, MODE_HANG = 1, MODE_ASYNC_ERROR = 2, MODE_HANG_INIT = 3, MODE_BLOCK_LAUNCH = 4 };
static volatile int mode, released;
static int aborts, destroys, commids, ndevices = 1, wrong_stream;
static long last[8]; /* call, count, dtype, op, root, peer, color, key */
static char fifo[1 << 20]; static size_t fifo_len;
static fctx ctxs[8];
static __thread fctx *current;
static falloc allocs[4096]; static int nallocs;

void fake_set_mode(int m) { mode = m; }
void fake_release(void) { released = 1; }
void fake_set_devices(int n) { ndevices = n; }
int fake_aborts(void) { return aborts; }
int fake_destroys(void) { return destroys; }
int fake_wrong_streams(void) { return wrong_stream; }
int fake_live_device_allocs(void) { int k = 0; for (int i = 0; i < nallocs; i++) k += allocs[i].type == 2; return k; }
void fake_last(long *out) { memcpy(out, last, sizeof last); }

static void nap(void) { struct timespec t = {0, 100000}; nanosleep(&t, 0); }
static void rec(long call, long count, long dt, long op, long root, long peer) {
  last[0] = call; last[1] = count; last[2] = dt; last[3] = op; last[4] = root; last[5] = peer;
}
static size_t dtsize(int dt) {
  switch (dt) { case 0: case 1: return 1; case 2: case 3: return 4; case 4: case 5: return 8;
  case 6: case 9: return 2; case 7: return 4; case 8: return 8; }
  return 0;
}

/* Memory. */
static falloc *find(uintptr_t p) {
  for (int i = 0; i < nallocs; i++) if (p >= allocs[i].p && p < allocs[i].p + allocs[i].n) return &allocs[i];
  return 0;
}
static int isdev(const void *p, size_t n) {
  falloc *a = find((uintptr_t)p);
  return n == 0 || (a && a->type == 2 && (uintptr_t)p + n <= a->p + a->n);
}
static void track(void *p, size_t n, int type) { allocs[nallocs++] = (falloc){(uintptr_t)p, n, type, current ? current->dev : -1}; }
static int untrack(uintptr_t p, int type) {
  for (int i = 0; i < nallocs; i++) if (allocs[i].p == p && allocs[i].type == type) { allocs[i] = allocs[--nallocs]; return 0; }
  return 1;
}

/* Streams: queued work runs when cuStreamQuery finds it done. */
static int enq(fstream *s, int kind, void *dst, const void *src, size_t n, int v) {
  if (!s || !s->live || s->nops == 64) return 1;
  s->ops[s->nops++] = (fop){kind, dst, src, n, v}; s->delay = 2; return 0;
}
static void drain(fstream *s) {
  for (int i = 0; i < s->nops; i++) {
    fop *o = &s->ops[i];
    switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET: memset(o->dst, o->v, o->n); break;
    case OP_PUSH: memcpy(fifo + fifo_len, o->src, o->n); fifo_len += o->n; break;
    case OP_POP: memcpy(o->dst, fifo, o->n); memmove(fifo, fifo + o->n, fifo_len - o->n); fifo_len -= o->n; break;
    }
  }
  s->nops = 0;
}

/* The CUDA driver API. */
int cuInit(unsigned f) { return f == 0 ? 0 : 1; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = ndevices; return 0; }
int cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= ndevices) return 101; *d = ord; return 0; }
int cuDevicePrimaryCtxRetain(fctx **c, int d) { ctxs[d].dev = d; *c = &ctxs[d]; return 0; }
int cuCtxSetCurrent(fctx *c) { current = c; return 0; }
int cuMemAlloc_v2(uintptr_t *p, size_t n) {
  if (!current) return 201;
  void *m = malloc(n); if (!m) return 2;
  track(m, n, 2); *p = (uintptr_t)m; return 0;
}
int cuMemFree_v2(uintptr_t p) { if (untrack(p, 2)) return 1; free((void *)p); return 0; }
int cuMemHostAlloc(void **p, size_t n, unsigned flags) {
  if (!current) return 201;
  *p = malloc(n); if (!*p) return 2;
  track(*p, n, 1); return 0;
}
int cuMemFreeHost(void *p) { if (untrack((uintptr_t)p, 1)) return 1; free(p); return 0; }
int cuMemcpyHtoDAsync_v2(uintptr_t d, const void *s, size_t n, fstream *st) {
  if (!current) return 201;
  if (!isdev((void *)d, n)) return 1;
  return enq(st, OP_COPY, (void *)d, s, n, 0) ? 400 : 0;
}
int cuMemcpyDtoHAsync_v2(void *d, uintptr_t s, size_t n, fstream *st) {
  if (!current) return 201;
  if (!isdev((void *)s, n)) return 1;
  return enq(st, OP_COPY, d, (void *)s, n, 0) ? 400 : 0;
}
int cuMemsetD8Async(uintptr_t d, unsigned char v, size_t n, fstream *st) {
  if (!current) return 201;
  if (!isdev((void *)d, n)) return 1;
  return enq(st, OP_SET, (void *)d, 0, n, v) ? 400 : 0;
}
int cuStreamCreate(fstream **s, unsigned flags) {
  if (!current) return 201;
  if (flags != 1) return 1;
  *s = calloc(1, sizeof **s); (*s)->live = 1; return 0;
}
int cuStreamDestroy_v2(fstream *s) { if (!s || !s->live) return 400; s->live = 0; return 0; }
int cuStreamQuery(fstream *s) {
  if (!current) return 201;
  if (!s || !s->live) return 400;
  if (mode == MODE_HANG) return 600;
  if (s->delay > 0) { s->delay--; return 600; }
  drain(s); return 0;
}
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, uintptr_t p) {
  falloc *a = find(p);
  for (unsigned i = 0; i < n; i++) {
    switch (attrs[i]) {
    case 2: *(unsigned *)data[i] = a ? a->type : 0; break;
    case 9: *(int *)data[i] = a ? a->dev : 0; break;
    case 11: *(uintptr_t *)data[i] = a ? a->p : 0; break;
    case 12: *(size_t *)data[i] = a ? a->n : 0; break;
    default: return 1;
    }
  }
  return 0;
}
int cuGetErrorString(int e, const char **s) { *s = e == 600 ? "device not ready (fake)" : "fake cuda error"; return 0; }

/* NCCL. */
int ncclGetVersion(int *v) { *v = 22105; return 0; }
int ncclGetUniqueId(ncclUniqueId *id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i ^ 0x5a); return 0; }
static int checkid(ncclUniqueId id) {
  for (int i = 0; i < 128; i++) if (id.internal[i] != (char)(i ^ 0x5a)) return 4;
  return 0;
}
static fcomm *newcomm(int nonblocking) {
  fcomm *c = calloc(1, sizeof *c); c->id = ++commids; c->nonblocking = nonblocking;
  c->inprogress = nonblocking ? 3 : 0; c->ctx = current; return c;
}
int ncclCommInitRank(fcomm **comm, int n, ncclUniqueId id, int rank) {
  if (n != 1 || rank != 0 || checkid(id)) return 4;
  if (!current) return 1;
  if (mode == MODE_HANG_INIT) { released = 0; while (!released) nap(); }
  *comm = newcomm(0); return 0;
}
int ncclCommInitRankConfig(fcomm **comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  if (n != 1 || rank != 0 || checkid(id)) return 4;
  if (!current) return 1;
  if (!cfg || cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t)) return 4;
  *comm = newcomm(!cfg->blocking); return cfg->blocking ? 0 : 7;
}
int ncclCommSplit(fcomm *c, int color, int key, fcomm **nc, ncclConfig_t *cfg) {
  last[6] = color; last[7] = key;
  if (!cfg || cfg->blocking == c->nonblocking) return 4; /* the child keeps the parent's mode */
  if (color < 0) { *nc = NULL; return 0; }
  fcomm *child = newcomm(c->nonblocking);
  if (!c->nonblocking) { *nc = child; return 0; }
  *nc = NULL; c->late = nc; c->child = child; c->inprogress = 2; return 7;
}
int ncclCommFinalize(fcomm *c) { return 0; }
int ncclCommDestroy(fcomm *c) { destroys++; c->aborted = 1; return 0; }
int ncclCommAbort(fcomm *c) { aborts++; c->aborted = 1; return 0; }
int ncclCommGetAsyncError(fcomm *c, int *res) {
  if (c->asyncerr) { *res = c->asyncerr; return 0; }
  if (c->inprogress > 0 && --c->inprogress > 0) { *res = 7; return 0; }
  if (c->late) { *c->late = c->child; c->late = 0; }
  *res = 0; return 0;
}
int ncclCommCount(fcomm *c, int *n) { *n = 1; return 0; }
int ncclCommUserRank(fcomm *c, int *r) { *r = 0; return 0; }
const char *ncclGetErrorString(int r) {
  switch (r) {
  case 5: return "invalid usage (fake: wrong stream or context)";
  case 6: return "remote process exited or there was a network error (fake)";
  }
  return "fake nccl error";
}
const char *ncclGetLastError(fcomm *c) { return ""; }

/* A launch: the context and the stream must be the communicator's. */
static int launch(fcomm *c, fstream *st) {
  if (!c || c->aborted) return 5;
  if (current != c->ctx) return 5;
  if (!st || !st->live) { wrong_stream++; return 5; }
  if (!c->stream) c->stream = st;
  if (st != c->stream) { wrong_stream++; return 5; }
  if (mode == MODE_BLOCK_LAUNCH) { while (!c->aborted) nap(); return 2; }
  if (mode == MODE_ASYNC_ERROR) c->asyncerr = 6;
  return 0;
}
static int done(fcomm *c) {
  if (!c->nonblocking) return 0;
  c->inprogress = 2; return 7;
}
static int coll(long call, const void *s, void *r, size_t n, int dt, int op, int root, fcomm *c, fstream *st) {
  rec(call, n, dt, op, root, -1);
  int e = launch(c, st); if (e) return e;
  size_t k = n * dtsize(dt);
  if (!isdev(s, k) || !isdev(r, k)) return 4;
  if (enq(st, OP_COPY, r, s, k, 0)) return 3;
  return done(c);
}
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, fcomm *c, fstream *st) { return coll(1, s, r, n, dt, op, -1, c, st); }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, fcomm *c, fstream *st) { return coll(2, s, r, n, dt, -1, root, c, st); }
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, fcomm *c, fstream *st) { return coll(3, s, r, n, dt, op, root, c, st); }
int ncclAllGather(const void *s, void *r, size_t n, int dt, fcomm *c, fstream *st) { return coll(4, s, r, n, dt, -1, -1, c, st); }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, fcomm *c, fstream *st) { return coll(5, s, r, n, dt, op, -1, c, st); }
int ncclSend(const void *b, size_t n, int dt, int peer, fcomm *c, fstream *st) {
  rec(6, n, dt, -1, -1, peer);
  int e = launch(c, st); if (e) return e;
  size_t k = n * dtsize(dt);
  if (peer != 0 || fifo_len + k > sizeof fifo || !isdev(b, k)) return 4;
  return enq(st, OP_PUSH, 0, b, k, 0) ? 3 : 0;
}
int ncclRecv(void *b, size_t n, int dt, int peer, fcomm *c, fstream *st) {
  rec(7, n, dt, -1, -1, peer);
  int e = launch(c, st); if (e) return e;
  size_t k = n * dtsize(dt);
  if (peer != 0 || !isdev(b, k)) return 4;
  return enq(st, OP_POP, b, 0, k, 0) ? 3 : 0;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
