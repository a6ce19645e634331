/*
 * FAKE NCCL + CUDA driver API, for testing collkit's purego binding ONLY.
 *
 * The tests build it into a temporary directory and load it through
 * COLLKIT_NCCL_LIB/COLLKIT_CUDA_LIB set in a test-only search environment.
 * It is never built into collkit, never on any search path, and users
 * cannot select it.
 *
 * It implements the symbols collkit binds for any number of ranks in ONE
 * process (goroutines, each rank on its own threads): ncclCommInitRank
 * waits until every rank of the unique id has come, and a collective runs
 * when every rank of the communicator has reached it on its stream, with
 * the real arithmetic of every type and op. A rank that is alive but never
 * comes (stopped, or in another call) leaves the others' streams "not
 * ready" forever, as a real collective waiting on it hangs; one whose
 * communicator was destroyed or aborted before it came (its process died)
 * makes ncclCommGetAsyncError of those waiting report ncclRemoteError, as
 * NCCL over a network reports a peer that exited, unless
 * fake_set_peer_errors(0) makes them hang as over NVLink. "Device memory"
 * is host memory that the fake keeps in a table, so the binding's device
 * paths run element by element, and the fake behaves as the real libraries
 * do where collkit could get it wrong:
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
 *
 * Unless built with -DFAKE_NO_SHRINK_GROW it also exports ncclCommShrink
 * (NCCL 2.27), ncclCommGetUniqueId and ncclCommGrow (NCCL 2.29) with the
 * semantics of NCCL's nccl.h: a shrink is collective over the ranks not
 * excluded, which must not call it, and numbers them in their old order; a
 * grow keeps the ranks of the parent and adds the new ranks, which pass the
 * id the coordinator got from ncclCommGetUniqueId, at the ranks they are
 * given. As NCCL's ncclCommEnsureReady does, a shrink or grow of a
 * communicator with an asynchronous error (ncclRemoteError from a dead
 * peer) fails with that error, with either shrink flag: NCCL_SHRINK_ABORT
 * ends the parent's unfinished operations but does not clear its error.
 * NCCL_SHRINK_DEFAULT on one with operations still queued fails with
 * ncclInvalidUsage (NCCL says it may deadlock). The version it reports
 * does not change with the build: collkit binds these symbols by their
 * presence.
 * Shrink and grow block until every rank has come, in either mode (collkit
 * uses them on blocking communicators only).
 *
 * It can be told to hang a stream, hang init, block inside a launch until
 * ncclCommAbort, report an asynchronous error, or fail every shrink and
 * grow with ncclInternalError, and it counts what
 * collkit did (inits, shrinks, grows, aborts, destroys, communicators ended
 * twice or never).
 */
#include <sched.h>
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

#define MAXR 64   /* ranks per communicator */
#define NSLOTS 64 /* collectives in flight per communicator */

struct fcomm;
struct fgroup;
typedef struct fctx { int dev; } fctx;
enum { OP_COPY, OP_PUSH, OP_POP, OP_SET, OP_COLL };
typedef struct { int kind; char *dst; const char *src; size_t n; int v; struct fcomm *c; unsigned long seq; int peer; } fop;
typedef struct fstream { int live; int delay; int nops; fop ops[64]; } fstream;

/* The collectives, numbered as fake_last reports them. */
enum { C_ALLREDUCE = 1, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER };
typedef struct {
  int used; unsigned long seq; int kind; size_t count; int dt, op, root;
  int arrived, done, popped; char in[MAXR];
  const char *send[MAXR]; char *recv[MAXR];
} fslot;
typedef struct { char *b; size_t len, cap; } fpipe;

/* A group is the ranks of one NCCL communicator; each rank has its fcomm. */
typedef struct fgroup {
  int n, joined, broken;
  char id[128]; int byid; /* made by ncclCommInitRank with this id */
  struct fcomm *rank[MAXR];
  fslot slots[NSLOTS];
  fpipe *pipes; /* n*n: pipes[src*n+dst] */
  struct fgroup *next;
} fgroup;

typedef struct fcomm {
  int id, nonblocking, inprogress, asyncerr, ended, killed, ends;
  int rank; fgroup *g; /* g is NULL while the communicator forms */
  int failed;          /* forming failed: its error */
  unsigned long seq;   /* collectives launched */
  int children;        /* splits, shrinks and grows made from it */
  fctx *ctx; fstream *stream;
  struct fcomm **late; struct fcomm *child; /* a split's child, delivered late */
  struct fcomm *all;
} fcomm;
typedef struct { uintptr_t p; size_t n; int type; int dev; } falloc;

/* A rendezvous makes the children of one split, shrink or grow. */
enum { R_SPLIT, R_SHRINK, R_GROW };
typedef struct frdv {
  int kind; fgroup *parent; int seq; int expected, arrived, done, bad;
  int nexcl, excl[MAXR];
  char in[MAXR]; int color[MAXR], key[MAXR];
  fcomm *child[MAXR]; /* by parent rank; for a grow by new rank */
  ncclUniqueId growid; int hasid, consumed;
  struct frdv *next;
} frdv;

enum { MODE_OK = 0, MODE_HANG = 1, MODE_ASYNC_ERROR = 2, MODE_HANG_INIT = 3, MODE_BLOCK_LAUNCH = 4, MODE_FAIL_SHRINK = 5 };
static volatile int mode, released, peer_errors = 1;
static int aborts, destroys, commids, ndevices = 1, wrong_stream;
static int inits, shrinks, grows, growids, ended_twice;
static int last_shrink[2 + MAXR];
static long last[8]; /* call, count, dtype, op, root, peer, color, key */
static fctx ctxs[8];
static __thread fctx *current;
static falloc allocs[4096]; static int nallocs;
static fgroup *groups;
static fcomm *comms;
static frdv *rdvs;
static unsigned long idcount;

/* One lock for all of it: ranks are threads of this process. */
static volatile char lk;
static void lock(void) { while (__atomic_test_and_set(&lk, __ATOMIC_ACQUIRE)) sched_yield(); }
static void unlock(void) { __atomic_clear(&lk, __ATOMIC_RELEASE); }
static void nap(void) { struct timespec t = {0, 100000}; nanosleep(&t, 0); }
/* wait drops the lock for a nap: the caller holds it. */
static void wait1(void) { unlock(); nap(); lock(); }

void fake_set_mode(int m) { mode = m; }
void fake_release(void) { released = 1; }
void fake_set_devices(int n) { ndevices = n; }
void fake_set_peer_errors(int on) { peer_errors = on; }
int fake_aborts(void) { return aborts; }
int fake_destroys(void) { return destroys; }
int fake_wrong_streams(void) { return wrong_stream; }
int fake_inits(void) { return inits; }
int fake_shrinks(void) { return shrinks; }
int fake_grows(void) { return grows; }
int fake_grow_ids(void) { return growids; }
int fake_ended_twice(void) { return ended_twice; }
/* fake_last_shrink: flags, the count of excluded ranks, then those ranks. */
void fake_last_shrink(int *out) { lock(); memcpy(out, last_shrink, sizeof last_shrink); unlock(); }
int fake_live_comms(void) {
  lock(); int k = 0; for (fcomm *c = comms; c; c = c->all) k += !c->ended; unlock(); return k;
}
int fake_live_device_allocs(void) {
  lock(); int k = 0; for (int i = 0; i < nallocs; i++) k += allocs[i].type == 2; unlock(); return k;
}
void fake_last(long *out) { lock(); memcpy(out, last, sizeof last); unlock(); }

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

/* Arithmetic: half and bfloat16 through float, rounding to nearest even. */
static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
  if (e == 0 && m == 0) f = s;
  else if (e == 0) { uint32_t x = 113; while (!(m & 0x400)) { m <<= 1; x--; } f = s | (x << 23) | ((m & 0x3ff) << 13); }
  else if (e == 31) f = s | 0x7f800000u | (m << 13);
  else f = s | ((e + 112) << 23) | (m << 13);
  float r; memcpy(&r, &f, 4); return r;
}
static uint16_t f2h(float x) {
  uint32_t f; memcpy(&f, &x, 4);
  uint16_t s = (f >> 16) & 0x8000; uint32_t fe = (f >> 23) & 0xff, m = f & 0x7fffff;
  if (fe == 0xff) return s | 0x7c00 | (m ? 0x200 : 0);
  int e = (int)fe - 112;
  if (e >= 31) return s | 0x7c00;
  if (e <= 0) {
    if (e < -10) return s;
    m |= 0x800000; int sh = 14 - e; uint32_t hm = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (hm & 1))) hm++;
    return s | hm;
  }
  uint16_t h = s | (e << 10) | (m >> 13); uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return h;
}
static float b2f(uint16_t b) { uint32_t f = (uint32_t)b << 16; float r; memcpy(&r, &f, 4); return r; }
static uint16_t f2b(float x) {
  uint32_t f; memcpy(&f, &x, 4);
  if ((f & 0x7fffffff) > 0x7f800000) return (f >> 16) | 0x40;
  f += 0x7fff + ((f >> 16) & 1); return f >> 16;
}

#define RED_NUM(T, ADD, MUL) { \
  T *o = (T *)out; \
  for (size_t i = 0; i < m; i++) { \
    T a = ((const T *)src[0])[off + i]; \
    for (int r = 1; r < n; r++) { \
      T b = ((const T *)src[r])[off + i]; \
      switch (op) { case 1: a = MUL; break; case 2: a = a > b ? a : b; break; case 3: a = a < b ? a : b; break; default: a = ADD; } \
    } \
    if (op == 4) a = a / n; \
    o[i] = a; \
  } }
#define RED_INT(T, U) RED_NUM(T, (T)((U)a + (U)b), (T)((U)a * (U)b))
#define RED_FLT(T) RED_NUM(T, a + b, a * b)
#define RED_HALF(TO, FROM) { \
  uint16_t *o = (uint16_t *)out; \
  for (size_t i = 0; i < m; i++) { \
    float a = TO(((const uint16_t *)src[0])[off + i]); \
    for (int r = 1; r < n; r++) { \
      float b = TO(((const uint16_t *)src[r])[off + i]); \
      switch (op) { case 1: a = TO(FROM(a * b)); break; case 2: a = a > b ? a : b; break; case 3: a = a < b ? a : b; break; default: a = TO(FROM(a + b)); } \
    } \
    if (op == 4) a = a / n; \
    o[i] = FROM(a); \
  } }

/* reduce writes into out elements off..off+m of the reduction of src[0..n-1]. */
static void reduce(void *out, const char **src, int n, size_t off, size_t m, int dt, int op) {
  if (n == 1) { memcpy(out, src[0] + off * dtsize(dt), m * dtsize(dt)); return; }
  switch (dt) {
  case 0: RED_INT(int8_t, uint8_t) break;
  case 1: RED_INT(uint8_t, uint8_t) break;
  case 2: RED_INT(int32_t, uint32_t) break;
  case 3: RED_INT(uint32_t, uint32_t) break;
  case 4: RED_INT(int64_t, uint64_t) break;
  case 5: RED_INT(uint64_t, uint64_t) break;
  case 6: RED_HALF(h2f, f2h) break;
  case 7: RED_FLT(float) break;
  case 8: RED_FLT(double) break;
  case 9: RED_HALF(b2f, f2b) break;
  }
}

/* compute runs a collective every rank has reached. */
static void compute(fgroup *g, fslot *s) {
  int n = g->n; size_t es = dtsize(s->dt), k = s->count * es;
  char *tmp = malloc(k * n + 1);
  switch (s->kind) {
  case C_ALLREDUCE:
    reduce(tmp, s->send, n, 0, s->count, s->dt, s->op);
    for (int r = 0; r < n; r++) memcpy(s->recv[r], tmp, k);
    break;
  case C_BROADCAST:
    memcpy(tmp, s->send[s->root], k);
    for (int r = 0; r < n; r++) memcpy(s->recv[r], tmp, k);
    break;
  case C_REDUCE:
    reduce(tmp, s->send, n, 0, s->count, s->dt, s->op);
    memcpy(s->recv[s->root], tmp, k);
    break;
  case C_ALLGATHER:
    for (int r = 0; r < n; r++) memcpy(tmp + r * k, s->send[r], k);
    for (int r = 0; r < n; r++) memcpy(s->recv[r], tmp, k * n);
    break;
  case C_REDUCESCATTER:
    reduce(tmp, s->send, n, 0, s->count * n, s->dt, s->op);
    for (int r = 0; r < n; r++) memcpy(s->recv[r], tmp + r * k, k);
    break;
  }
  free(tmp);
}

static void pipe_push(fpipe *p, const char *src, size_t n) {
  if (p->len + n > p->cap) { p->cap = (p->len + n) * 2; p->b = realloc(p->b, p->cap); }
  memcpy(p->b + p->len, src, n); p->len += n;
}

/* step runs one queued operation, or returns 0 when it must wait (a peer
 * has not reached the collective, or not sent what is received). */
static int step(fop *o) {
  switch (o->kind) {
  case OP_COPY: memmove(o->dst, o->src, o->n); return 1;
  case OP_SET: memset(o->dst, o->v, o->n); return 1;
  }
  fcomm *c = o->c;
  if (c->ended || c->killed) return 1; /* aborted: the kernel exits */
  fgroup *g = c->g;
  if (o->kind == OP_PUSH) { pipe_push(&g->pipes[c->rank * g->n + o->peer], o->src, o->n); return 1; }
  if (o->kind == OP_POP) {
    fpipe *p = &g->pipes[o->peer * g->n + c->rank];
    if (p->len < o->n && g->rank[o->peer]->ended && peer_errors) c->asyncerr = 6; /* the peer is gone */
    if (p->len < o->n) return 0;
    memcpy(o->dst, p->b, o->n); memmove(p->b, p->b + o->n, p->len - o->n); p->len -= o->n;
    return 1;
  }
  fslot *s = &g->slots[o->seq % NSLOTS];
  fslot *want = (fslot *)o->dst; /* the launch's description */
  if (!s->used) {
    memset(s, 0, sizeof *s);
    s->used = 1; s->seq = o->seq; s->kind = want->kind; s->count = want->count; s->dt = want->dt; s->op = want->op; s->root = want->root;
  }
  if (s->seq != o->seq || s->kind != want->kind || s->count != want->count || s->dt != want->dt || s->op != want->op || s->root != want->root) {
    g->broken = 1; /* ranks disagree on the collective: every rank gets an error */
    return 1;
  }
  if (!s->in[c->rank]) {
    s->in[c->rank] = 1; s->arrived++;
    s->send[c->rank] = want->send[0]; s->recv[c->rank] = want->recv[0];
  }
  if (s->arrived == g->n && !s->done) { compute(g, s); s->done = 1; }
  if (!s->done) {
    for (int r = 0; r < g->n; r++) if (!s->in[r] && g->rank[r]->ended && peer_errors) c->asyncerr = 6; /* a peer is gone */
    return 0;
  }
  if (++s->popped == g->n) s->used = 0;
  return 1;
}

/* Streams: queued work runs, in order, when cuStreamQuery finds it done. */
static int enq(fstream *s, fop o) {
  if (!s || !s->live || s->nops == 64) return 1;
  s->ops[s->nops++] = o; s->delay = 2; return 0;
}
static int runstream(fstream *s) {
  int i = 0;
  while (i < s->nops && step(&s->ops[i])) {
    if (s->ops[i].kind == OP_COLL) free(s->ops[i].dst);
    i++;
  }
  memmove(s->ops, s->ops + i, (s->nops - i) * sizeof(fop)); s->nops -= i;
  return s->nops == 0;
}

/* The CUDA driver API. */
int cuInit(unsigned f) { return f == 0 ? 0 : 1; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = ndevices; return 0; }
int cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= ndevices) return 101; *d = ord; return 0; }
int cuDevicePrimaryCtxRetain(fctx **c, int d) { lock(); ctxs[d].dev = d; *c = &ctxs[d]; unlock(); return 0; }
int cuCtxSetCurrent(fctx *c) { current = c; return 0; }
int cuMemAlloc_v2(uintptr_t *p, size_t n) {
  if (!current) return 201;
  void *m = malloc(n); if (!m) return 2;
  lock(); track(m, n, 2); unlock(); *p = (uintptr_t)m; return 0;
}
int cuMemFree_v2(uintptr_t p) { lock(); int bad = untrack(p, 2); unlock(); if (bad) return 1; free((void *)p); return 0; }
int cuMemHostAlloc(void **p, size_t n, unsigned flags) {
  if (!current) return 201;
  *p = malloc(n); if (!*p) return 2;
  lock(); track(*p, n, 1); unlock(); return 0;
}
int cuMemFreeHost(void *p) { lock(); int bad = untrack((uintptr_t)p, 1); unlock(); if (bad) return 1; free(p); return 0; }
static int copyop(void *dst, const void *src, size_t n, uintptr_t dev, fstream *st, int kind, int v) {
  if (!current) return 201;
  lock();
  int r = !isdev((void *)dev, n) ? 1 : enq(st, (fop){kind, dst, src, n, v, 0, 0, 0}) ? 400 : 0;
  unlock(); return r;
}
int cuMemcpyHtoDAsync_v2(uintptr_t d, const void *s, size_t n, fstream *st) { return copyop((void *)d, s, n, d, st, OP_COPY, 0); }
int cuMemcpyDtoHAsync_v2(void *d, uintptr_t s, size_t n, fstream *st) { return copyop(d, (void *)s, n, s, st, OP_COPY, 0); }
int cuMemsetD8Async(uintptr_t d, unsigned char v, size_t n, fstream *st) { return copyop((void *)d, 0, n, d, st, OP_SET, v); }
int cuStreamCreate(fstream **s, unsigned flags) {
  if (!current) return 201;
  if (flags != 1) return 1;
  *s = calloc(1, sizeof **s); (*s)->live = 1; return 0;
}
int cuStreamDestroy_v2(fstream *s) { lock(); int r = (!s || !s->live) ? 400 : 0; if (!r) s->live = 0; unlock(); return r; }
int cuStreamQuery(fstream *s) {
  if (!current) return 201;
  lock();
  int r;
  if (!s || !s->live) r = 400;
  else if (mode == MODE_HANG) r = 600;
  else if (s->delay > 0) { s->delay--; r = 600; }
  else r = runstream(s) ? 0 : 600;
  unlock(); return r;
}
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, uintptr_t p) {
  lock();
  falloc *a = find(p); int r = 0;
  for (unsigned i = 0; i < n && !r; i++) {
    switch (attrs[i]) {
    case 2: *(unsigned *)data[i] = a ? a->type : 0; break;
    case 9: *(int *)data[i] = a ? a->dev : 0; break;
    case 11: *(uintptr_t *)data[i] = a ? a->p : 0; break;
    case 12: *(size_t *)data[i] = a ? a->n : 0; break;
    default: r = 1;
    }
  }
  unlock(); return r;
}
int cuGetErrorString(int e, const char **s) { *s = e == 600 ? "device not ready (fake)" : "fake cuda error"; return 0; }

/* NCCL. */
int ncclGetVersion(int *v) { *v = 22105; return 0; }
/* Ids: a counter, then a pattern that says what made them. */
static void makeid(ncclUniqueId *id, int grow) {
  unsigned long k = ++idcount;
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i ^ (grow ? 0xa5 : 0x5a));
  memcpy(id->internal, &k, sizeof k);
}
static int checkid(const ncclUniqueId *id, int grow) {
  for (int i = 8; i < 128; i++) if (id->internal[i] != (char)(i ^ (grow ? 0xa5 : 0x5a))) return 4;
  return 0;
}
int ncclGetUniqueId(ncclUniqueId *id) { lock(); makeid(id, 0); unlock(); return 0; }

static fcomm *newcomm(int nonblocking) {
  fcomm *c = calloc(1, sizeof *c); c->id = ++commids; c->nonblocking = nonblocking;
  c->inprogress = nonblocking ? 3 : 0; c->ctx = current;
  c->all = comms; comms = c; return c;
}
static fgroup *newgroup(int n) {
  fgroup *g = calloc(1, sizeof *g); g->n = n; g->pipes = calloc((size_t)n * n, sizeof(fpipe));
  g->next = groups; groups = g; return g;
}
static int ready(fcomm *c) { return c->g && c->g->joined == c->g->n; }
static void endcomm(fcomm *c) { if (c->ended) ended_twice++; c->ended = 1; c->ends++; }

/* join adds c to the communicator of id as rank, making it on first use. */
static int join(fcomm *c, int n, const ncclUniqueId *id, int rank) {
  fgroup *g = groups;
  for (; g; g = g->next) if (g->byid && g->joined < g->n && !memcmp(g->id, id->internal, 128)) break;
  if (!g) { g = newgroup(n); g->byid = 1; memcpy(g->id, id->internal, 128); }
  if (g->n != n || g->rank[rank]) return 4;
  g->rank[rank] = c; g->joined++; c->g = g; c->rank = rank;
  return 0;
}
static int initrank(fcomm **comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  if (n < 1 || n > MAXR || rank < 0 || rank >= n || checkid(&id, 0)) return 4;
  if (!current) return 1;
  if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t))) return 4;
  int nonblocking = cfg && !cfg->blocking;
  lock();
  fcomm *c = newcomm(nonblocking);
  int r = join(c, n, &id, rank);
  if (r) { c->ended = 1; unlock(); return r; } /* never given out */
  if (mode == MODE_HANG_INIT) { released = 0; while (!released) wait1(); }
  if (!nonblocking) while (!ready(c)) wait1();
  inits++; *comm = c;
  unlock();
  return nonblocking ? 7 : 0;
}
int ncclCommInitRank(fcomm **comm, int n, ncclUniqueId id, int rank) { return initrank(comm, n, id, rank, 0); }
int ncclCommInitRankConfig(fcomm **comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  if (!cfg) return 4;
  return initrank(comm, n, id, rank, cfg);
}

/* Rendezvous of the children of c's communicator, the seq-th it makes. */
static frdv *rdvfor(int kind, fgroup *parent, int seq) {
  for (frdv *v = rdvs; v; v = v->next) if (v->kind == kind && v->parent == parent && v->seq == seq) return v;
  frdv *v = calloc(1, sizeof *v); v->kind = kind; v->parent = parent; v->seq = seq;
  v->next = rdvs; rdvs = v; return v;
}
/* finish makes the children's communicators once every rank has come. */
static void finish(frdv *v) {
  fgroup *p = v->parent;
  if (v->kind == R_SPLIT) {
    for (int r = 0; r < p->n; r++) {
      if (!v->child[r] || v->child[r]->g) continue;
      int col = v->color[r], m = 0, order[MAXR];
      for (int q = 0; q < p->n; q++) if (v->child[q] && v->color[q] == col) order[m++] = q;
      for (int i = 1; i < m; i++) /* by key, then by parent rank */
        for (int j = i; j > 0 && (v->key[order[j]] < v->key[order[j - 1]] ||
                                  (v->key[order[j]] == v->key[order[j - 1]] && order[j] < order[j - 1])); j--) {
          int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
      fgroup *g = newgroup(m); g->joined = m;
      for (int i = 0; i < m; i++) { fcomm *c = v->child[order[i]]; g->rank[i] = c; c->g = g; c->rank = i; }
    }
  } else {
    int n = v->expected; fgroup *g = newgroup(n); g->joined = n;
    for (int r = 0, i = 0; r < (v->kind == R_SHRINK ? p->n : n); r++) {
      if (!v->child[r]) continue;
      int rank = v->kind == R_SHRINK ? i++ : r; /* a shrink renumbers in the old order */
      g->rank[rank] = v->child[r]; v->child[r]->g = g; v->child[r]->rank = rank;
    }
  }
  v->done = 1;
}
/* await waits for the rendezvous of a blocking call; parent is the caller's
 * parent communicator (NULL for a new rank), whose abort ends the wait. */
static int await(frdv *v, fcomm *child, fcomm *parent) {
  while (!v->done && !v->bad && !(parent && parent->ended)) wait1();
  if (v->done) return 0;
  if (child) { child->ended = 1; child->failed = 2; } /* never given out */
  return v->bad ? 4 : 2;
}

int ncclCommSplit(fcomm *c, int color, int key, fcomm **nc, ncclConfig_t *cfg) {
  lock();
  last[6] = color; last[7] = key;
  if (!cfg || cfg->blocking == c->nonblocking || !ready(c) || c->ended) { unlock(); return 4; } /* the child keeps the parent's mode */
  frdv *v = rdvfor(R_SPLIT, c->g, ++c->children);
  fcomm *child = color < 0 ? NULL : newcomm(c->nonblocking);
  v->in[c->rank] = 1; v->child[c->rank] = child; v->color[c->rank] = color; v->key[c->rank] = key;
  if (++v->arrived == c->g->n) finish(v);
  if (!child) { *nc = NULL; int r = c->nonblocking ? 0 : await(v, 0, c); unlock(); return r; }
  if (!c->nonblocking) {
    int r = await(v, child, c);
    *nc = r ? NULL : child; unlock(); return r;
  }
  *nc = NULL; c->late = nc; c->child = child; c->inprogress = 2;
  unlock(); return 7;
}

#ifndef FAKE_NO_SHRINK_GROW
/* pending: c has collectives or transfers queued and not finished. */
static int pending(fcomm *c) {
  if (!c->stream) return 0;
  for (int i = 0; i < c->stream->nops; i++) if (c->stream->ops[i].c == c) return 1;
  return 0;
}

int ncclCommShrink(fcomm *c, int *excl, int nexcl, fcomm **nc, ncclConfig_t *cfg, int flags) {
  lock();
  if (mode == MODE_FAIL_SHRINK) { unlock(); return 3; }
  if (!c || c->ended || !ready(c) || !nc || !excl || nexcl <= 0 || nexcl >= c->g->n || (flags & ~1)) { unlock(); return 4; }
  if (cfg && (cfg->magic != 0xcafebeef || cfg->blocking == c->nonblocking)) { unlock(); return 4; }
  for (int i = 1; i < nexcl; i++) /* NCCL sorts the caller's list in place */
    for (int j = i; j > 0 && excl[j] < excl[j - 1]; j--) { int t = excl[j]; excl[j] = excl[j - 1]; excl[j - 1] = t; }
  for (int i = 0; i < nexcl; i++)
    if (excl[i] < 0 || excl[i] >= c->g->n || excl[i] == c->rank || (i > 0 && excl[i] == excl[i - 1])) { unlock(); return 4; }
  last_shrink[0] = flags; last_shrink[1] = nexcl; memcpy(last_shrink + 2, excl, nexcl * sizeof(int));
  if (flags & 1) c->killed = 1; /* NCCL_SHRINK_ABORT: end what the parent left running */
  if (c->asyncerr) { int r = c->asyncerr; unlock(); return r; } /* ncclCommEnsureReady */
  if (!(flags & 1) && pending(c)) { unlock(); return 5; }
  frdv *v = rdvfor(R_SHRINK, c->g, ++c->children);
  if (v->arrived == 0) { v->expected = c->g->n - nexcl; v->nexcl = nexcl; memcpy(v->excl, excl, nexcl * sizeof(int)); }
  else if (v->nexcl != nexcl || memcmp(v->excl, excl, nexcl * sizeof(int))) v->bad = 1; /* ranks disagree on who leaves */
  fcomm *child = newcomm(c->nonblocking);
  v->in[c->rank] = 1; v->child[c->rank] = child;
  if (!v->bad && ++v->arrived == v->expected) finish(v);
  int r = await(v, child, c);
  if (!r) shrinks++;
  *nc = r ? NULL : child;
  unlock(); return r;
}

int ncclCommGetUniqueId(fcomm *c, ncclUniqueId *id) {
  lock();
  if (!c || c->ended || !ready(c) || !id) { unlock(); return 4; }
  frdv *v = rdvfor(R_GROW, c->g, c->children + 1);
  if (v->hasid) { unlock(); return 5; } /* one id per grow */
  makeid(&v->growid, 1); v->hasid = 1; *id = v->growid; growids++;
  unlock(); return 0;
}

int ncclCommGrow(fcomm *c, int n, const ncclUniqueId *id, int rank, fcomm **nc, ncclConfig_t *cfg) {
  if (!nc || n <= 0 || n > MAXR) return 4;
  if (mode == MODE_FAIL_SHRINK) return 3;
  lock();
  *nc = NULL;
  frdv *v = NULL;
  if (c) {
    if (c->ended || !ready(c) || n <= c->g->n || rank != -1 || c->asyncerr) { unlock(); return 4; }
    if (cfg && (cfg->magic != 0xcafebeef || cfg->blocking == c->nonblocking)) { unlock(); return 4; }
    v = rdvfor(R_GROW, c->g, ++c->children);
    while (!v->hasid && !c->ended) wait1(); /* the boundary ranks wait for the coordinator's handle */
    if (!v->hasid || (id && memcmp(id, &v->growid, sizeof *id))) { unlock(); return 4; }
    rank = c->rank;
  } else {
    if (!id || checkid(id, 1) || rank < 0 || rank >= n || !current) { unlock(); return 4; }
    for (v = rdvs; v; v = v->next) if (v->kind == R_GROW && v->hasid && !memcmp(&v->growid, id, sizeof *id)) break;
    if (!v || v->consumed || rank < v->parent->n) { unlock(); return 4; }
  }
  if (v->arrived == 0) v->expected = n;
  else if (v->expected != n) v->bad = 1;
  if (v->child[rank]) v->bad = 1;
  fcomm *child = newcomm(c ? c->nonblocking : cfg && !cfg->blocking);
  if (!v->bad) { v->child[rank] = child; v->in[rank] = 1; }
  if (!v->bad && ++v->arrived == v->expected) { finish(v); v->consumed = 1; }
  int r = await(v, child, c);
  if (!r) grows++;
  *nc = r ? NULL : child;
  unlock(); return r;
}
#endif

int ncclCommFinalize(fcomm *c) { return 0; }
int ncclCommDestroy(fcomm *c) { lock(); destroys++; endcomm(c); unlock(); return 0; }
int ncclCommAbort(fcomm *c) { lock(); aborts++; endcomm(c); unlock(); return 0; }
int ncclCommGetAsyncError(fcomm *c, int *res) {
  lock();
  if (c->asyncerr) *res = c->asyncerr;
  else if (c->failed) *res = c->failed;
  else if (c->g && c->g->broken) *res = 5;
  else if (!ready(c)) *res = 7; /* the other ranks have not all come */
  else if (c->inprogress > 0 && --c->inprogress > 0) *res = 7;
  else if (c->late && !c->child->g && !c->child->failed) *res = 7;
  else {
    if (c->late) { *c->late = c->child; c->late = 0; }
    *res = 0;
  }
  unlock(); return 0;
}
int ncclCommCount(fcomm *c, int *n) { lock(); *n = c->g ? c->g->n : 0; unlock(); return 0; }
int ncclCommUserRank(fcomm *c, int *r) { lock(); *r = c->rank; unlock(); return 0; }
const char *ncclGetErrorString(int r) {
  switch (r) {
  case 5: return "invalid usage (fake: wrong stream or context, or outstanding operations)";
  case 6: return "remote process exited or there was a network error (fake)";
  }
  return "fake nccl error";
}
const char *ncclGetLastError(fcomm *c) { return ""; }

/* A launch: the context and the stream must be the communicator's. The
 * caller holds the lock. */
static int launch(fcomm *c, fstream *st) {
  if (!c || c->ended || !ready(c)) return 5;
  if (current != c->ctx) return 5;
  if (!st || !st->live) { wrong_stream++; return 5; }
  if (!c->stream) c->stream = st;
  if (st != c->stream) { wrong_stream++; return 5; }
  if (mode == MODE_BLOCK_LAUNCH) { while (!c->ended) wait1(); return 2; }
  if (mode == MODE_ASYNC_ERROR) c->asyncerr = 6;
  return 0;
}
static int done(fcomm *c) {
  if (!c->nonblocking) return 0;
  c->inprogress = 2; return 7;
}
static int coll(long call, const void *s, void *r, size_t n, int dt, int op, int root, fcomm *c, fstream *st) {
  lock();
  rec(call, n, dt, op, root, -1);
  int e = launch(c, st);
  if (e) { unlock(); return e; }
  int ranks = c->g->n, me = c->rank;
  size_t k = n * dtsize(dt);
  size_t sk = call == C_REDUCESCATTER ? k * ranks : k, rk = call == C_ALLGATHER ? k * ranks : k;
  int readsend = call != C_BROADCAST || me == root, writesrecv = call != C_REDUCE || me == root;
  if ((call == C_BROADCAST || call == C_REDUCE) && (root < 0 || root >= ranks)) { unlock(); return 4; }
  if ((readsend && !isdev(s, sk)) || (writesrecv && !isdev(r, rk))) { unlock(); return 4; }
  fslot *want = calloc(1, sizeof *want);
  want->kind = (int)call; want->count = n; want->dt = dt; want->op = op; want->root = root;
  want->send[0] = s; want->recv[0] = r;
  fop o = {OP_COLL, (char *)want, 0, 0, 0, c, c->seq++, 0};
  if (enq(st, o)) { free(want); unlock(); return 3; }
  int d = done(c);
  unlock(); return d;
}
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, fcomm *c, fstream *st) { return coll(C_ALLREDUCE, s, r, n, dt, op, -1, c, st); }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, fcomm *c, fstream *st) { return coll(C_BROADCAST, s, r, n, dt, -1, root, c, st); }
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, fcomm *c, fstream *st) { return coll(C_REDUCE, s, r, n, dt, op, root, c, st); }
int ncclAllGather(const void *s, void *r, size_t n, int dt, fcomm *c, fstream *st) { return coll(C_ALLGATHER, s, r, n, dt, -1, -1, c, st); }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, fcomm *c, fstream *st) { return coll(C_REDUCESCATTER, s, r, n, dt, op, -1, c, st); }
static int p2p(long call, void *b, size_t n, int dt, int peer, fcomm *c, fstream *st) {
  lock();
  rec(call, n, dt, -1, -1, peer);
  int e = launch(c, st);
  if (e) { unlock(); return e; }
  size_t k = n * dtsize(dt);
  if (peer < 0 || peer >= c->g->n || !isdev(b, k)) { unlock(); return 4; }
  fop o = {call == 6 ? OP_PUSH : OP_POP, b, b, k, 0, c, 0, peer};
  int r = enq(st, o) ? 3 : 0;
  unlock(); return r;
}
int ncclSend(const void *b, size_t n, int dt, int peer, fcomm *c, fstream *st) { return p2p(6, (void *)b, n, dt, peer, c, st); }
int ncclRecv(void *b, size_t n, int dt, int peer, fcomm *c, fstream *st) { return p2p(7, b, n, dt, peer, c, st); }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
