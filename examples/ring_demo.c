/*
 * nexar ring demo: N ranks in one process, each with its own engine, joined by
 * a full mesh of encrypted QUIC connections. Each rank sends a buffer to the
 * next rank and receives one from the previous rank, for several sizes, and
 * checks every byte. Uses only the public C ABI.
 *
 *   nexar-ring-demo [ranks]
 */
#include <nexar.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  nexar_comm_t *comm;
  size_t bytes;
  int rounds;
  int errors;
  double seconds;
} rank_job;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned char expected_byte(uint32_t from, int round, size_t i) {
  return (unsigned char)(from * 31u + (unsigned)round * 7u + (unsigned)(i % 251u));
}

static void *run_rank(void *arg) {
  rank_job *job = (rank_job *)arg;
  uint32_t me = nexar_comm_rank(job->comm), n = nexar_comm_size(job->comm);
  uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
  unsigned char *out = malloc(job->bytes ? job->bytes : 1);
  unsigned char *in = malloc(job->bytes ? job->bytes : 1);
  double start = now_s();
  for (int round = 0; round < job->rounds; round++) {
    size_t i;
    for (i = 0; i < job->bytes; i++)
      out[i] = expected_byte(me, round, i);
    /* Alternate the order so that the ring never waits on itself. */
    nexar_status_t s1, s2;
    if (me % 2 == 0) {
      s1 = nexar_send(job->comm, out, job->bytes, next, (uint32_t)round, NULL, NULL);
      s2 = nexar_recv(job->comm, in, job->bytes, prev, (uint32_t)round, NULL, NULL);
    } else {
      s2 = nexar_recv(job->comm, in, job->bytes, prev, (uint32_t)round, NULL, NULL);
      s1 = nexar_send(job->comm, out, job->bytes, next, (uint32_t)round, NULL, NULL);
    }
    if (s1 != NEXAR_OK || s2 != NEXAR_OK) {
      fprintf(stderr, "rank %u: %s\n", me, nexar_last_error_message());
      job->errors++;
      break;
    }
    for (i = 0; i < job->bytes; i++)
      if (in[i] != expected_byte(prev, round, i)) {
        job->errors++;
        break;
      }
  }
  job->seconds = now_s() - start;
  free(out);
  free(in);
  return NULL;
}

int main(int argc, char **argv) {
  uint32_t n = argc > 1 ? (uint32_t)atoi(argv[1]) : 4;
  static const size_t sizes[] = {8, 64 << 10, 8 << 20, 64 << 20};
  static const int rounds[] = {200, 100, 10, 3};
  nexar_comm_t **comms;
  rank_job *jobs;
  pthread_t *threads;
  int total_errors = 0;
  size_t k;
  uint32_t r;
  double t0;

  if (n < 2 || n > 64) {
    fprintf(stderr, "usage: %s [ranks 2..64]\n", argv[0]);
    return 2;
  }
  comms = calloc(n, sizeof *comms);
  jobs = calloc(n, sizeof *jobs);
  threads = calloc(n, sizeof *threads);
  printf(
      "nexar %s ring demo: %u ranks, one engine each, full mesh of QUIC (TLS 1.3, "
      "AES-128-GCM, mutual certificates)\n",
      nexar_version_string(), n);
  t0 = now_s();
  if (nexar_bootstrap_local(comms, n, NULL) != NEXAR_OK) {
    fprintf(stderr, "bootstrap failed: %s\n", nexar_last_error_message());
    return 1;
  }
  printf("mesh of %u connections formed in %.1f ms\n\n", n * (n - 1) / 2, (now_s() - t0) * 1e3);
  printf("%12s %8s %14s %12s %14s %8s\n", "message", "rounds", "moved (total)", "time (ms)",
         "per rank MB/s", "check");
  for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    double slowest = 0;
    int errors = 0;
    for (r = 0; r < n; r++) {
      jobs[r].comm = comms[r];
      jobs[r].bytes = sizes[k];
      jobs[r].rounds = rounds[k];
      jobs[r].errors = 0;
      pthread_create(&threads[r], NULL, run_rank, &jobs[r]);
    }
    for (r = 0; r < n; r++) {
      pthread_join(threads[r], NULL);
      if (jobs[r].seconds > slowest) slowest = jobs[r].seconds;
      errors += jobs[r].errors;
    }
    total_errors += errors;
    {
      double moved = (double)sizes[k] * rounds[k] * n;
      char size_text[32], moved_text[32];
      if (sizes[k] >= (1 << 20))
        snprintf(size_text, sizeof size_text, "%zu MiB", sizes[k] >> 20);
      else if (sizes[k] >= 1024)
        snprintf(size_text, sizeof size_text, "%zu KiB", sizes[k] >> 10);
      else
        snprintf(size_text, sizeof size_text, "%zu B", sizes[k]);
      if (moved >= 1e9)
        snprintf(moved_text, sizeof moved_text, "%.2f GB", moved / 1e9);
      else if (moved >= 1e6)
        snprintf(moved_text, sizeof moved_text, "%.1f MB", moved / 1e6);
      else
        snprintf(moved_text, sizeof moved_text, "%.1f KB", moved / 1e3);
      printf("%12s %8d %14s %12.1f %14.1f %8s\n", size_text, rounds[k], moved_text, slowest * 1e3,
             (double)sizes[k] * rounds[k] / slowest / 1e6, errors ? "FAILED" : "ok");
    }
  }
  {
    nexar_stats_t st;
    st.struct_size = sizeof st;
    if (nexar_comm_get_stats(comms[0], &st) == NEXAR_OK)
      printf("\nrank 0: %llu messages sent, %llu received, %llu QUIC streams opened in total\n",
             (unsigned long long)st.messages_sent, (unsigned long long)st.messages_received,
             (unsigned long long)st.streams_opened);
  }
  for (r = 0; r < n; r++)
    nexar_comm_destroy(comms[r]);
  printf("%s\n",
         total_errors ? "RESULT: FAILED (see errors above)" : "RESULT: every byte checked, all ok");
  free(comms);
  free(jobs);
  free(threads);
  return total_errors ? 1 : 0;
}
