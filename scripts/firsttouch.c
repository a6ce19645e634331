/* What a first touch of shared memory costs on this machine: the cost the
 * shm transport's rings pay for each page the first time a message passes
 * through it (see ring.rewind in transport/shm/ring.go).
 *
 * A file of MiB mebibytes in /dev/shm is mapped twice, as a producer and a
 * consumer map a ring; the program writes one byte of every page through
 * the first mapping (the page is allocated and mapped), reads one of every
 * page through the second (mapped again), then writes them all once more
 * (already there), and prints the microseconds per page of each.
 *
 *   gcc -O2 -o /tmp/firsttouch scripts/firsttouch.c && /tmp/firsttouch [MiB]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 1) << 20, page = (size_t)sysconf(_SC_PAGESIZE);
  size_t pages = bytes / page;
  char name[64];
  snprintf(name, sizeof name, "/dev/shm/collkit-firsttouch-%d", (int)getpid());
  int fd = open(name, O_CREAT | O_RDWR | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
    perror(name);
    return 1;
  }
  unlink(name);
  char *w = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  char *r = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (w == MAP_FAILED || r == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  volatile char sink = 0;
  double t0 = now_us();
  for (size_t i = 0; i < bytes; i += page) w[i] = 1;
  double t1 = now_us();
  for (size_t i = 0; i < bytes; i += page) sink += r[i];
  double t2 = now_us();
  for (size_t i = 0; i < bytes; i += page) w[i] = 2;
  double t3 = now_us();
  printf("first write %.2f us/page, first read through a second mapping %.2f us/page, write again %.3f us/page (%zu pages)\n",
         (t1 - t0) / pages, (t2 - t1) / pages, (t3 - t2) / pages, pages);
  return 0;
}
