/*
 * A worker for the relay-healing test (tests/integration/relay_healing_test.cpp),
 * against the public C ABI only. It joins from the environment (a ring, so
 * that rank 0's messages to rank 2 go through rank 1), then:
 *
 *   rank 0  sends kMessages numbered messages to rank 2, one after another;
 *           a send that fails is reported and sent again (at most 5 times):
 *             SEND_FAILED seq=I status=S failed_rank=F <message>
 *           then tells ranks 3, 4 and 5 it is done (routes round rank 1).
 *   rank 1  relays until it is killed.
 *   rank 2  receives until it has every number; a receive that fails is
 *           reported and posted again; a number seen twice in a row (a send
 *           retried after its message did arrive) is counted:
 *             PROGRESS received=K        (every 20)
 *             RECV_FAILED status=S <message>
 *             STREAM_DONE received=K duplicates=D out_of_order=O
 *   3, 4, 5 wait for rank 0's done message:  BYE_OK rank=R
 *
 * With RELAY_STREAM_TIMES=1 rank 2 also prints, for each new number, when it
 * arrived (CLOCK_MONOTONIC, comparable across processes of one host), for
 * scripts/relay-kill-figure.py:
 *             ARRIVED seq=I t_ns=T
 *
 * Exit 0 when its part went through, 4 otherwise (FAILED <what> ...).
 */
#include <nexar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kMessages = 200, kBytes = 96 * 1024, kTag = 1, kByeTag = 2, kRetries = 5 };

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int sender(nexar_comm_t *comm) {
  unsigned char *buf = malloc(kBytes);
  for (uint32_t seq = 0; seq < kMessages; seq++) {
    memset(buf, (int)(seq & 0xff), kBytes);
    memcpy(buf, &seq, sizeof seq);
    int tries = 0;
    for (;;) {
      nexar_status_t s = nexar_send(comm, buf, kBytes, 2, kTag, NULL, NULL);
      if (s == NEXAR_OK) break;
      nexar_completion_t info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      nexar_last_error(&info);
      printf("SEND_FAILED seq=%u status=%d failed_rank=%d %s\n", seq, s, info.failed_rank,
             info.message);
      fflush(stdout);
      if (++tries == kRetries) {
        printf("FAILED send seq=%u after %d tries\n", seq, tries);
        return 4;
      }
      pause_ms(200);
    }
    pause_ms(25);  // a stream, not a burst: the kill lands mid-way
  }
  printf("STREAM_SENT messages=%d\n", kMessages);
  for (uint32_t r = 3; r <= 5; r++) {
    uint32_t bye = 0xB7E;
    nexar_status_t s = nexar_send(comm, &bye, sizeof bye, r, kByeTag, NULL, NULL);
    if (s != NEXAR_OK) {
      printf("FAILED bye to rank %u status=%d %s\n", r, s, nexar_last_error_message());
      return 4;
    }
  }
  free(buf);
  return 0;
}

static unsigned long long monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int receiver(nexar_comm_t *comm) {
  const char *times = getenv("RELAY_STREAM_TIMES");
  const int print_times = times && strcmp(times, "1") == 0;
  unsigned char *buf = malloc(kBytes);
  uint32_t next = 0;
  int duplicates = 0, out_of_order = 0, failures = 0;
  while (next < kMessages) {
    nexar_status_t s = nexar_recv(comm, buf, kBytes, 0, kTag, NULL, NULL);
    if (s != NEXAR_OK) {
      printf("RECV_FAILED status=%d %s\n", s, nexar_last_error_message());
      fflush(stdout);
      if (++failures > 20) return 4;
      continue;
    }
    uint32_t seq;
    memcpy(&seq, buf, sizeof seq);
    if (buf[kBytes - 1] != (unsigned char)(seq & 0xff)) {
      printf("FAILED content of seq=%u\n", seq);
      return 4;
    }
    if (seq == next) {
      if (print_times) printf("ARRIVED seq=%u t_ns=%llu\n", seq, monotonic_ns());
      next++;
      if (next % 20 == 0) {
        printf("PROGRESS received=%u\n", next);
        fflush(stdout);
      }
    } else if (seq + 1 == next) {
      duplicates++;
    } else {
      out_of_order++;
    }
  }
  printf("STREAM_DONE received=%u duplicates=%d out_of_order=%d\n", next, duplicates, out_of_order);
  free(buf);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  nexar_comm_t *comm = NULL;
  nexar_status_t s = nexar_comm_init_from_env(&comm);
  if (s != NEXAR_OK) {
    printf("JOIN_FAILED status=%d %s\n", s, nexar_last_error_message());
    return 3;
  }
  uint32_t me = nexar_comm_rank(comm);
  printf("JOINED rank=%u size=%u\n", me, nexar_comm_size(comm));
  int rc = 0;
  if (me == 0) {
    rc = sender(comm);
  } else if (me == 2) {
    rc = receiver(comm);
  } else if (me == 1) {
    pause_ms(120000); /* the test kills it long before */
  } else {
    uint32_t bye = 0;
    s = nexar_recv(comm, &bye, sizeof bye, 0, kByeTag, NULL, NULL);
    if (s != NEXAR_OK || bye != 0xB7E) {
      printf("FAILED bye status=%d %s\n", s, nexar_last_error_message());
      rc = 4;
    } else {
      printf("BYE_OK rank=%u\n", me);
    }
  }
  /* Everyone stays until the stream is over: a rank on the detour that left
   * early would cut it. Rank 0's bye comes last. */
  if (me == 2) pause_ms(3000);
  nexar_comm_destroy(comm);
  return rc;
}
