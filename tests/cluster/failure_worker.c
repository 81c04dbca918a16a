/*
 * A worker for the failure tests, written against the public C ABI only: it
 * joins through nexar_comm_init_from_env and runs allreduces with checked
 * results until one fails. Then, as a survivor would, it revokes, shrinks
 * and runs more allreduces on the survivors' communicator. It reports on
 * stdout:
 *
 *   JOINED rank=R size=N
 *   RUNNING rank=R                       (after the first allreduces)
 *   FAILED rank=R status=S failed_rank=F <message>
 *   SHRUNK rank=R size=N                 (its rank in the new communicator)
 *   RECOVERED rank=R                     (exit 0)
 *   EXCLUDED rank=R <message>            (exit 5)
 *   ERROR <what> status=S <message>      (exit 4)
 *   DESTROYED rank=R                     (exit 0)
 *
 * With FAILURE_WORKER_ABORT_FILE=F in the environment, a second thread waits
 * until F exists, then aborts the communicator; the main thread, whose
 * allreduce then fails, destroys it, prints DESTROYED and exits.
 *
 * With FAILURE_WORKER_REVOKE_AFTER=N, rank 0 stops after N allreduces,
 * waits 200 ms (the others wait inside the next allreduce) and revokes.
 * Each step also prints its wall-clock time (scripts/failure-figures.sh):
 *
 *   AT rank=R event=failed|revoke|shrink-start|shrunk us=MICROSECONDS
 *
 * FAILURE_WORKER_COUNT=N sets the u64 elements per allreduce; with
 * FAILURE_WORKER_ROUNDS=N a rank that saw no failure in N allreduces prints
 *
 *   DONE rank=R rounds=N                 (exit 0)
 *
 * With FAILURE_WORKER_MODE=agree it runs agreements back to back instead, so
 * that a kill lands inside one, and prints each outcome:
 *
 *   AGREE round=I flags=X status=S      (rank R contributes all bits but
 *                                        bit (I + R) % 64)
 *   AGREED rank=R rounds=N              (exit 0)
 *
 * until an agreement reports a failure; then it acknowledges the failures
 * and runs 3 more, which must succeed.
 */
#include <nexar.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* u64 elements per allreduce: 512 KiB, or FAILURE_WORKER_COUNT. */
static uint64_t count = 1 << 16;
static uint64_t *in_buf, *out_buf;

static void print_time(unsigned rank, const char *event) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("AT rank=%u event=%s us=%llu\n", rank, event,
         (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

/* One allreduce of rank + 1 + round + k; returns its status, checks the sum. */
static nexar_status_t allreduce_round(nexar_comm_t *comm, uint64_t round) {
  const uint64_t n = nexar_comm_size(comm), me = nexar_comm_rank(comm);
  for (uint64_t k = 0; k < count; ++k)
    in_buf[k] = me + 1 + round + k;
  nexar_status_t s =
      nexar_allreduce(comm, in_buf, out_buf, count, NEXAR_DTYPE_U64, NEXAR_OP_SUM, NULL, NULL);
  if (s != NEXAR_OK) return s;
  for (uint64_t k = 0; k < count; ++k)
    if (out_buf[k] != n * (n + 1) / 2 + n * (round + k)) {
      printf("ERROR wrong-sum rank=%u round=%llu element=%llu\n", (unsigned)me,
             (unsigned long long)round, (unsigned long long)k);
      exit(4);
    }
  return NEXAR_OK;
}

static void excluded(nexar_comm_t *comm, const char *what) {
  printf("EXCLUDED rank=%u %s: %s\n", nexar_comm_rank(comm), what, nexar_last_error_message());
  fflush(stdout);
  nexar_comm_abort(comm);
  nexar_comm_destroy(comm);
  exit(5);
}

static uint64_t agree_bits(uint64_t round, unsigned rank) {
  return ~(1ull << ((round + rank) % 64));
}

/* FAILURE_WORKER_MODE=agree: see the top of the file. */
static int agree_until_failure(nexar_comm_t *comm) {
  const unsigned me = nexar_comm_rank(comm);
  uint64_t round = 0, after = 0;
  for (;; ++round) {
    uint64_t flags = agree_bits(round, me);
    const nexar_status_t s = nexar_comm_agree(comm, &flags, NULL, NULL);
    if (s == NEXAR_ERR_EXCLUDED) excluded(comm, "agree");
    printf("AGREE round=%llu flags=%llx status=%d\n", (unsigned long long)round,
           (unsigned long long)flags, s);
    if (round == 20) printf("RUNNING rank=%u\n", me);
    if (after > 0 && s != NEXAR_OK) {
      printf("ERROR agree-after-ack status=%d %s\n", s, nexar_last_error_message());
      return 4;
    }
    if (after > 0 && ++after > 3) break;
    if (after == 0 && s != NEXAR_OK) {
      if (s != NEXAR_ERR_PEER_FAILED) {
        printf("ERROR agree status=%d %s\n", s, nexar_last_error_message());
        return 4;
      }
      uint32_t failed = 0;
      nexar_comm_get_failed(comm, NULL, 0, &failed);
      nexar_comm_ack_failed(comm, failed, NULL);
      after = 1;
    }
    if (round > 10000000) {
      printf("ERROR no-failure rank=%u\n", me);
      return 4;
    }
  }
  printf("AGREED rank=%u rounds=%llu\n", me, (unsigned long long)round + 1);
  nexar_comm_destroy(comm);
  return 0;
}

static void *abort_when_file_exists(void *arg) {
  nexar_comm_t *comm = (nexar_comm_t *)arg;
  const char *path = getenv("FAILURE_WORKER_ABORT_FILE");
  while (access(path, F_OK) != 0)
    usleep(10000);
  nexar_comm_abort(comm);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (getenv("FAILURE_WORKER_COUNT")) count = strtoull(getenv("FAILURE_WORKER_COUNT"), NULL, 10);
  in_buf = malloc(count * sizeof *in_buf);
  out_buf = malloc(count * sizeof *out_buf);
  if (!in_buf || !out_buf || count == 0) {
    printf("ERROR buffers of %llu elements\n", (unsigned long long)count);
    return 4;
  }
  const char *rounds_env = getenv("FAILURE_WORKER_ROUNDS");
  const uint64_t rounds = rounds_env ? strtoull(rounds_env, NULL, 10) : 0;
  nexar_comm_t *comm = NULL;
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) {
    printf("ERROR join status=%d %s\n", s, nexar_last_error_message());
    return 4;
  }
  const unsigned me = nexar_comm_rank(comm);
  printf("JOINED rank=%u size=%u\n", me, nexar_comm_size(comm));
  const char *mode = getenv("FAILURE_WORKER_MODE");
  if (mode && strcmp(mode, "agree") == 0) return agree_until_failure(comm);
  pthread_t aborter;
  const int abort_on_file = getenv("FAILURE_WORKER_ABORT_FILE") != NULL;
  if (abort_on_file) pthread_create(&aborter, NULL, abort_when_file_exists, comm);
  const char *revoke_after = getenv("FAILURE_WORKER_REVOKE_AFTER");
  const uint64_t revoke_round = revoke_after && me == 0 ? strtoull(revoke_after, NULL, 10) : 0;
  uint64_t round = 0;
  for (;; ++round) {
    if (revoke_round > 0 && round == revoke_round) {
      usleep(200000);
      print_time(me, "revoke");
      nexar_comm_revoke(comm);
    }
    s = allreduce_round(comm, round);
    if (s != NEXAR_OK) break;
    if (round == 3) printf("RUNNING rank=%u\n", me);
    if (rounds > 0 && round + 1 == rounds) {
      printf("DONE rank=%u rounds=%llu\n", me, (unsigned long long)rounds);
      nexar_comm_destroy(comm);
      return 0;
    }
    if (round > 1000000) {
      printf("ERROR no-failure rank=%u\n", me);
      return 4;
    }
  }
  print_time(me, "failed");
  if (s == NEXAR_ERR_EXCLUDED) excluded(comm, "allreduce");
  if (abort_on_file && s == NEXAR_ERR_ABORTED) {
    pthread_join(aborter, NULL);
    nexar_comm_destroy(comm);
    printf("DESTROYED rank=%u\n", me);
    return 0;
  }
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  nexar_last_error(&info);
  printf("FAILED rank=%u status=%d failed_rank=%d %s\n", me, s, info.failed_rank, info.message);
  nexar_comm_revoke(comm);
  nexar_comm_t *shrunk = NULL;
  print_time(me, "shrink-start");
  s = nexar_comm_shrink(comm, &shrunk, NULL, NULL);
  print_time(me, "shrunk");
  if (s == NEXAR_ERR_EXCLUDED) excluded(comm, "shrink");
  if (s != NEXAR_OK) {
    printf("ERROR shrink status=%d %s\n", s, nexar_last_error_message());
    return 4;
  }
  printf("SHRUNK rank=%u size=%u\n", nexar_comm_rank(shrunk), nexar_comm_size(shrunk));
  for (uint64_t r = 0; r < 5; ++r) {
    s = allreduce_round(shrunk, r);
    if (s != NEXAR_OK) {
      printf("ERROR after-shrink status=%d %s\n", s, nexar_last_error_message());
      return 4;
    }
  }
  printf("RECOVERED rank=%u\n", me);
  nexar_comm_destroy(shrunk);
  nexar_comm_destroy(comm);
  return 0;
}
