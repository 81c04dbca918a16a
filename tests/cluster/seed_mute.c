/* Linked into nexar-elastic-worker-seed-mute only (elastic_process_test): a
 * link to the seed that goes down in the middle of a grow. The executable's
 * sendmsg and recvmmsg come before libc's (and a sanitizer's), so libnexar's
 * calls pass through here. Once armed (the worker's "muteseed" step), the
 * first large datagram from the seed (a grow's Welcome) mutes everything this
 * process sends to the seed from then on: the worker forms the grown mesh
 * with its peers, but the seed never hears from it again and loses it, as it
 * would a member that died after the others formed the mesh. */
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

void elastic_test_arm_seed_mute(void);

/* A Welcome carries two certificates: well above any ACK, PING or count. */
enum { kWelcomeBytes = 1000 };

static struct sockaddr_in seed_addr; /* written before armed is set */
static atomic_int armed, muted;
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);

/* Before main and any thread: the calls below only read these. */
__attribute__((constructor)) static void find_real_calls(void) {
  real_sendmsg = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
  real_recvmmsg = (int (*)(int, struct mmsghdr *, unsigned int, int, struct timespec *))dlsym(
      RTLD_NEXT, "recvmmsg");
  if (!real_sendmsg || !real_recvmmsg) {
    fprintf(stderr, "seed_mute: the real sendmsg or recvmmsg was not found\n");
    abort();
  }
}

void elastic_test_arm_seed_mute(void) {
  const char *seed = getenv("NEXAR_SEED");
  char host[64] = "";
  unsigned port = 0;
  if (!seed || sscanf(seed, "%63[0-9.]:%u", host, &port) != 2 ||
      inet_pton(AF_INET, host, &seed_addr.sin_addr) != 1) {
    fprintf(stderr, "seed_mute: NEXAR_SEED=%s is not an IPv4 ip:port\n", seed ? seed : "");
    abort();
  }
  seed_addr.sin_family = AF_INET;
  seed_addr.sin_port = htons((uint16_t)port);
  atomic_store(&armed, 1);
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
    for (int i = 0; i < got; ++i)
      if (v[i].msg_len >= kWelcomeBytes &&
          from_seed(v[i].msg_hdr.msg_name, v[i].msg_hdr.msg_namelen))
        atomic_store(&muted, 1);
  return got;
}
