/*
 * A worker for the multi-process hypercube test
 * (tests/integration/hypercube_process_test.cpp), against the public C ABI
 * only. It joins from the environment (NEXAR_TOPOLOGY names the mesh), runs
 * allreduce, broadcast, allgather, gather, scatter and alltoall with roots
 * other than 0 and counts that are not powers of two, checks every element,
 * and reports:
 *
 *   JOINED rank=R size=N connections=C
 *   OK <collective> rank=R                 (one line each)
 *   RELAY rank=R forwarded=B               (bytes this rank relayed for the collectives)
 *   DONE rank=R
 *   JOIN_FAILED status=S <message>         (exit 3)
 *   FAILED <collective> rank=R status=S <message> | wrong=K   (exit 4)
 */
#include <nexar.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static nexar_stats_t stats_of(nexar_comm_t *comm) {
  nexar_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  nexar_comm_get_stats(comm, &st);
  return st;
}

static int32_t value(uint32_t from, uint32_t to, size_t i) {
  return (int32_t)(from * 1000003u + to * 7919u + (uint32_t)(i % 4099));
}

/* Reports a collective's outcome; nonzero when it failed. */
static int report(const char *what, uint32_t me, nexar_status_t s, size_t wrong) {
  if (s != NEXAR_OK) {
    printf("FAILED %s rank=%u status=%d %s\n", what, me, s, nexar_last_error_message());
    return 1;
  }
  if (wrong) {
    printf("FAILED %s rank=%u wrong=%zu\n", what, me, wrong);
    return 1;
  }
  printf("OK %s rank=%u\n", what, me);
  return 0;
}

static int run(nexar_comm_t *comm) {
  enum { kReduceCount = 100003, kCount = 3001 };
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  const uint32_t root = n > 5 ? 5 : n - 1;
  int64_t *in = malloc(sizeof *in * kReduceCount), *sum = malloc(sizeof *sum * kReduceCount);
  int32_t *mine = malloc(sizeof *mine * kCount);
  int32_t *all = malloc(sizeof *all * kCount * n), *other = malloc(sizeof *other * kCount * n);
  size_t i, wrong = 0;
  uint32_t r;
  int failed = 0;
  nexar_status_t s;

  for (i = 0; i < kReduceCount; i++)
    in[i] = (int64_t)(me + 1) * (int64_t)(i % 1009);
  s = nexar_allreduce(comm, in, sum, kReduceCount, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL);
  for (i = 0; s == NEXAR_OK && i < kReduceCount; i++)
    wrong += sum[i] != (int64_t)n * (n + 1) / 2 * (int64_t)(i % 1009);
  failed |= report("allreduce", me, s, wrong);

  for (i = 0; i < kCount; i++)
    mine[i] = me == root ? value(root, 1, i) : -1;
  s = nexar_broadcast(comm, mine, kCount, NEXAR_DTYPE_I32, root, NULL, NULL);
  for (i = 0, wrong = 0; s == NEXAR_OK && i < kCount; i++)
    wrong += mine[i] != value(root, 1, i);
  failed |= report("broadcast", me, s, wrong);

  for (i = 0; i < kCount; i++)
    mine[i] = value(me, 0, i);
  s = nexar_allgather(comm, mine, all, kCount, NEXAR_DTYPE_I32, NULL, NULL);
  for (r = 0, wrong = 0; s == NEXAR_OK && r < n; r++)
    for (i = 0; i < kCount; i++)
      wrong += all[r * kCount + i] != value(r, 0, i);
  failed |= report("allgather", me, s, wrong);

  s = nexar_gather(comm, mine, other, kCount, NEXAR_DTYPE_I32, n - 1, NULL, NULL);
  for (r = 0, wrong = 0; s == NEXAR_OK && me == n - 1 && r < n; r++)
    for (i = 0; i < kCount; i++)
      wrong += other[r * kCount + i] != value(r, 0, i);
  failed |= report("gather", me, s, wrong);

  for (r = 0; r < n; r++)
    for (i = 0; i < kCount; i++)
      all[r * kCount + i] = value(root, r, i);
  s = nexar_scatter(comm, all, mine, kCount, NEXAR_DTYPE_I32, root, NULL, NULL);
  for (i = 0, wrong = 0; s == NEXAR_OK && i < kCount; i++)
    wrong += mine[i] != value(root, me, i);
  failed |= report("scatter", me, s, wrong);

  for (r = 0; r < n; r++)
    for (i = 0; i < kCount; i++)
      all[r * kCount + i] = value(me, r, i);
  s = nexar_alltoall(comm, all, other, kCount, NEXAR_DTYPE_I32, NULL, NULL);
  for (r = 0, wrong = 0; s == NEXAR_OK && r < n; r++)
    for (i = 0; i < kCount; i++)
      wrong += other[r * kCount + i] != value(r, me, i);
  failed |= report("alltoall", me, s, wrong);

  free(in);
  free(sum);
  free(mine);
  free(all);
  free(other);
  return failed;
}

int main(void) {
  nexar_comm_options_t opts;
  nexar_comm_t *comm = NULL;
  nexar_status_t s;
  setvbuf(stdout, NULL, _IOLBF, 0);
  s = nexar_comm_options_init(&opts, sizeof opts);
  if (s == NEXAR_OK) s = nexar_comm_join(&comm, &opts);
  if (s != NEXAR_OK) {
    printf("JOIN_FAILED status=%d %s\n", s, nexar_last_error_message());
    return 3;
  }
  const uint32_t me = nexar_comm_rank(comm);
  const nexar_stats_t joined = stats_of(comm);
  printf("JOINED rank=%u size=%u connections=%llu\n", me, nexar_comm_size(comm),
         (unsigned long long)joined.connections);
  const int failed = run(comm);
  printf("RELAY rank=%u forwarded=%llu\n", me,
         (unsigned long long)(stats_of(comm).relay_bytes_forwarded - joined.relay_bytes_forwarded));
  /* Nobody leaves before everyone is done. */
  if (!failed && (s = nexar_barrier(comm, NULL, NULL)) != NEXAR_OK)
    printf("FAILED barrier rank=%u status=%d %s\n", me, s, nexar_last_error_message());
  else if (!failed)
    printf("DONE rank=%u\n", me);
  /* Linger so that peers get the transport's ACK of the last barrier message
   * (as cluster_worker.c does). */
  usleep(300000);
  nexar_comm_destroy(comm);
  return failed || s != NEXAR_OK ? 4 : 0;
}
