// nexar-seed: the discovery server of a nexar cluster, as a command.
//
//   nexar-seed --listen HOST:PORT --world-size N [--token-file F] [--ca-dir DIR]
//              [--open] [--formation-timeout S] [--elastic [--max-world-size N]]
//
// Prints the address it bound and every join, refusal and the outcome on
// stdout; exits 0 once every rank reported its mesh formed, 1 if formation
// failed, 2 on a usage error. With --elastic it stays up after formation,
// admitting joiners into the running world, until SIGINT or SIGTERM (then
// exits 0 if the world had formed). Built on the public C ABI only.
#include <nexar.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile sig_atomic_t g_stop = 0;

void on_signal(int) {
  g_stop = 1;
}

void usage(FILE *f) {
  fprintf(f,
          "usage: nexar-seed --listen HOST:PORT --world-size N [--token-file F] [--ca-dir DIR]\n"
          "                  [--open] [--formation-timeout SECONDS] [--elastic]\n"
          "                  [--max-world-size N]\n"
          "\n"
          "  --listen HOST:PORT       concrete address to bind (port 0 = any); default "
          "127.0.0.1:0\n"
          "  --world-size N           number of workers that form the cluster\n"
          "  --token-file F           cluster token (else NEXAR_CLUSTER_TOKEN)\n"
          "  --ca-dir DIR             keep the cluster CA in DIR (ca.pem, ca-key.pem with mode\n"
          "                           0600), created if absent, so restarts keep the trust anchor\n"
          "  --open                   without a token, admit workers from other hosts too\n"
          "  --formation-timeout S    give up when the world is not complete after S seconds\n"
          "                           (default 60)\n"
          "  --elastic                stay up after formation and admit joiners into the\n"
          "                           running world (nexar_comm_grow); until SIGINT/SIGTERM\n"
          "  --max-world-size N       with --elastic: no grow past N ranks (default 1024)\n");
}

void on_event(void *, const nexar_seed_event_t *e) {
  printf("nexar-seed: %s%s\n", e->kind == NEXAR_SEED_EVENT_FAILED ? "error: " : "", e->message);
  fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
  nexar_seed_options_t opts;
  if (nexar_seed_options_init(&opts, sizeof opts) != NEXAR_OK) {
    fprintf(stderr, "nexar-seed: %s\n", nexar_last_error_message());
    return 2;
  }
  std::string listen = "127.0.0.1:0", token_file, ca_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *name) -> const char * {
      if (i + 1 >= argc) {
        fprintf(stderr, "nexar-seed: %s needs a value\n", name);
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--listen") {
      listen = value("--listen");
    } else if (a == "--world-size") {
      char *end = nullptr;
      const char *v = value("--world-size");
      unsigned long n = strtoul(v, &end, 10);
      if (*end || n == 0 || n > 1024) {
        fprintf(stderr, "nexar-seed: --world-size %s is not in 1..1024\n", v);
        return 2;
      }
      opts.world_size = static_cast<uint32_t>(n);
    } else if (a == "--token-file") {
      token_file = value("--token-file");
    } else if (a == "--ca-dir") {
      ca_dir = value("--ca-dir");
    } else if (a == "--open") {
      opts.open = 1;
    } else if (a == "--formation-timeout") {
      char *end = nullptr;
      const char *v = value("--formation-timeout");
      double s = strtod(v, &end);
      if (*end || !(s > 0) || s > 1e6) {
        fprintf(stderr, "nexar-seed: --formation-timeout %s is not a number of seconds\n", v);
        return 2;
      }
      opts.formation_timeout_ms = static_cast<uint64_t>(s * 1000);
    } else if (a == "--elastic") {
      opts.elastic = 1;
    } else if (a == "--max-world-size") {
      char *end = nullptr;
      const char *v = value("--max-world-size");
      unsigned long n = strtoul(v, &end, 10);
      if (*end || n == 0 || n > 1024) {
        fprintf(stderr, "nexar-seed: --max-world-size %s is not in 1..1024\n", v);
        return 2;
      }
      opts.max_world_size = static_cast<uint32_t>(n);
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "nexar-seed: unknown argument %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (opts.world_size == 0) {
    fprintf(stderr, "nexar-seed: --world-size is required\n");
    usage(stderr);
    return 2;
  }
  opts.listen_address = listen.c_str();
  if (!token_file.empty()) {
    opts.cluster_token = nullptr;  // the file named here wins over the environment
    opts.token_file = token_file.c_str();
  }
  if (!ca_dir.empty()) opts.ca_dir = ca_dir.c_str();
  opts.on_event = on_event;
  opts.event_user_data = nullptr;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  nexar_seed_t *seed = nullptr;
  if (nexar_seed_start(&seed, &opts) != NEXAR_OK) {
    fprintf(stderr, "nexar-seed: %s\n", nexar_last_error_message());
    return 1;
  }
  nexar_status_t s;
  for (;;) {
    int32_t ended = 0;
    s = nexar_seed_wait(seed, 200, &ended);
    if (ended && !(opts.elastic && s == NEXAR_OK)) break;
    if (ended) {  // elastic and formed: admit joiners until told to stop
      if (g_stop) break;
      usleep(200000);
      continue;
    }
    if (g_stop) {
      printf("nexar-seed: interrupted before the cluster formed\n");
      fflush(stdout);
      break;
    }
  }
  nexar_seed_stop(seed);
  if (s == NEXAR_OK) return 0;
  return 1;
}
