/* The machine's floor for the smallest collective: two processes, one per
 * core, and in each iteration both send BYTES to the other and wait for
 * what the other sent, with nothing else around it. It is the least a
 * 2-rank all-reduce of BYTES can cost, whoever implements it:
 *
 *   tcp: one write and one polled recv on a loopback TCP connection with
 *        TCP_NODELAY (two system calls);
 *   shm: the payload and an iteration number stored in this process's
 *        cache line of a shared mapping, then the peer's line polled (one
 *        cache line each way).
 *
 * Usage: floor tcp|shm [ITERS [BYTES]]   (default 20000 iterations, 8 bytes)
 * Prints "floor TRANSPORT BYTES US": the slower process's mean time per
 * iteration in microseconds, after 1000 untimed iterations.
 * scripts/compare-mpi.sh runs it beside collbench and Open MPI.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { warmup = 1000, maxBytes = 4096, line = 64 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

/* pin binds this process to the rank-th CPU it may run on, as mpirun
 * --bind-to core does; with one CPU it leaves it. */
static void pin(int rank) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (seen++ == rank) {
      CPU_ZERO(&set);
      CPU_SET(c, &set);
      sched_setaffinity(0, sizeof set, &set);
      return;
    }
  }
}

/* One exchange over TCP: write, then poll recv until the peer's bytes are in. */
static void tcpExchange(int fd, const char *out, char *in, int bytes) {
  for (int done = 0; done < bytes;) {
    ssize_t n = write(fd, out + done, bytes - done);
    if (n < 0 && errno != EAGAIN) die("write");
    if (n > 0) done += n;
  }
  for (int got = 0; got < bytes;) {
    ssize_t n = recv(fd, in + got, bytes - got, MSG_DONTWAIT);
    if (n == 0) die("recv: peer closed");
    if (n < 0 && errno != EAGAIN) die("recv");
    if (n > 0) got += n;
  }
}

/* A rank's two slots (they alternate by iteration, so a rank never writes
 * the slot its peer may still read): an iteration number, then the payload. */
struct slot {
  _Atomic uint64_t iter;
  char data[maxBytes];
} __attribute__((aligned(line)));

static void shmExchange(struct slot (*slots)[2], int rank, uint64_t iter, const char *out, char *in, int bytes) {
  struct slot *mine = &slots[rank][iter & 1], *theirs = &slots[1 - rank][iter & 1];
  memcpy(mine->data, out, bytes);
  atomic_store_explicit(&mine->iter, iter, memory_order_release);
  while (atomic_load_explicit(&theirs->iter, memory_order_acquire) < iter) {
  }
  memcpy(in, theirs->data, bytes);
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "tcp") != 0 && strcmp(argv[1], "shm") != 0)) {
    fprintf(stderr, "usage: floor tcp|shm [ITERS [BYTES]]\n");
    return 2;
  }
  int tcp = strcmp(argv[1], "tcp") == 0;
  long iters = argc > 2 ? atol(argv[2]) : 20000;
  int bytes = argc > 3 ? atoi(argv[3]) : 8;
  if (iters < 1 || bytes < 1 || bytes > maxBytes) {
    fprintf(stderr, "floor: ITERS must be positive and BYTES 1 to %d\n", maxBytes);
    return 2;
  }

  int lfd = -1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct slot (*slots)[2] = NULL;
  if (tcp) {
    socklen_t len = sizeof addr;
    if ((lfd = socket(AF_INET, SOCK_STREAM, 0)) < 0) die("socket");
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &len) != 0)
      die("listen");
  } else {
    slots = mmap(NULL, 2 * sizeof *slots, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED) die("mmap");
    memset(slots, 0, 2 * sizeof *slots);
  }
  int report[2]; /* the child's mean, to the parent */
  if (pipe(report) != 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  int rank = child == 0;
  pin(rank);

  int fd = -1;
  if (tcp) {
    if (rank == 1) {
      if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        die("connect");
    } else if ((fd = accept(lfd, NULL, NULL)) < 0) {
      die("accept");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  char out[maxBytes], in[maxBytes];
  memset(out, rank + 1, bytes);
  double start = 0;
  for (long i = 0; i < warmup + iters; i++) {
    if (i == warmup) start = now();
    if (tcp)
      tcpExchange(fd, out, in, bytes);
    else
      shmExchange(slots, rank, (uint64_t)i + 1, out, in, bytes);
    if (in[0] != 2 - rank) {
      fprintf(stderr, "floor: rank %d got byte %d, want %d\n", rank, in[0], 2 - rank);
      return 1;
    }
  }
  double us = (now() - start) / iters * 1e6;
  if (rank == 1) {
    if (write(report[1], &us, sizeof us) != sizeof us) die("report");
    return 0;
  }
  double theirs = 0;
  if (read(report[0], &theirs, sizeof theirs) != sizeof theirs) die("read report");
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("floor %s %d %.2f\n", argv[1], bytes, us > theirs ? us : theirs);
  return 0;
}
