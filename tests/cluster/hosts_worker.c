/*
 * A worker for the test of collectives across hosts (cluster_hosts_test),
 * written against the public C ABI only: it joins through
 * nexar_comm_init_from_env, runs allreduces of several sizes (u64 sums, and
 * an f64 sum of exactly representable values) and broadcasts with exact
 * checks, and reports what one allreduce and one broadcast of
 * HOSTS_WORKER_COUNT u64 elements (default 512 Ki: 4 MiB) sent, from
 * nexar_comm_get_stats, each measured after a warm-up of the same call:
 *
 *   JOINED rank=R size=N
 *   ALLREDUCE_OK rank=R count=C                 (for each size)
 *   BROADCAST_OK rank=R root=T count=C
 *   STATS rank=R op=allreduce|broadcast bytes=B quic=Q shm=S shm_collectives=K
 *   DONE rank=R                                 (exit 0)
 *   ERROR <what> status=S <message>             (exit 4)
 *
 * HOSTS_WORKER_ROOT=T: the broadcasts' root (default 0).
 * HOSTS_WORKER_BENCH=K: instead, K allreduces of the measured size, each
 * timed between two barriers: "TIME rank=R us=MICROSECONDS" (scripts/).
 */
#include <nexar.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static nexar_comm_t *comm;
static unsigned me, n;

static int fail(const char *what, nexar_status_t s) {
  printf("ERROR %s status=%d %s\n", what, s, nexar_last_error_message());
  return 4;
}

static uint64_t value(unsigned rank, size_t i) {
  return (uint64_t)(rank + 1) * (i % 1000 + 1) + i;
}

/* The sum of value(r, i) over every rank. */
static uint64_t expected(size_t i) {
  return (uint64_t)n * (n + 1) / 2 * (i % 1000 + 1) + (uint64_t)n * i;
}

static int allreduce_u64(size_t count, uint64_t *in, uint64_t *out) {
  size_t i;
  for (i = 0; i < count; i++) {
    in[i] = value(me, i);
    out[i] = 0;
  }
  nexar_status_t s =
      nexar_allreduce(comm, in, out, count, NEXAR_DTYPE_U64, NEXAR_OP_SUM, NULL, NULL);
  if (s != NEXAR_OK) return fail("allreduce", s);
  for (i = 0; i < count; i++)
    if (out[i] != expected(i)) {
      printf("ERROR allreduce status=0 count=%zu element %zu is %llu, expected %llu\n", count, i,
             (unsigned long long)out[i], (unsigned long long)expected(i));
      return 4;
    }
  return 0;
}

/* Halves and small integers: every partial sum is exact in any order. */
static int allreduce_f64_in_place(size_t count, double *buf) {
  size_t i;
  for (i = 0; i < count; i++)
    buf[i] = (double)(me + 1) * 0.5 + (double)(i % 64);
  nexar_status_t s =
      nexar_allreduce(comm, buf, buf, count, NEXAR_DTYPE_F64, NEXAR_OP_SUM, NULL, NULL);
  if (s != NEXAR_OK) return fail("allreduce f64", s);
  for (i = 0; i < count; i++) {
    const double want = (double)n * (n + 1) / 4.0 + (double)n * (double)(i % 64);
    if (buf[i] != want) {
      printf("ERROR allreduce f64 status=0 element %zu is %.17g, expected %.17g\n", i, buf[i],
             want);
      return 4;
    }
  }
  return 0;
}

static int broadcast_checked(size_t count, uint64_t *buf, unsigned root) {
  size_t i;
  for (i = 0; i < count; i++)
    buf[i] = me == root ? value(root, i) * 3 : 0;
  nexar_status_t s = nexar_broadcast(comm, buf, count, NEXAR_DTYPE_U64, root, NULL, NULL);
  if (s != NEXAR_OK) return fail("broadcast", s);
  for (i = 0; i < count; i++)
    if (buf[i] != value(root, i) * 3) {
      printf("ERROR broadcast status=0 element %zu is %llu\n", i, (unsigned long long)buf[i]);
      return 4;
    }
  return 0;
}

static int stats(nexar_stats_t *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  nexar_status_t s = nexar_comm_get_stats(comm, st);
  return s == NEXAR_OK ? 0 : fail("stats", s);
}

static void report(const char *op, size_t bytes, const nexar_stats_t *a, const nexar_stats_t *b) {
  printf("STATS rank=%u op=%s bytes=%zu quic=%llu shm=%llu shm_collectives=%llu\n", me, op, bytes,
         (unsigned long long)(b->bytes_sent - a->bytes_sent),
         (unsigned long long)(b->shm_bytes_sent - a->shm_bytes_sent),
         (unsigned long long)(b->shm_collectives - a->shm_collectives));
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int bench(size_t count, int rounds, uint64_t *in, uint64_t *out) {
  int k;
  for (k = 0; k <= rounds; k++) {
    nexar_status_t s = nexar_barrier(comm, NULL, NULL);
    if (s != NEXAR_OK) return fail("barrier", s);
    const double t0 = now_us();
    s = nexar_allreduce(comm, in, out, count, NEXAR_DTYPE_U64, NEXAR_OP_SUM, NULL, NULL);
    if (s != NEXAR_OK) return fail("allreduce", s);
    if (k > 0) printf("TIME rank=%u us=%.0f\n", me, now_us() - t0);  // the first warms up
  }
  /* Nobody leaves while a peer still receives the last allreduce. */
  nexar_status_t s = nexar_barrier(comm, NULL, NULL);
  return s == NEXAR_OK ? 0 : fail("barrier", s);
}

static int run(uint64_t *in, uint64_t *out, size_t count) {
  static const size_t sizes[] = {1, 5, 1000, 4096};
  const unsigned root =
      getenv("HOSTS_WORKER_ROOT") ? (unsigned)atoi(getenv("HOSTS_WORKER_ROOT")) : 0;
  const size_t bytes = count * sizeof *in;
  nexar_stats_t a, b;
  size_t k;
  int rc;
  if (getenv("HOSTS_WORKER_BENCH"))
    return bench(count, atoi(getenv("HOSTS_WORKER_BENCH")), in, out);
  for (k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    if ((rc = allreduce_u64(sizes[k], in, out))) return rc;
    printf("ALLREDUCE_OK rank=%u count=%zu\n", me, sizes[k]);
  }
  /* Not a multiple of the ranks per host, and large. */
  if ((rc = allreduce_u64(count + 1, in, out))) return rc;
  printf("ALLREDUCE_OK rank=%u count=%zu\n", me, count + 1);
  if ((rc = allreduce_f64_in_place(count, (double *)out))) return rc;
  printf("ALLREDUCE_OK rank=%u count=%zu f64\n", me, count);
  if ((rc = allreduce_u64(count, in, out)) || (rc = stats(&a)) ||
      (rc = allreduce_u64(count, in, out)) || (rc = stats(&b)))
    return rc;
  printf("ALLREDUCE_OK rank=%u count=%zu\n", me, count);
  report("allreduce", bytes, &a, &b);
  if ((rc = broadcast_checked(5, out, root))) return rc;
  if ((rc = broadcast_checked(count, out, root)) || (rc = stats(&a)) ||
      (rc = broadcast_checked(count, out, root)) || (rc = stats(&b)))
    return rc;
  printf("BROADCAST_OK rank=%u root=%u count=%zu\n", me, root, count);
  report("broadcast", bytes, &a, &b);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  size_t count = 512 * 1024;
  if (getenv("HOSTS_WORKER_COUNT")) count = strtoull(getenv("HOSTS_WORKER_COUNT"), NULL, 10);
  uint64_t *in = malloc((count + 1) * sizeof *in), *out = malloc((count + 1) * sizeof *out);
  if (!in || !out) return fail("malloc", NEXAR_ERR_NO_MEMORY);
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) return fail("join", s);
  me = nexar_comm_rank(comm);
  n = nexar_comm_size(comm);
  printf("JOINED rank=%u size=%u\n", me, n);
  int rc = run(in, out, count);
  if (rc == 0) printf("DONE rank=%u\n", me);
  nexar_comm_destroy(comm);
  free(in);
  free(out);
  return rc;
}
