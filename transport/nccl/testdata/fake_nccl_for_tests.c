/*
 * FAKE NCCL + CUDA runtime, for testing collkit's purego binding ONLY.
 *
 * It is built by the tests of package transport/nccl into a temporary
 * directory and loaded through COLLKIT_NCCL_LIB/COLLKIT_CUDART_LIB set in a
 * test-only search environment. It is never built into collkit, never on any
 * search path, and users cannot select it. It implements the few symbols
 * collkit binds on host memory for a world of ONE rank (so every collective
 * is a copy), checks the arguments the binding passes (the 128-byte unique
 * id by value, the config, arguments on the stack), records the last call so
 * tests can check the dtype/op/root/count that crossed the ABI, and can be
 * told to hang a stream or report an asynchronous error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size; unsigned int magic; unsigned int version;
  int blocking; int cgaClusterSize; int minCTAs; int maxCTAs;
  const char *netName; int splitShare;
} ncclConfig_t;
typedef struct { int id; int inprogress; int asyncerr; } fcomm;

enum { MODE_OK = 0, MODE_HANG = 1, MODE_ASYNC_ERROR = 2 };
static int mode, pending, aborts, destroys, commids;
static long last[8]; /* call, count, dtype, op, root, peer, color, key */
static char fifo[1 << 20]; static size_t fifo_len;

void fake_set_mode(int m) { mode = m; }
int fake_aborts(void) { return aborts; }
int fake_destroys(void) { return destroys; }
void fake_last(long *out) { memcpy(out, last, sizeof last); }

static void rec(long call, long count, long dt, long op, long root, long peer) {
  last[0] = call; last[1] = count; last[2] = dt; last[3] = op; last[4] = root; last[5] = peer;
}
static size_t dtsize(int dt) {
  switch (dt) { case 0: case 1: return 1; case 2: case 3: return 4; case 4: case 5: return 8;
  case 6: case 9: return 2; case 7: return 4; case 8: return 8; }
  return 0;
}
static int enqueue(fcomm *c) { pending = 3; c->inprogress = 0; if (mode == MODE_ASYNC_ERROR) c->asyncerr = 6; return 0; }

int ncclGetVersion(int *v) { *v = 22105; return 0; }
int ncclGetUniqueId(ncclUniqueId *id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i ^ 0x5a); return 0; }
static int checkid(ncclUniqueId id) {
  for (int i = 0; i < 128; i++) if (id.internal[i] != (char)(i ^ 0x5a)) return 4;
  return 0;
}
static fcomm *newcomm(void) { fcomm *c = calloc(1, sizeof *c); c->id = ++commids; c->inprogress = 3; return c; }
int ncclCommInitRank(fcomm **comm, int n, ncclUniqueId id, int rank) {
  if (n != 1 || rank != 0 || checkid(id)) return 4;
  *comm = newcomm(); (*comm)->inprogress = 0; return 0;
}
int ncclCommInitRankConfig(fcomm **comm, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  if (n != 1 || rank != 0 || checkid(id)) return 4;
  if (!cfg || cfg->magic != 0xcafebeef || cfg->blocking != 0 || cfg->size != sizeof(ncclConfig_t)) return 4;
  *comm = newcomm(); return 7; /* in progress: the binding must poll */
}
int ncclCommSplit(fcomm *c, int color, int key, fcomm **nc, ncclConfig_t *cfg) {
  last[6] = color; last[7] = key;
  if (color < 0) { *nc = NULL; return 0; }
  *nc = newcomm(); return 7;
}
int ncclCommFinalize(fcomm *c) { return 0; }
int ncclCommDestroy(fcomm *c) { destroys++; free(c); return 0; }
int ncclCommAbort(fcomm *c) { aborts++; free(c); return 0; }
int ncclCommGetAsyncError(fcomm *c, int *res) {
  if (c->asyncerr) { *res = c->asyncerr; return 0; }
  if (c->inprogress > 0) { c->inprogress--; *res = 7; return 0; }
  *res = 0; return 0;
}
int ncclCommCount(fcomm *c, int *n) { *n = 1; return 0; }
int ncclCommUserRank(fcomm *c, int *r) { *r = 0; return 0; }
const char *ncclGetErrorString(int r) { return r == 6 ? "remote process exited or there was a network error (fake)" : "fake nccl error"; }
const char *ncclGetLastError(fcomm *c) { return ""; }
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, fcomm *c, void *st) {
  rec(1, n, dt, op, -1, -1); memmove(r, s, n * dtsize(dt)); return enqueue(c);
}
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, fcomm *c, void *st) {
  rec(2, n, dt, -1, root, -1); memmove(r, s, n * dtsize(dt)); return enqueue(c);
}
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, fcomm *c, void *st) {
  rec(3, n, dt, op, root, -1); memmove(r, s, n * dtsize(dt)); return enqueue(c);
}
int ncclAllGather(const void *s, void *r, size_t n, int dt, fcomm *c, void *st) {
  rec(4, n, dt, -1, -1, -1); memmove(r, s, n * dtsize(dt)); return enqueue(c);
}
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, fcomm *c, void *st) {
  rec(5, n, dt, op, -1, -1); memmove(r, s, n * dtsize(dt)); return enqueue(c);
}
int ncclSend(const void *b, size_t n, int dt, int peer, fcomm *c, void *st) {
  rec(6, n, dt, -1, -1, peer);
  if (peer != 0 || fifo_len + n * dtsize(dt) > sizeof fifo) return 4;
  memcpy(fifo + fifo_len, b, n * dtsize(dt)); fifo_len += n * dtsize(dt); return 0;
}
int ncclRecv(void *b, size_t n, int dt, int peer, fcomm *c, void *st) {
  rec(7, n, dt, -1, -1, peer);
  size_t k = n * dtsize(dt);
  if (peer != 0 || k > fifo_len) return 4;
  memcpy(b, fifo, k); memmove(fifo, fifo + k, fifo_len - k); fifo_len -= k; return 0;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { pending = 3; return 0; }

int cudaGetDeviceCount(int *n) { *n = 1; return 0; }
int cudaSetDevice(int d) { return d == 0 ? 0 : 101; }
int cudaMalloc(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMallocHost(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) {
  if (kind != 1 && kind != 2) return 21;
  memcpy(d, s, n); return 0;
}
int cudaStreamCreateWithFlags(void **s, unsigned flags) { *s = malloc(1); return flags == 1 ? 0 : 1; }
int cudaStreamDestroy(void *s) { free(s); return 0; }
int cudaStreamQuery(void *s) {
  if (mode == MODE_HANG) return 600;
  if (pending > 0) { pending--; return 600; }
  return 0;
}
const char *cudaGetErrorString(int e) { return "fake cuda error"; }
int cudaRuntimeGetVersion(int *v) { *v = 12040; return 0; }
int cudaDriverGetVersion(int *v) { *v = 12040; return 0; }
