/*
 * A worker process for the cluster tests, written against the public C ABI
 * only: it joins (nexar_comm_join, or nexar_comm_init_from_env with --env),
 * exchanges checked messages with every other rank, runs a barrier (and an
 * allreduce when the build has it), and reports on stdout:
 *
 *   JOINED rank=R size=N
 *   P2P_OK rank=R peers=K bytes=B
 *   BARRIER_OK rank=R
 *   ALLREDUCE_OK rank=R | ALLREDUCE_UNSUPPORTED rank=R
 *   DONE rank=R
 *   JOIN_FAILED status=<code> <message>          (exit 3)
 *   FAILED <what> status=<code> <message>        (exit 4)
 *
 *   cluster_worker [--env] [--skip-rank R] [--hold-file F] [--sleep-before-join S]
 *                  [--allreduce-loop SECONDS] [--fork-keeper] [--movement] [--fork-child]
 *
 * --skip-rank R: rank R is not a worker like this one (a probe): no traffic to
 * it and no collectives. --hold-file F: after the first exchange, wait (at
 * most 60 s) until F exists, then exchange again and print "STATS rank=R
 * connections_refused=N protocol_violations=N unexpected_bytes=N". --allreduce-loop S: after
 * joining, only allreduces of 256 KiB in a loop for at most S seconds
 * ("LOOPING rank=R" after the first), reporting how the loop ended:
 *
 *   LOOP_DONE rank=R rounds=K
 *   LOOP_FAILED rank=R status=<code> failed_rank=F <message>   (exit 5)
 *
 * --fork-keeper: before the loop, fork a child that holds every descriptor
 * of this process (as a forked data loader would) and only waits, at most
 * 120 s ("KEEPER rank=R pid=P"): this process's death then closes none of
 * its sockets.
 *
 * --movement: after the allreduce, an allgather of 256 KiB per rank, an
 * alltoall of 1 MiB per rank and a broadcast of 512 KiB from rank 0, then
 * the same of 24, 20 and 40 KiB, then of 8, 4 and 12 KiB, every byte checked:
 *
 *   MOVEMENT_OK rank=R shm_bytes_read_directly=N
 *
 * --fork-child: after the allreduce, rank 0 forks a child that tries its
 * parent's communicator (an allreduce, nexar_mem_alloc, nexar_comm_abort),
 * destroys it and ends with exit(), as a script's forked helper would; the
 * parent waits for it (at most 20 s), then every rank runs an allreduce:
 *
 *   CHILD allreduce=<status> mem_alloc=<status> abort=<status> <message>
 *   CHILD_EXITED code=C | CHILD_STUCK (killed)
 *   AFTER_FORK_OK rank=R
 */
#include <nexar.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int errors;
  char message[512];
} waiter;

static void on_done(void *ud, const nexar_completion_t *c) {
  waiter *w = (waiter *)ud;
  pthread_mutex_lock(&w->mu);
  if (c->status != NEXAR_OK && w->errors++ == 0)
    snprintf(w->message, sizeof w->message, "status=%d %s", c->status, c->message);
  w->done++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static int wait_for(waiter *w, int n, int seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += seconds;
  pthread_mutex_lock(&w->mu);
  while (w->done < n)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0) break;
  int ok = w->done >= n;
  pthread_mutex_unlock(&w->mu);
  return ok;
}

static void on_done_rank(void *ud, const nexar_completion_t *c) {
  waiter *w = (waiter *)ud;
  pthread_mutex_lock(&w->mu);
  if (c->status != NEXAR_OK && w->errors++ == 0)
    snprintf(w->message, sizeof w->message, "status=%d failed_rank=%d %s", c->status,
             c->failed_rank, c->message);
  w->done++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Allreduces in a loop until one fails or `seconds` pass. */
static int allreduce_loop(nexar_comm_t *comm, double seconds) {
  enum { kCount = 64 * 1024 };
  uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  float *in = malloc(sizeof(float) * kCount), *out = malloc(sizeof(float) * kCount);
  struct timespec t0, t;
  long rounds = 0;
  size_t i;
  int rc = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    waiter w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    for (i = 0; i < kCount; i++)
      in[i] = (float)(me + 1);
    nexar_status_t s =
        nexar_allreduce(comm, in, out, kCount, NEXAR_DTYPE_F32, NEXAR_OP_SUM, on_done_rank, &w);
    if (s != NEXAR_OK || !wait_for(&w, 1, 120)) {
      printf("LOOP_FAILED rank=%u status=%d failed_rank=-1 %s\n", me, s,
             nexar_last_error_message());
      rc = 5;
      break;
    }
    if (w.errors) {
      printf("LOOP_FAILED rank=%u %s\n", me, w.message);
      rc = 5;
      break;
    }
    if (out[0] != (float)n * (n + 1) / 2 || out[kCount - 1] != out[0]) {
      printf("LOOP_FAILED rank=%u status=0 failed_rank=-1 wrong sum %g\n", me, out[0]);
      rc = 5;
      break;
    }
    if (++rounds == 1) printf("LOOPING rank=%u\n", me);
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 > seconds) {
      printf("LOOP_DONE rank=%u rounds=%ld\n", me, rounds);
      break;
    }
  }
  free(in);
  free(out);
  return rc;
}

static unsigned char byte_of(uint32_t from, uint32_t to, int round, size_t i) {
  return (unsigned char)(from * 131u + to * 7u + (unsigned)round * 17u + (unsigned)(i % 251u));
}

/* Every rank sends to and receives from every other (non-skipped) rank. */
static int exchange(nexar_comm_t *comm, int skip, int round, size_t bytes) {
  uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm), peer;
  unsigned char **in = calloc(n, sizeof *in), *out = malloc(bytes * n);
  waiter w;
  int posted = 0, peers = 0, bad = 0;
  size_t i;
  memset(&w, 0, sizeof w);
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  for (peer = 0; peer < n; peer++) {
    if (peer == me || (int)peer == skip) continue;
    in[peer] = malloc(bytes);
    if (nexar_recv(comm, in[peer], bytes, peer, (uint32_t)round, on_done, &w) != NEXAR_OK) {
      printf("FAILED recv status=%d %s\n", -1, nexar_last_error_message());
      return -1;
    }
    posted++;
  }
  for (peer = 0; peer < n; peer++) {
    if (peer == me || (int)peer == skip) continue;
    unsigned char *o = out + (size_t)peer * bytes;
    for (i = 0; i < bytes; i++)
      o[i] = byte_of(me, peer, round, i);
    nexar_status_t s = nexar_send(comm, o, bytes, peer, (uint32_t)round, NULL, NULL);
    if (s != NEXAR_OK) {
      printf("FAILED send status=%d to rank %u: %s\n", s, peer, nexar_last_error_message());
      return -1;
    }
    peers++;
  }
  if (!wait_for(&w, posted, 60)) {
    printf("FAILED recv status=%d timed out after 60 s\n", NEXAR_ERR_TIMEOUT);
    return -1;
  }
  if (w.errors) {
    printf("FAILED recv %s\n", w.message);
    return -1;
  }
  for (peer = 0; peer < n; peer++) {
    if (!in[peer]) continue;
    for (i = 0; i < bytes; i++)
      if (in[peer][i] != byte_of(peer, me, round, i)) bad++;
    free(in[peer]);
  }
  free(in);
  free(out);
  if (bad) {
    printf("FAILED p2p status=0 %d corrupted bytes\n", bad);
    return -1;
  }
  printf("P2P_OK rank=%u peers=%d bytes=%zu\n", me, peers, bytes);
  fflush(stdout);
  return 0;
}

/* Byte i of what rank `from` gives rank `to` (to = n: what it gives all). */
static pid_t main_pid;

/* A child of --fork-child ends with exit() still holding its parent's
 * objects, which only the parent's threads (absent there) referred to: not
 * leaks of this program. LeakSanitizer asks this before its check at exit. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
  return main_pid != 0 && getpid() != main_pid;
}

/* The child of --fork-child: its parent's communicator must refuse it,
 * without touching what the parent still uses. */
static void forked_child(nexar_comm_t *comm) {
  double x = 1, sum = 0;
  char message[512];
  const nexar_status_t a =
      nexar_allreduce(comm, &x, &sum, 1, NEXAR_DTYPE_F64, NEXAR_OP_SUM, NULL, NULL);
  snprintf(message, sizeof message, "%s", nexar_last_error_message());
  void *p = NULL;
  const nexar_status_t m = nexar_mem_alloc(comm, 4096, &p);
  const nexar_status_t ab = nexar_comm_abort(comm);
  printf("CHILD allreduce=%d mem_alloc=%d abort=%d %s\n", a, m, ab, message);
  nexar_comm_destroy(comm);
  exit(0); /* atexit handlers and static destructors run */
}

static int fork_child_and_go_on(nexar_comm_t *comm) {
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  if (me == 0) {
    const pid_t child = fork();
    if (child == 0) forked_child(comm);
    int status = 0, waited = 0;
    while (waitpid(child, &status, WNOHANG) == 0 && waited < 200) {
      usleep(100000);
      waited++;
    }
    if (waited == 200) {
      kill(child, SIGKILL);
      waitpid(child, NULL, 0);
      printf("CHILD_STUCK\n");
    } else {
      printf("CHILD_EXITED code=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
  }
  double x = (double)(me + 1), sum = 0;
  const nexar_status_t s =
      nexar_allreduce(comm, &x, &sum, 1, NEXAR_DTYPE_F64, NEXAR_OP_SUM, NULL, NULL);
  if (s != NEXAR_OK || sum != (double)n * (n + 1) / 2) {
    printf("FAILED allreduce after the fork status=%d sum=%g %s\n", s, sum,
           nexar_last_error_message());
    return 4;
  }
  printf("AFTER_FORK_OK rank=%u\n", me);
  return 0;
}

static uint8_t movement_byte(uint32_t from, uint32_t to, size_t i) {
  return (uint8_t)(i * 31 + from * 7 + to * 13 + 1);
}

/* Allgather and alltoall of checked bytes; 0 when both are exact. */
/* One allgather (gather bytes per rank), alltoall (each bytes per pair) and
 * broadcast (cast bytes from rank 0), every byte checked. */
static int movement_round(nexar_comm_t *comm, size_t gather, size_t each, size_t cast) {
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  uint8_t *mine = malloc(gather), *all = malloc(gather * n), *send = malloc(each * n),
          *recv = malloc(each * n), *bcast = malloc(cast);
  int bad = !mine || !all || !send || !recv || !bcast;
  size_t i;
  uint32_t r;
  for (i = 0; !bad && i < gather; i++)
    mine[i] = movement_byte(me, n, i);
  for (r = 0; !bad && r < n; r++)
    for (i = 0; i < each; i++)
      send[r * each + i] = movement_byte(me, r, i);
  for (i = 0; !bad && i < cast; i++)
    bcast[i] = me == 0 ? movement_byte(0, n, i) : 0;
  nexar_status_t s = NEXAR_ERR_NO_MEMORY;
  if (!bad) s = nexar_allgather(comm, mine, all, gather, NEXAR_DTYPE_U8, NULL, NULL);
  if (s == NEXAR_OK) s = nexar_alltoall(comm, send, recv, each, NEXAR_DTYPE_U8, NULL, NULL);
  if (s == NEXAR_OK) s = nexar_broadcast(comm, bcast, cast, NEXAR_DTYPE_U8, 0, NULL, NULL);
  if (s != NEXAR_OK) {
    printf("FAILED movement status=%d %s\n", s, nexar_last_error_message());
    bad = 1;
  }
  for (r = 0; !bad && r < n; r++)
    for (i = 0; i < gather && !bad; i++)
      bad = all[r * gather + i] != movement_byte(r, n, i);
  for (r = 0; !bad && r < n; r++)
    for (i = 0; i < each && !bad; i++)
      bad = recv[r * each + i] != movement_byte(r, me, i);
  for (i = 0; !bad && i < cast; i++)
    bad = bcast[i] != movement_byte(0, n, i);
  if (bad && s == NEXAR_OK) printf("FAILED movement: wrong bytes\n");
  free(mine);
  free(all);
  free(send);
  free(recv);
  free(bcast);
  return bad;
}

/* Large collectives (the chunked paths), mid-sized ones (one step each) and
 * small ones (copied through the segments whatever the host allows). */
static int movement(nexar_comm_t *comm) {
  if (movement_round(comm, 256 << 10, 1 << 20, 512 << 10) ||
      movement_round(comm, 24 << 10, 20 << 10, 40 << 10) ||
      movement_round(comm, 8 << 10, 4 << 10, 12 << 10))
    return 1;
  nexar_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  nexar_comm_get_stats(comm, &st);
  printf("MOVEMENT_OK rank=%u shm_bytes_read_directly=%llu\n", nexar_comm_rank(comm),
         (unsigned long long)st.shm_bytes_read_directly);
  return 0;
}

int main(int argc, char **argv) {
  int use_env = 0, skip = -1, i, moves = 0;
  const char *hold = NULL;
  double sleep_before = 0, loop_seconds = 0;
  int keeper = 0, fork_child = 0;
  for (i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--env"))
      use_env = 1;
    else if (!strcmp(argv[i], "--skip-rank") && i + 1 < argc)
      skip = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hold-file") && i + 1 < argc)
      hold = argv[++i];
    else if (!strcmp(argv[i], "--sleep-before-join") && i + 1 < argc)
      sleep_before = atof(argv[++i]);
    else if (!strcmp(argv[i], "--allreduce-loop") && i + 1 < argc)
      loop_seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--fork-keeper"))
      keeper = 1;
    else if (!strcmp(argv[i], "--movement"))
      moves = 1;
    else if (!strcmp(argv[i], "--fork-child"))
      fork_child = 1;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  main_pid = getpid();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sleep_before > 0) usleep((useconds_t)(sleep_before * 1e6));

  nexar_comm_t *comm = NULL;
  nexar_status_t s;
  if (use_env) {
    s = nexar_comm_init_from_env(&comm);
  } else {
    nexar_comm_options_t opts;
    s = nexar_comm_options_init(&opts, sizeof opts);
    if (s == NEXAR_OK) s = nexar_comm_join(&comm, &opts);
  }
  if (s != NEXAR_OK) {
    printf("JOIN_FAILED status=%d %s\n", s, nexar_last_error_message());
    return 3;
  }
  uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  printf("JOINED rank=%u size=%u\n", me, n);
  {
    nexar_stats_t st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    if (nexar_comm_get_stats(comm, &st) == NEXAR_OK)
      printf("CONNECTIONS rank=%u connections=%llu shm_pairs=%llu\n", me,
             (unsigned long long)st.connections, (unsigned long long)st.shm_pairs);
  }
  if (keeper) {
    const pid_t child = fork();
    if (child == 0) {
      /* Only async-signal-safe calls after a fork of a threaded process. Its
       * own process group: a kill of this one's group spares it. */
      setpgid(0, 0);
      alarm(120);
      for (;;)
        pause();
    }
    printf("KEEPER rank=%u pid=%d\n", me, (int)child);
  }
  if (loop_seconds > 0) {
    int rc = allreduce_loop(comm, loop_seconds);
    /* A failed rank stays a moment, so that the others learn of the failure
     * itself rather than of this rank leaving. */
    if (rc) usleep(2000000);
    nexar_comm_destroy(comm);
    return rc;
  }

  if (exchange(comm, skip, 1, 1000) || exchange(comm, skip, 2, 300000)) {
    nexar_comm_destroy(comm);
    return 4;
  }
  if (skip < 0) {
    s = nexar_barrier(comm, NULL, NULL);
    if (s != NEXAR_OK) {
      printf("FAILED barrier status=%d %s\n", s, nexar_last_error_message());
      nexar_comm_destroy(comm);
      return 4;
    }
    printf("BARRIER_OK rank=%u\n", me);
    double x = (double)(me + 1), sum = 0;
    s = nexar_allreduce(comm, &x, &sum, 1, NEXAR_DTYPE_F64, NEXAR_OP_SUM, NULL, NULL);
    if (s == NEXAR_ERR_UNSUPPORTED) {
      printf("ALLREDUCE_UNSUPPORTED rank=%u\n", me);
    } else if (s != NEXAR_OK || sum != (double)n * (n + 1) / 2) {
      printf("FAILED allreduce status=%d sum=%g %s\n", s, sum, nexar_last_error_message());
      nexar_comm_destroy(comm);
      return 4;
    } else {
      printf("ALLREDUCE_OK rank=%u\n", me);
    }
    if (fork_child && fork_child_and_go_on(comm)) {
      nexar_comm_destroy(comm);
      return 4;
    }
    if (moves && movement(comm)) {
      nexar_comm_destroy(comm);
      return 4;
    }
  }
  if (hold) {
    struct stat st;
    int waited = 0;
    while (stat(hold, &st) != 0 && waited < 600) {
      usleep(100000);
      waited++;
    }
    if (exchange(comm, skip, 3, 5000)) {
      nexar_comm_destroy(comm);
      return 4;
    }
    /* What the hostile peers of the security tests cost this rank. */
    nexar_stats_t stats;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    if (nexar_comm_get_stats(comm, &stats) == NEXAR_OK)
      printf(
          "STATS rank=%u connections_refused=%llu protocol_violations=%llu "
          "unexpected_bytes=%llu\n",
          me, (unsigned long long)stats.connections_refused,
          (unsigned long long)stats.protocol_violations,
          (unsigned long long)stats.unexpected_bytes);
  }
  /* Nobody leaves before everyone is done with the traffic above. */
  if (skip < 0 && (s = nexar_barrier(comm, NULL, NULL)) != NEXAR_OK) {
    printf("FAILED barrier status=%d %s\n", s, nexar_last_error_message());
    nexar_comm_destroy(comm);
    return 4;
  }
  printf("DONE rank=%u\n", me);
  /* A rank that destroys its communicator right after the last barrier can
   * close its connections before its peers got the transport's ACK for their
   * last barrier message, failing their barrier ("closed the connection").
   * Linger briefly until nexar_comm_destroy does that itself. */
  usleep(300000);
  nexar_comm_destroy(comm);
  return 0;
}
