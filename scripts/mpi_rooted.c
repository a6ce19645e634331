/* Open MPI's rooted collectives and its barrier, for
 * scripts/compare-mpi.sh: gather, scatter and reduce (float32, sum) with
 * root 0, sizes as collbench's --coll defines them (S, the whole array):
 *   gather:  S = the gathered array at the root, S/n from each rank
 *   scatter: S = the root's array, S/n to each rank
 *   reduce:  S bytes from every rank, reduced at the root
 *   barrier: no data; one row of 0 bytes
 * Timing as ../shared/peers/mpi_colls.c: 3 untimed calls, a barrier, then
 * ITERS*10 timed calls (ITERS/4 from 8 MiB), and the slowest rank's mean.
 * Usage: mpi_rooted gather|scatter|reduce|barrier MINBYTES MAXBYTES ITERS
 * Prints "bytes time_us" rows, sizes doubling from MINBYTES. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int call(const char *coll, float *in, float *out, long count, long block) {
  if (!strcmp(coll, "barrier")) return MPI_Barrier(MPI_COMM_WORLD);
  if (!strcmp(coll, "gather")) return MPI_Gather(in, block, MPI_FLOAT, out, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (!strcmp(coll, "scatter")) return MPI_Scatter(in, block, MPI_FLOAT, out, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
  return MPI_Reduce(in, out, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *coll = argc > 1 ? argv[1] : "";
  if (argc < 5 || (strcmp(coll, "gather") && strcmp(coll, "scatter") && strcmp(coll, "reduce") && strcmp(coll, "barrier"))) {
    if (!rank) fprintf(stderr, "usage: mpi_rooted gather|scatter|reduce|barrier MINBYTES MAXBYTES ITERS\n");
    MPI_Finalize();
    return 2;
  }
  long minBytes = atol(argv[2]), maxBytes = atol(argv[3]);
  int iters = atoi(argv[4]), barrier = !strcmp(coll, "barrier");
  if (barrier) minBytes = maxBytes = 0;
  long room = maxBytes / 4 + n; /* elements, with room for a block per rank */
  float *in = malloc(room * sizeof(float)), *out = malloc(room * sizeof(float));
  for (long i = 0; i < room; i++) in[i] = (float)(rank + 1);
  if (!rank) printf("# %s np=%d\n%12s %10s\n", coll, n, "bytes", "time_us");
  for (long b = minBytes; b <= maxBytes; b = b > 0 ? b * 2 : 1) {
    long count = b / 4 > 0 ? b / 4 : 1, block = count / n > 0 ? count / n : 1;
    long s = barrier ? 0 : strcmp(coll, "reduce") ? block * n * 4 : count * 4;
    int timed = b >= (8L << 20) ? (iters / 4 > 0 ? iters / 4 : 1) : iters * 10;
    for (int w = 0; w < 3; w++) call(coll, in, out, count, block);
    /* The barrier's only row gets an untimed round first, as the others
     * get a smaller first size from compare-mpi.sh. */
    if (barrier)
      for (int i = 0; i < timed; i++) call(coll, in, out, count, block);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < timed; i++) call(coll, in, out, count, block);
    double mean = (MPI_Wtime() - t0) / timed, slowest;
    MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (!rank) printf("%12ld %10.3f\n", s, slowest * 1e6);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
