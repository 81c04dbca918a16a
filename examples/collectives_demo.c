/*
 * nexar collectives demo: every rank is its own process; they find each other
 * through the environment a launcher left (nexar-run, torchrun, Slurm, ...),
 * then run allreduce, broadcast, allgather and barrier at a few sizes, check
 * every result, and rank 0 prints a table of sizes, times and bandwidths.
 * Uses only the public C ABI.
 *
 *   nexar-run -n 4 -- nexar-collectives-demo [max_bytes]
 *
 * Times are the median of a few runs (3 from 1 MiB up, else 7), taken as the
 * slowest rank's time (allreduce MAX over ranks). "algbw" is the bytes each rank contributes /
 * time; "busbw" is what crossed each rank's link per second, as nccl-tests count it (allreduce
 * 2(n-1)/n x algbw, allgather (n-1) x algbw, broadcast 1 x algbw).
 */
#include <nexar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RUNS 7

typedef struct {
  const char *name;
  size_t bytes; /* per rank */
  nexar_status_t status;
  char error[256];
  double seconds; /* median */
  int bad;        /* wrong elements */
  double bus_factor;
} row;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static float value_of(uint32_t rank, size_t i) {
  return (float)((rank + 1) * 0.5 + (double)(i % 97));
}

static const char *human(size_t b, char *buf, size_t n) {
  if (b >= (1u << 20))
    snprintf(buf, n, "%zu MiB", b >> 20);
  else if (b >= 1024)
    snprintf(buf, n, "%zu KiB", b >> 10);
  else
    snprintf(buf, n, "%zu B", b);
  return buf;
}

/* Runs one collective `runs` times; returns the status of the first failure. */
static nexar_status_t run_op(nexar_comm_t *comm, const char *op, size_t count, float *send,
                             float *recv, int runs, double *times, int *bad) {
  uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm), r;
  size_t i;
  int k;
  *bad = 0;
  for (k = 0; k < runs; k++) {
    nexar_status_t s;
    double t0;
    for (i = 0; i < count; i++)
      send[i] = value_of(me, i);
    t0 = now_s();
    if (!strcmp(op, "allreduce")) {
      s = nexar_allreduce(comm, send, recv, count, NEXAR_DTYPE_F32, NEXAR_OP_SUM, NULL, NULL);
    } else if (!strcmp(op, "broadcast")) {
      if (me != 0) memset(send, 0, count * sizeof *send);
      s = nexar_broadcast(comm, send, count, NEXAR_DTYPE_F32, 0, NULL, NULL);
    } else if (!strcmp(op, "allgather")) {
      s = nexar_allgather(comm, send, recv, count, NEXAR_DTYPE_F32, NULL, NULL);
    } else {
      s = nexar_barrier(comm, NULL, NULL);
    }
    times[k] = now_s() - t0;
    if (s != NEXAR_OK) return s;
    /* Check every element. */
    if (!strcmp(op, "allreduce")) {
      for (i = 0; i < count; i++) {
        float want = 0;
        for (r = 0; r < n; r++)
          want += value_of(r, i);
        if (recv[i] != want) (*bad)++;
      }
    } else if (!strcmp(op, "broadcast")) {
      for (i = 0; i < count; i++)
        if (send[i] != value_of(0, i)) (*bad)++;
    } else if (!strcmp(op, "allgather")) {
      for (r = 0; r < n; r++)
        for (i = 0; i < count; i++)
          if (recv[r * count + i] != value_of(r, i)) (*bad)++;
    }
  }
  return NEXAR_OK;
}

int main(int argc, char **argv) {
  size_t max_bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)4 << 20;
  size_t sizes[8], nsizes = 0, s, b;
  const char *ops[] = {"allreduce", "broadcast", "allgather", "barrier"};
  row rows[32];
  size_t nrows = 0, o;
  nexar_comm_t *comm = NULL;
  uint32_t me, n;
  float *send, *recv;
  int failures = 0;

  nexar_status_t st = nexar_comm_init_from_env(&comm);
  if (st != NEXAR_OK) {
    fprintf(stderr, "collectives_demo: %s\n%s\n", nexar_last_error_message(),
            st == NEXAR_ERR_NOT_FOUND ? "start it with a launcher, e.g.: nexar-run -n 4 -- "
                                        "nexar-collectives-demo"
                                      : "");
    return 1;
  }
  me = nexar_comm_rank(comm);
  n = nexar_comm_size(comm);
  for (b = 4096; b <= max_bytes && nsizes < 8; b *= 16)
    sizes[nsizes++] = b;
  if (nsizes == 0) sizes[nsizes++] = 4096;
  send = malloc(sizes[nsizes - 1]);
  recv = malloc(sizes[nsizes - 1] * n);

  for (o = 0; o < 4; o++) {
    for (s = 0; s < nsizes; s++) {
      row *rw = &rows[nrows++];
      double times[MAX_RUNS];
      const size_t count = sizes[s] / sizeof(float);
      const int runs = sizes[s] >= ((size_t)1 << 20) ? 3 : MAX_RUNS;
      memset(rw, 0, sizeof *rw);
      rw->name = ops[o];
      rw->bytes = !strcmp(ops[o], "barrier") ? 0 : sizes[s];
      rw->bus_factor = !strcmp(ops[o], "allreduce")   ? 2.0 * (n - 1) / n
                       : !strcmp(ops[o], "allgather") ? (double)(n - 1)
                                                      : 1.0;
      /* One warm-up run, then the timed ones. */
      rw->status = run_op(comm, ops[o], count, send, recv, 1, times, &rw->bad);
      if (rw->status == NEXAR_OK)
        rw->status = run_op(comm, ops[o], count, send, recv, runs, times, &rw->bad);
      if (rw->status != NEXAR_OK) {
        snprintf(rw->error, sizeof rw->error, "%s", nexar_last_error_message());
        failures++;
        break; /* next operation: the other sizes would fail the same way */
      }
      qsort(times, (size_t)runs, sizeof times[0], cmp_double);
      rw->seconds = times[runs / 2];
      if (rw->bad) failures++;
      if (!strcmp(ops[o], "barrier")) break; /* no size */
    }
  }

  /* The slowest rank's time. */
  {
    double *t = malloc(sizeof(double) * nrows), *mx = malloc(sizeof(double) * nrows);
    size_t i;
    for (i = 0; i < nrows; i++)
      t[i] = rows[i].seconds;
    st = nexar_allreduce(comm, t, mx, nrows, NEXAR_DTYPE_F64, NEXAR_OP_MAX, NULL, NULL);
    for (i = 0; i < nrows; i++)
      rows[i].seconds = mx[i];
    free(t);
    free(mx);
  }
  if (st != NEXAR_OK) {
    fprintf(stderr, "collectives_demo: rank %u: allreduce of the times: %s\n", me,
            nexar_last_error_message());
    failures++;
  }

  if (me == 0) {
    size_t i;
    char sz[32];
    printf("\nnexar collectives: %u ranks, float32, median time (slowest rank)\n\n", n);
    printf("%-10s %10s %12s %12s %12s  %s\n", "operation", "size/rank", "time", "algbw", "busbw",
           "check");
    printf("%-10s %10s %12s %12s %12s  %s\n", "----------", "---------", "----", "-----", "-----",
           "-----");
    for (i = 0; i < nrows; i++) {
      row *rw = &rows[i];
      if (rw->status != NEXAR_OK) {
        printf("%-10s %10s  FAILED: %s\n", rw->name, "", rw->error);
        continue;
      }
      if (rw->bytes == 0) {
        printf("%-10s %10s %9.3f ms %12s %12s  %s\n", rw->name, "-", rw->seconds * 1e3, "-", "-",
               "ok");
        continue;
      }
      {
        double alg = (double)rw->bytes / rw->seconds / 1e9;
        printf("%-10s %10s %9.3f ms %7.3f GB/s %7.3f GB/s  %s\n", rw->name,
               human(rw->bytes, sz, sizeof sz), rw->seconds * 1e3, alg, alg * rw->bus_factor,
               rw->bad ? "WRONG RESULTS" : "ok");
      }
    }
    printf("\n%s\n", failures ? "some collectives FAILED (see above)"
                              : "every collective returned correct results");
    fflush(stdout);
  }
  free(send);
  free(recv);
  /* Everyone has printed before anyone leaves. */
  nexar_barrier(comm, NULL, NULL);
  nexar_comm_destroy(comm);
  return failures ? 2 : 0;
}
