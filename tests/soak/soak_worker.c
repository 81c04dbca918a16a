/*
 * One rank of the soak (scripts/soak.sh), against the public C ABI only: it
 * joins through the seed nexar-run started (nexar_comm_init_from_env), then
 * runs rounds of mixed traffic until rank 0 says stop (rank 0 broadcasts the
 * decision each round, so every rank runs the same rounds):
 *
 *   p2p to every other rank, two tags each, sizes from 0 B to 3 MiB;
 *   every collective, counts from 1 to 70000, roots and data changing;
 *   RPC to the next rank and to itself (echo), a failing handler and an
 *   unregistered function every few rounds;
 *   every third round a split into two sub-communicators, an allreduce and
 *   an RPC on them, then their destroy.
 *
 * Every result is checked exactly; the first wrong one ends the rank with
 *   SOAK_FAILED rank=R round=K <what>        (exit 4)
 * Every --sample-seconds it reports its own resources:
 *   SAMPLE rank=R t=S rounds=K rss_kb=X fds=F threads=T streams=Q conns=C ...
 *          pending_tags=P unexpected_bytes=U
 * (streams: QUIC streams opened plus accepted so far, all peers; the last two
 * from nexar_comm_get_stats), and at the end
 *   SOAK_DONE rank=R rounds=K
 *
 *   soak_worker --seconds S [--sample-seconds P] [--mix p2p,coll,rpc,split]
 *
 * --mix runs only the parts named (all by default), to find which one grows.
 */
#include <dirent.h>
#include <malloc.h>
#include <nexar.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint32_t g_rank;
static unsigned long g_round;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      printf("SOAK_FAILED rank=%u round=%lu ", g_rank, g_round); \
      printf(__VA_ARGS__);                                       \
      printf(" (last error: %s)\n", nexar_last_error_message()); \
      fflush(stdout);                                            \
      exit(4);                                                   \
    }                                                            \
  } while (0)
#define CHECK_OK(call, what)                          \
  do {                                                \
    nexar_status_t s_ = (call);                       \
    CHECK(s_ == NEXAR_OK, "%s: status %d", what, s_); \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- completions of asynchronous p2p ---- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, errors;
  nexar_status_t first;
} waiter_t;

static void on_done(void *ud, const nexar_completion_t *c) {
  waiter_t *w = (waiter_t *)ud;
  pthread_mutex_lock(&w->mu);
  if (c->status != NEXAR_OK && w->errors++ == 0) w->first = c->status;
  w->done++;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Every wait is bounded: 120 s, well past the library's own timeouts. */
static void wait_all(waiter_t *w, int n, const char *what) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 120;
  pthread_mutex_lock(&w->mu);
  while (w->done < n)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0) break;
  int done = w->done, errors = w->errors;
  nexar_status_t first = w->first;
  pthread_mutex_unlock(&w->mu);
  CHECK(done == n, "%s: %d of %d completions after 120 s", what, done, n);
  CHECK(errors == 0, "%s: %d failed, the first with status %d", what, errors, first);
}

/* ---- data ---- */

static int64_t value(uint32_t rank, size_t i) {
  return (int64_t)(rank + 1) * 1000003 + (int64_t)i * 31 + (int64_t)g_round;
}

static unsigned char byte_of(uint32_t from, uint32_t to, uint32_t tag, size_t i) {
  return (unsigned char)(from * 131u + to * 7u + tag * 17u + (unsigned)(i % 251u));
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  CHECK(p != NULL, "out of memory for %zu bytes", n);
  return p;
}

/* ---- p2p: to every other rank, two tags each, posted in opposite orders ---- */

static void p2p_round(nexar_comm_t *comm) {
  static const size_t sizes[] = {0, 1, 100, 4096, 65537, 1u << 20, 3u << 20};
  const size_t nsizes = sizeof sizes / sizeof sizes[0];
  uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  uint32_t tags[2] = {(uint32_t)(g_round * 2) & 0x7fffffff,
                      (uint32_t)(g_round * 2 + 1) & 0x7fffffff};
  size_t len[2] = {sizes[g_round % nsizes], sizes[(g_round + 3) % nsizes]};
  unsigned char **in = calloc((size_t)n * 2, sizeof *in),
                **out = calloc((size_t)n * 2, sizeof *out);
  waiter_t w;
  memset(&w, 0, sizeof w);
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  int posted = 0;
  for (uint32_t p = 0; p < n; p++) {
    if (p == me) continue;
    for (int k = 1; k >= 0; k--) { /* the second tag's receive first */
      in[p * 2 + k] = xmalloc(len[k]);
      CHECK_OK(nexar_recv(comm, in[p * 2 + k], len[k], p, tags[k], on_done, &w), "nexar_recv");
      posted++;
    }
  }
  for (uint32_t p = 0; p < n; p++) {
    if (p == me) continue;
    for (int k = 0; k < 2; k++) {
      unsigned char *o = out[p * 2 + k] = xmalloc(len[k]);
      for (size_t i = 0; i < len[k]; i++)
        o[i] = byte_of(me, p, tags[k], i);
      CHECK_OK(nexar_send(comm, o, len[k], p, tags[k], on_done, &w), "nexar_send");
      posted++;
    }
  }
  wait_all(&w, posted, "p2p");
  for (uint32_t p = 0; p < n; p++) {
    if (p == me) continue;
    for (int k = 0; k < 2; k++) {
      for (size_t i = 0; i < len[k]; i++)
        CHECK(in[p * 2 + k][i] == byte_of(p, me, tags[k], i),
              "p2p from rank %u tag %u: byte %zu of %zu is wrong", p, tags[k], i, len[k]);
      free(in[p * 2 + k]);
      free(out[p * 2 + k]);
    }
  }
  free(in);
  free(out);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
}

/* ---- every collective ---- */

static void collectives_round(nexar_comm_t *comm) {
  static const size_t counts[] = {1, 7, 1000, 70000};
  const size_t c = counts[g_round % (sizeof counts / sizeof counts[0])];
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  const uint32_t root = (uint32_t)(g_round % n);
  int64_t *send = xmalloc(sizeof(int64_t) * c * n), *recv = xmalloc(sizeof(int64_t) * c * n);
  size_t i;
  uint32_t r;

  for (i = 0; i < c; i++)
    send[i] = value(me, i);
  CHECK_OK(nexar_allreduce(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL),
           "allreduce");
  for (i = 0; i < c; i++) {
    int64_t sum = 0;
    for (r = 0; r < n; r++)
      sum += value(r, i);
    CHECK(recv[i] == sum, "allreduce sum: element %zu of %zu", i, c);
  }
  CHECK_OK(nexar_allreduce(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_MAX, NULL, NULL),
           "allreduce max");
  for (i = 0; i < c; i++)
    CHECK(recv[i] == value(n - 1, i), "allreduce max: element %zu of %zu", i, c);

  for (i = 0; i < c; i++)
    recv[i] = me == root ? value(root, i) : -1;
  CHECK_OK(nexar_broadcast(comm, recv, c, NEXAR_DTYPE_I64, root, NULL, NULL), "broadcast");
  for (i = 0; i < c; i++)
    CHECK(recv[i] == value(root, i), "broadcast from %u: element %zu of %zu", root, i, c);

  CHECK_OK(nexar_reduce(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, root, NULL, NULL),
           "reduce");
  if (me == root)
    for (i = 0; i < c; i++) {
      int64_t sum = 0;
      for (r = 0; r < n; r++)
        sum += value(r, i);
      CHECK(recv[i] == sum, "reduce to %u: element %zu of %zu", root, i, c);
    }

  CHECK_OK(nexar_allgather(comm, send, recv, c, NEXAR_DTYPE_I64, NULL, NULL), "allgather");
  for (r = 0; r < n; r++)
    for (i = 0; i < c; i++)
      CHECK(recv[r * c + i] == value(r, i), "allgather: rank %u's element %zu", r, i);

  CHECK_OK(nexar_gather(comm, send, recv, c, NEXAR_DTYPE_I64, root, NULL, NULL), "gather");
  if (me == root)
    for (r = 0; r < n; r++)
      for (i = 0; i < c; i++)
        CHECK(recv[r * c + i] == value(r, i), "gather to %u: rank %u's element %zu", root, r, i);

  for (i = 0; i < c * n; i++)
    send[i] = value(me, i);
  CHECK_OK(nexar_reduce_scatter(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL),
           "reduce_scatter");
  for (i = 0; i < c; i++) {
    int64_t sum = 0;
    for (r = 0; r < n; r++)
      sum += value(r, me * c + i);
    CHECK(recv[i] == sum, "reduce_scatter: element %zu of %zu", i, c);
  }

  /* alltoall: block j of rank r is value(r * n + j, i). */
  for (r = 0; r < n; r++)
    for (i = 0; i < c; i++)
      send[r * c + i] = value(me * n + r, i);
  CHECK_OK(nexar_alltoall(comm, send, recv, c, NEXAR_DTYPE_I64, NULL, NULL), "alltoall");
  for (r = 0; r < n; r++)
    for (i = 0; i < c; i++)
      CHECK(recv[r * c + i] == value(r * n + me, i), "alltoall: rank %u's element %zu", r, i);

  /* scatter: root's block j is value(j + n, i). */
  if (me == root)
    for (r = 0; r < n; r++)
      for (i = 0; i < c; i++)
        send[r * c + i] = value(r + n, i);
  CHECK_OK(nexar_scatter(comm, send, recv, c, NEXAR_DTYPE_I64, root, NULL, NULL), "scatter");
  for (i = 0; i < c; i++)
    CHECK(recv[i] == value(me + n, i), "scatter from %u: element %zu", root, i);

  for (i = 0; i < c; i++)
    send[i] = value(me, i);
  CHECK_OK(nexar_scan(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL), "scan");
  for (i = 0; i < c; i++) {
    int64_t sum = 0;
    for (r = 0; r <= me; r++)
      sum += value(r, i);
    CHECK(recv[i] == sum, "scan: element %zu of %zu", i, c);
  }
  CHECK_OK(nexar_exscan(comm, send, recv, c, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL), "exscan");
  for (i = 0; me > 0 && i < c; i++) {
    int64_t sum = 0;
    for (r = 0; r < me; r++)
      sum += value(r, i);
    CHECK(recv[i] == sum, "exscan: element %zu of %zu", i, c);
  }

  CHECK_OK(nexar_barrier(comm, NULL, NULL), "barrier");
  free(send);
  free(recv);
}

/* ---- RPC ---- */

enum { kFnEcho = 7, kFnFails = 8, kFnNobody = 99 };

/* Echo with every byte plus one. */
static nexar_status_t echo_plus_one(void *ud, uint32_t src, uint32_t fn, const void *req,
                                    size_t len, nexar_rpc_reply_t *reply) {
  (void)ud, (void)src, (void)fn;
  if (len == 0) return NEXAR_OK;
  unsigned char *out = nexar_rpc_reply_alloc(reply, len);
  if (!out) return NEXAR_ERR_NO_MEMORY;
  for (size_t i = 0; i < len; i++)
    out[i] = (unsigned char)(((const unsigned char *)req)[i] + 1);
  return NEXAR_OK;
}

static nexar_status_t always_fails(void *ud, uint32_t src, uint32_t fn, const void *req, size_t len,
                                   nexar_rpc_reply_t *reply) {
  (void)ud, (void)src, (void)fn, (void)req, (void)len;
  nexar_rpc_reply_set_error(reply, "soak: this handler always fails");
  return NEXAR_ERR_INVALID_ARGUMENT;
}

static void register_rpc(nexar_comm_t *comm) {
  CHECK_OK(nexar_rpc_register(comm, kFnEcho, echo_plus_one, NULL), "rpc register echo");
  CHECK_OK(nexar_rpc_register(comm, kFnFails, always_fails, NULL), "rpc register fails");
}

static void echo_call(nexar_comm_t *comm, uint32_t target, size_t len) {
  unsigned char *req = xmalloc(len);
  for (size_t i = 0; i < len; i++)
    req[i] = (unsigned char)(i * 13 + g_round);
  nexar_rpc_response_t *resp = NULL;
  nexar_status_t s = nexar_rpc_call(comm, target, kFnEcho, req, len, &resp, NULL, NULL);
  CHECK(s == NEXAR_OK, "rpc echo to rank %u, %zu bytes: status %d", target, len, s);
  CHECK(nexar_rpc_response_size(resp) == len, "rpc echo to %u: %zu bytes back for %zu", target,
        nexar_rpc_response_size(resp), len);
  const unsigned char *back = nexar_rpc_response_data(resp);
  for (size_t i = 0; i < len; i++)
    CHECK(back[i] == (unsigned char)(req[i] + 1), "rpc echo to %u: byte %zu of %zu", target, i,
          len);
  nexar_rpc_response_free(resp);
  free(req);
}

static void rpc_round(nexar_comm_t *comm) {
  static const size_t sizes[] = {0, 10, 5000, 200000};
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  const size_t len = sizes[g_round % (sizeof sizes / sizeof sizes[0])];
  echo_call(comm, (me + 1) % n, len);
  echo_call(comm, me, len);
  if (g_round % 5 == 0) {
    nexar_rpc_response_t *resp = NULL;
    nexar_status_t s = nexar_rpc_call(comm, (me + 1) % n, kFnFails, "x", 1, &resp, NULL, NULL);
    CHECK(s == NEXAR_ERR_RPC_FAILED && resp == NULL, "rpc to a failing handler: status %d", s);
    s = nexar_rpc_call(comm, (me + n - 1) % n, kFnNobody, NULL, 0, &resp, NULL, NULL);
    CHECK(s == NEXAR_ERR_RPC_NOT_REGISTERED && resp == NULL, "rpc to no handler: status %d", s);
  }
  /* Nobody unregisters (or leaves) while another rank still calls it. */
  CHECK_OK(nexar_barrier(comm, NULL, NULL), "barrier after rpc");
}

/* ---- split and destroy ---- */

static void split_round(nexar_comm_t *comm) {
  const uint32_t me = nexar_comm_rank(comm), n = nexar_comm_size(comm);
  const uint32_t color = me % 2, key = n - me; /* reversed order inside each color */
  nexar_comm_t *sub = NULL;
  CHECK_OK(nexar_comm_split(comm, color, key, &sub, NULL, NULL), "split");
  uint32_t size = 0, rank = 0;
  for (uint32_t r = 0; r < n; r++)
    if (r % 2 == color) {
      size++;
      if (r > me) rank++;
    }
  CHECK(nexar_comm_size(sub) == size && nexar_comm_rank(sub) == rank,
        "split: rank %u of %u, expected %u of %u", nexar_comm_rank(sub), nexar_comm_size(sub), rank,
        size);
  int64_t x = (int64_t)me + (int64_t)g_round, sum = 0, expect = 0;
  for (uint32_t r = 0; r < n; r++)
    if (r % 2 == color) expect += (int64_t)r + (int64_t)g_round;
  CHECK_OK(nexar_allreduce(sub, &x, &sum, 1, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL),
           "allreduce on the split");
  CHECK(sum == expect, "allreduce on the split: %lld, expected %lld", (long long)sum,
        (long long)expect);
  register_rpc(sub);
  CHECK_OK(nexar_barrier(sub, NULL, NULL), "barrier after registering on the split");
  echo_call(sub, (nexar_comm_rank(sub) + 1) % size, 300);
  CHECK_OK(nexar_barrier(sub, NULL, NULL), "barrier on the split");
  nexar_comm_destroy(sub);
}

/* ---- resources ---- */

static long status_field(const char *name) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t k = strlen(name);
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, name, k) && line[k] == ':') {
      v = strtol(line + k + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* not the directory's own */
}

/* Bytes in use from glibc's malloc (not what the allocator keeps free). */
static size_t heap_kb(void) {
  struct mallinfo2 mi = mallinfo2();
  return (mi.uordblks + mi.hblkhd) >> 10;
}

static void sample(nexar_comm_t *comm, double t) {
  nexar_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(nexar_comm_get_stats(comm, &st), "get_stats");
  printf(
      "SAMPLE rank=%u t=%.1f rounds=%lu rss_kb=%ld fds=%d threads=%ld streams=%llu conns=%llu "
      "pending_tags=%llu unexpected_bytes=%llu heap_kb=%zu anon_kb=%ld shmem_kb=%ld\n",
      g_rank, t, g_round, status_field("VmRSS"), open_fds(), status_field("Threads"),
      (unsigned long long)(st.streams_opened + st.streams_accepted),
      (unsigned long long)st.connections, (unsigned long long)st.pending_tags,
      (unsigned long long)st.unexpected_bytes, heap_kb(), status_field("RssAnon"),
      status_field("RssShmem"));
  fflush(stdout);
}

int main(int argc, char **argv) {
  double seconds = 0, every = 5;
  const char *mix = "p2p,coll,rpc,split";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--mix") && i + 1 < argc)
      mix = argv[++i];
    else if (!strcmp(argv[i], "--sample-seconds") && i + 1 < argc)
      every = atof(argv[++i]);
    else {
      fprintf(stderr,
              "usage: soak_worker --seconds S [--sample-seconds P] [--mix p2p,coll,rpc,split]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Buffers of 64 KiB and more go back to the system when freed, so that
   * glibc's heap does not keep this program's large buffers in the RSS that
   * the soak watches (by default the threshold rises past them). */
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  nexar_comm_t *comm = NULL;
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) {
    printf("SOAK_FAILED rank=? join: status %d %s\n", s, nexar_last_error_message());
    return 3;
  }
  g_rank = nexar_comm_rank(comm);
  CHECK(nexar_comm_size(comm) >= 2, "the soak needs at least 2 ranks");
  register_rpc(comm);
  CHECK_OK(nexar_barrier(comm, NULL, NULL), "barrier after registering");
  const double start = now_s();
  double next_sample = start;
  for (;;) {
    const double t = now_s() - start;
    if (t >= next_sample - start) {
      sample(comm, t);
      next_sample += every;
    }
    /* Rank 0's clock decides for everyone. */
    int64_t go = t < seconds;
    CHECK_OK(nexar_broadcast(comm, &go, 1, NEXAR_DTYPE_I64, 0, NULL, NULL), "broadcast of go");
    if (!go) break;
    if (strstr(mix, "p2p")) p2p_round(comm);
    if (strstr(mix, "coll")) collectives_round(comm);
    if (strstr(mix, "rpc")) rpc_round(comm);
    if (strstr(mix, "split") && g_round % 3 == 0) split_round(comm);
    g_round++;
  }
  /* Nobody leaves while another rank may still wait for its data: a rank
   * late to the last broadcast would see a peer that already left as failed
   * (nexar_comm_destroy: "unless they are done with it"). Even after the
   * barrier a rank may still owe a peer its last barrier message (its send
   * then fails): linger a moment before leaving, as tests/cluster's worker. */
  CHECK_OK(nexar_barrier(comm, NULL, NULL), "final barrier");
  sample(comm, now_s() - start);
  printf("SOAK_DONE rank=%u rounds=%lu\n", g_rank, g_round);
  usleep(500000);
  nexar_comm_destroy(comm);
  return 0;
}
