/*
 * One process of the elastic soak (scripts/elastic-soak.sh), written against
 * the public C ABI only. It joins an elastic world (NEXAR_SEED, NEXAR_ELASTIC=1;
 * with NEXAR_RANK a founding member, without it a joiner of the running
 * world) and loops until every rank sees the stop file (argv[1]):
 *
 *   - the ranks agree (allreduce MIN) on how many joiners wait and whether to
 *     go on; with joiners waiting they grow the communicator;
 *   - an allreduce of rank + 1 + k (k = element) and a broadcast of the
 *     communicator's size from rank 0, both checked exactly;
 *   - a failed operation: revoke, shrink, go on with the survivors.
 *
 * It prints, for the script to follow:
 *   COMM rank=R size=N pid=P          the first exact check in each communicator
 *   FAILED rank=R status=S failed_rank=F
 *   ERROR ...                         a wrong result or a failed recovery (exit 4)
 *   STOPPED rank=R size=N             (exit 0)
 */
#include <nexar.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kCount = 4096, kPauseMs = 10 };

static uint64_t in_buf[kCount], out_buf[kCount];

/* The allreduce and the broadcast; exits on a wrong result. */
static nexar_status_t exact_check(nexar_comm_t *comm) {
  const uint64_t n = nexar_comm_size(comm), me = nexar_comm_rank(comm);
  for (uint64_t k = 0; k < kCount; ++k)
    in_buf[k] = me + 1 + k;
  nexar_status_t s =
      nexar_allreduce(comm, in_buf, out_buf, kCount, NEXAR_DTYPE_U64, NEXAR_OP_SUM, NULL, NULL);
  if (s != NEXAR_OK) return s;
  for (uint64_t k = 0; k < kCount; ++k)
    if (out_buf[k] != n * (n + 1) / 2 + n * k) {
      printf("ERROR wrong-sum rank=%llu size=%llu element=%llu got=%llu\n", (unsigned long long)me,
             (unsigned long long)n, (unsigned long long)k, (unsigned long long)out_buf[k]);
      exit(4);
    }
  uint64_t size = me == 0 ? n : 0;
  s = nexar_broadcast(comm, &size, 1, NEXAR_DTYPE_U64, 0, NULL, NULL);
  if (s == NEXAR_OK && size != n) {
    printf("ERROR wrong-broadcast rank=%llu size=%llu got=%llu\n", (unsigned long long)me,
           (unsigned long long)n, (unsigned long long)size);
    exit(4);
  }
  return s;
}

static nexar_comm_t *recover(nexar_comm_t *comm, nexar_status_t s) {
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  nexar_last_error(&info);
  printf("FAILED rank=%u status=%d failed_rank=%d\n", nexar_comm_rank(comm), s, info.failed_rank);
  nexar_comm_revoke(comm);
  nexar_comm_t *shrunk = NULL;
  s = nexar_comm_shrink(comm, &shrunk, NULL, NULL);
  if (s != NEXAR_OK) {
    printf("ERROR shrink status=%d %s\n", s, nexar_last_error_message());
    exit(4);
  }
  nexar_comm_destroy(comm);
  return shrunk;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 2) {
    fprintf(stderr, "usage: %s STOP_FILE\n", argv[0]);
    return 2;
  }
  nexar_comm_t *comm = NULL;
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) {
    printf("ERROR join status=%d %s\n", s, nexar_last_error_message());
    return 4;
  }
  int announced = 0;
  /* A new communicator starts with the check: a joiner's first operation
   * must be the members' first after their grow. */
  int check_first = 1;
  for (;;) {
    s = NEXAR_OK;
    if (!check_first) {
      /* {joiners waiting, 1 = go on}: MIN over the ranks. */
      uint32_t agreed[2] = {0, access(argv[1], F_OK) != 0};
      nexar_comm_pending_joins(comm, &agreed[0]);
      s = nexar_allreduce(comm, agreed, agreed, 2, NEXAR_DTYPE_U32, NEXAR_OP_MIN, NULL, NULL);
      if (s == NEXAR_OK && !agreed[1]) break;
      if (s == NEXAR_OK && agreed[0] > 0) {
        nexar_comm_t *grown = NULL;
        s = nexar_comm_grow(comm, agreed[0], &grown, NULL, NULL);
        if (s == NEXAR_OK) {
          nexar_comm_destroy(comm);
          comm = grown;
          announced = 0;
        }
      }
    }
    check_first = 0;
    if (s == NEXAR_OK) s = exact_check(comm);
    if (s != NEXAR_OK) {
      comm = recover(comm, s);
      announced = 0;
      continue;
    }
    if (!announced) {
      printf("COMM rank=%u size=%u pid=%d\n", nexar_comm_rank(comm), nexar_comm_size(comm),
             (int)getpid());
      announced = 1;
    }
    const struct timespec pause = {0, kPauseMs * 1000000L};
    nanosleep(&pause, NULL);
  }
  printf("STOPPED rank=%u size=%u\n", nexar_comm_rank(comm), nexar_comm_size(comm));
  nexar_comm_destroy(comm);
  return 0;
}
