/* A worker of the elastic tests (elastic_process_test): joins through an
 * elastic seed (NEXAR_SEED, NEXAR_ELASTIC=1 in its environment; a joiner of a
 * running world waits until the members admit it), then runs the steps in
 * argv[1], a comma-separated list:
 *   check        allreduce of rank+1 and a broadcast from rank 0, checked exactly
 *   pending:K    wait until at least K processes wait to join
 *   pending_is:K the number waiting is exactly K
 *   waitfile:F   wait until file F exists
 *   grow:K       grow by up to K joiners (a failure is printed; the next step
 *                must then be shrink or continue)
 *   shrink       shrink the communicator
 *   continue     after a failed grow: go on with the same communicator
 *   hang         sleep until killed
 *   muteseed     from the next grow's Welcome on, nothing this process sends
 *                reaches the seed (nexar-elastic-worker-seed-mute only:
 *                seed_link_faults.c)
 *   slowseed     in the next grow, a second Welcome reaches this process
 *                1.5 s late (the same binary only)
 * Every wait is bounded (60 s). Prints one line per step; exits 0 when every
 * step passed. */
#include <nexar.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Defined by seed_link_faults.c in nexar-elastic-worker-seed-mute only. */
__attribute__((weak)) void elastic_test_arm_seed_mute(void);
__attribute__((weak)) void elastic_test_arm_seed_slow(void);

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int check(nexar_comm_t *comm) {
  const uint32_t rank = nexar_comm_rank(comm), size = nexar_comm_size(comm);
  int64_t v = (int64_t)rank + 1;
  nexar_status_t s = nexar_allreduce(comm, &v, &v, 1, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL);
  int64_t b = rank == 0 ? 4242 + (int64_t)size : -1;
  if (s == NEXAR_OK) s = nexar_broadcast(comm, &b, 1, NEXAR_DTYPE_I64, 0, NULL, NULL);
  const int64_t want = (int64_t)size * (size + 1) / 2;
  const int ok = s == NEXAR_OK && v == want && b == 4242 + (int64_t)size;
  printf("CHECK rank=%u size=%u sum=%lld want=%lld bcast=%lld %s\n", rank, size, (long long)v,
         (long long)want, (long long)b, ok ? "ok" : "BAD");
  if (s != NEXAR_OK) printf("  status=%d %s\n", s, nexar_last_error_message());
  fflush(stdout);
  return ok;
}

static uint32_t pending(nexar_comm_t *comm) {
  uint32_t n = 0;
  if (nexar_comm_pending_joins(comm, &n) != NEXAR_OK)
    printf("PENDING_ERROR %s\n", nexar_last_error_message());
  return n;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  nexar_comm_t *comm = NULL;
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) {
    printf("JOIN_FAILED status=%d %s\n", s, nexar_last_error_message());
    return 3;
  }
  printf("JOINED rank=%u size=%u pid=%d\n", nexar_comm_rank(comm), nexar_comm_size(comm),
         (int)getpid());
  char steps[4096] = "";
  if (argc > 1) snprintf(steps, sizeof steps, "%s", argv[1]);
  int ok = 1;
  char *save = NULL;
  for (char *step = strtok_r(steps, ",", &save); step && ok; step = strtok_r(NULL, ",", &save)) {
    if (!strcmp(step, "check")) {
      ok = check(comm);
    } else if (!strncmp(step, "pending:", 8)) {
      const uint32_t k = (uint32_t)atoi(step + 8);
      int waited = 0;
      while (pending(comm) < k && waited < 60000) {
        sleep_ms(10);
        waited += 10;
      }
      ok = pending(comm) >= k;
      printf("PENDING rank=%u count=%u\n", nexar_comm_rank(comm), pending(comm));
    } else if (!strncmp(step, "pending_is:", 11)) {
      const uint32_t n = pending(comm);
      ok = n == (uint32_t)atoi(step + 11);
      printf("PENDING rank=%u count=%u\n", nexar_comm_rank(comm), n);
    } else if (!strncmp(step, "waitfile:", 9)) {
      int waited = 0;
      while (access(step + 9, F_OK) != 0 && waited < 60000) {
        sleep_ms(10);
        waited += 10;
      }
      ok = access(step + 9, F_OK) == 0;
    } else if (!strncmp(step, "grow:", 5)) {
      const uint32_t k = (uint32_t)atoi(step + 5);
      const uint32_t old_rank = nexar_comm_rank(comm);
      printf("GROWING rank=%u\n", old_rank);
      nexar_comm_t *grown = NULL;
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      s = nexar_comm_grow(comm, k, &grown, NULL, NULL);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      if (s == NEXAR_OK) {
        /* ms: for the note's figures only; no test asserts a time */
        printf("GROWN old_rank=%u rank=%u size=%u ms=%.1f\n", old_rank, nexar_comm_rank(grown),
               nexar_comm_size(grown),
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        nexar_comm_destroy(comm);
        comm = grown;
      } else {
        nexar_completion_t info;
        info.struct_size = sizeof info;
        nexar_last_error(&info);
        printf("GROW_FAILED rank=%u status=%d failed_rank=%d %s\n", old_rank, s, info.failed_rank,
               info.message);
        ok = save && (!strncmp(save, "shrink", 6) || !strncmp(save, "continue", 8));
      }
    } else if (!strcmp(step, "shrink")) {
      nexar_comm_t *shrunk = NULL;
      s = nexar_comm_shrink(comm, &shrunk, NULL, NULL);
      ok = s == NEXAR_OK;
      if (ok) {
        printf("SHRUNK rank=%u size=%u\n", nexar_comm_rank(shrunk), nexar_comm_size(shrunk));
        nexar_comm_destroy(comm);
        comm = shrunk;
      } else {
        printf("SHRINK_FAILED status=%d %s\n", s, nexar_last_error_message());
      }
    } else if (!strcmp(step, "continue")) {
      /* after a failed grow: go on with the same communicator */
    } else if (!strcmp(step, "muteseed")) {
      ok = elastic_test_arm_seed_mute != NULL;
      if (ok) elastic_test_arm_seed_mute();
      printf("%s rank=%u\n", ok ? "MUTED" : "NO_MUTE_IN_THIS_BUILD", nexar_comm_rank(comm));
    } else if (!strcmp(step, "slowseed")) {
      ok = elastic_test_arm_seed_slow != NULL;
      if (ok) elastic_test_arm_seed_slow();
      printf("%s rank=%u\n", ok ? "SLOWED" : "NO_SLOW_IN_THIS_BUILD", nexar_comm_rank(comm));
    } else if (!strcmp(step, "hang")) {
      printf("HANGING rank=%u\n", nexar_comm_rank(comm));
      for (int i = 0; i < 600; ++i)
        sleep_ms(100);
      ok = 0;
    } else {
      printf("UNKNOWN STEP %s\n", step);
      ok = 0;
    }
  }
  printf("%s rank=%u size=%u\n", ok ? "DONE" : "STEP_FAILED", nexar_comm_rank(comm),
         nexar_comm_size(comm));
  nexar_comm_destroy(comm);
  return ok ? 0 : 1;
}
