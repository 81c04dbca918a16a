/* Linked into nexar-elastic-worker-seed-mute only (elastic_process_test):
 * faults of the link to the seed in the middle of a grow. The executable's
 * sendmsg and recvmmsg come before libc's (and a sanitizer's), so libnexar's
 * calls pass through here.
 * - Muted (the worker's "muteseed" step): the first large datagram from the
 *   seed (a grow's Welcome) mutes everything this process sends to the seed
 *   from then on: the worker forms the grown mesh with its peers, but the
 *   seed never hears from it again and loses it, as it would a member that
 *   died after the others formed the mesh.
 * - Slow ("slowseed"): after the grow's first Welcome, the next one (large
 *   datagrams from the seed more than 0.5 s later: the seed welcomes again)
 *   and everything else from the seed is lost for 1.5 s; QUIC resends it
 *   after that. Meanwhile this worker still runs the attempt the seed
 *   replaced, as a loaded host's worker would. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

void elastic_test_arm_seed_mute(void);
void elastic_test_arm_seed_slow(void);

/* A Welcome carries two certificates: well above any ACK, PING or count. */
enum { kWelcomeBytes = 1000 };

enum { kRewelcomeGapMs = 500, kHoldMs = 1500 };

static struct sockaddr_in seed_addr; /* written before armed is set */
static atomic_int armed, muted, slow;
/* Slow mode, receiving thread only: when the last large datagram came, and
 * until when everything from the seed is lost (0: not yet). */
static int64_t last_large_ms, hold_until_ms;
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);

/* Before main and any thread: the calls below only read these. */
__attribute__((constructor)) static void find_real_calls(void) {
  real_sendmsg = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
  real_recvmmsg = (int (*)(int, struct mmsghdr *, unsigned int, int, struct timespec *))dlsym(
      RTLD_NEXT, "recvmmsg");
  if (!real_sendmsg || !real_recvmmsg) {
    fprintf(stderr, "seed_link_faults: the real sendmsg or recvmmsg was not found\n");
    abort();
  }
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void find_seed(void) {
  const char *seed = getenv("NEXAR_SEED");
  char host[64] = "";
  unsigned port = 0;
  if (!seed || sscanf(seed, "%63[0-9.]:%u", host, &port) != 2 ||
      inet_pton(AF_INET, host, &seed_addr.sin_addr) != 1) {
    fprintf(stderr, "seed_link_faults: NEXAR_SEED=%s is not an IPv4 ip:port\n", seed ? seed : "");
    abort();
  }
  seed_addr.sin_family = AF_INET;
  seed_addr.sin_port = htons((uint16_t)port);
}

void elastic_test_arm_seed_mute(void) {
  find_seed();
  atomic_store(&armed, 1);
}

void elastic_test_arm_seed_slow(void) {
  find_seed();
  atomic_store(&slow, 1);
  atomic_store(&armed, 1);
}

/* Slow mode: whether this datagram from the seed is lost. */
static int held_back(const struct mmsghdr *m) {
  const int64_t now = now_ms();
  if (hold_until_ms) return now < hold_until_ms;
  if (m->msg_len < kWelcomeBytes) return 0;
  if (last_large_ms && now - last_large_ms > kRewelcomeGapMs) {
    hold_until_ms = now + kHoldMs;
    return 1;
  }
  last_large_ms = now;
  return 0;
}

static int from_seed(const void *name, socklen_t len) {
  const struct sockaddr_in *a = name;
  return name && len >= sizeof *a && a->sin_family == AF_INET &&
         a->sin_addr.s_addr == seed_addr.sin_addr.s_addr && a->sin_port == seed_addr.sin_port;
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  if (atomic_load(&muted) && from_seed(m->msg_name, m->msg_namelen)) {
    size_t n = 0;
    for (size_t i = 0; i < m->msg_iovlen; ++i)
      n += m->msg_iov[i].iov_len;
    return (ssize_t)n; /* "sent", and lost on the way */
  }
  return real_sendmsg(fd, m, flags);
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *timeout) {
  const int got = real_recvmmsg(fd, v, n, flags, timeout);
  if (atomic_load(&armed))
    for (int i = 0; i < got; ++i) {
      if (!from_seed(v[i].msg_hdr.msg_name, v[i].msg_hdr.msg_namelen)) continue;
      if (atomic_load(&slow)) {
        if (held_back(&v[i])) v[i].msg_len = 0; /* nexar reads nothing from it */
      } else if (v[i].msg_len >= kWelcomeBytes) {
        atomic_store(&muted, 1);
      }
    }
  return got;
}
