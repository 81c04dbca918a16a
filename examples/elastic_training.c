/*
 * An elastic data-parallel training loop: it survives kill -9 of any rank but
 * rank 0 by shrinking, and grows back when a replacement process joins.
 *
 *   nexar-run -n 4 --elastic --max-restarts 3 -- nexar-elastic-training [STEPS [STEP_MS]]
 *
 * Each step sums integer "gradients" over a fixed global batch of kBatch
 * samples, split across the ranks there are: the sum (hence the model) does
 * not depend on how many ranks computed it, so the final checksum equals an
 * uninterrupted run's. Before each step the ranks agree (allreduce MIN) on how
 * many joiners wait; when some do, they grow the communicator and rank 0
 * broadcasts the model and the step number to everyone, joiners included. A
 * failed step is recovered by revoke and shrink, then the same broadcast. See
 * docs/elastic.md.
 */
#include <nexar.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kParams = 256, kBatch = 64 };

/* The model and where training is: what a new or surviving rank receives. */
typedef struct {
  int64_t step;
  int64_t w[kParams];
} state_t;

static int64_t sample_gradient(int64_t step, int sample, int k, const int64_t *w) {
  const int64_t x = (step * 131 + sample * 31 + k * 7) % 97 - 48;
  return x - w[k] / 64;
}

/* Rank 0 hands its state to every rank of comm. */
static nexar_status_t sync_state(nexar_comm_t *comm, state_t *st) {
  return nexar_broadcast(comm, st, sizeof *st / sizeof(int64_t), NEXAR_DTYPE_I64, 0, NULL, NULL);
}

/* After a failure: every rank leaves what it waits in, the survivors go on. */
static nexar_comm_t *recover(nexar_comm_t *comm) {
  nexar_comm_revoke(comm);
  nexar_comm_t *survivors = NULL;
  if (nexar_comm_shrink(comm, &survivors, NULL, NULL) != NEXAR_OK) {
    fprintf(stderr, "shrink: %s\n", nexar_last_error_message());
    exit(1);
  }
  nexar_comm_destroy(comm);
  printf("shrunk to %u ranks (now rank %u)\n", nexar_comm_size(survivors),
         nexar_comm_rank(survivors));
  return survivors;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int64_t steps = argc > 1 ? atoll(argv[1]) : 300;
  const long step_ms = argc > 2 ? atol(argv[2]) : 10;
  nexar_comm_t *comm = NULL;
  if (nexar_comm_init_from_env(&comm) != NEXAR_OK) {
    fprintf(stderr, "init: %s\n", nexar_last_error_message());
    return 1;
  }
  printf("rank %u of %u, pid %d\n", nexar_comm_rank(comm), nexar_comm_size(comm), (int)getpid());
  state_t st;
  memset(&st, 0, sizeof st);
  int synced = sync_state(comm, &st) == NEXAR_OK; /* a joiner learns the model here */
  int64_t grad[kParams];
  while (st.step < steps) {
    if (!synced) {
      comm = recover(comm);
      synced = sync_state(comm, &st) == NEXAR_OK;
      continue;
    }
    /* Grow when every rank sees joiners waiting. */
    uint32_t waiting = 0;
    nexar_comm_pending_joins(comm, &waiting);
    if (nexar_allreduce(comm, &waiting, &waiting, 1, NEXAR_DTYPE_U32, NEXAR_OP_MIN, NULL, NULL) !=
        NEXAR_OK) {
      synced = 0;
      continue;
    }
    if (waiting > 0) {
      nexar_comm_t *grown = NULL;
      if (nexar_comm_grow(comm, waiting, &grown, NULL, NULL) != NEXAR_OK) {
        fprintf(stderr, "grow: %s\n", nexar_last_error_message());
        synced = 0;
        continue;
      }
      nexar_comm_destroy(comm);
      comm = grown;
      printf("grown to %u ranks at step %lld\n", nexar_comm_size(comm), (long long)st.step);
      synced = sync_state(comm, &st) == NEXAR_OK;
      continue;
    }
    /* This rank's share of the batch. */
    const uint32_t rank = nexar_comm_rank(comm), size = nexar_comm_size(comm);
    memset(grad, 0, sizeof grad);
    for (int i = (int)rank; i < kBatch; i += (int)size)
      for (int k = 0; k < kParams; ++k)
        grad[k] += sample_gradient(st.step, i, k, st.w);
    if (nexar_allreduce(comm, grad, grad, kParams, NEXAR_DTYPE_I64, NEXAR_OP_SUM, NULL, NULL) !=
        NEXAR_OK) {
      synced = 0; /* redone after recovery, from rank 0's state */
      continue;
    }
    for (int k = 0; k < kParams; ++k)
      st.w[k] += grad[k] / kBatch;
    ++st.step;
    if (st.step % 50 == 0 && rank == 0)
      printf("step %lld with %u ranks\n", (long long)st.step, size);
    const struct timespec pause = {step_ms / 1000, (step_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
  }
  uint64_t sum = 0;
  for (int k = 0; k < kParams; ++k)
    sum = sum * 1000003u + (uint64_t)st.w[k];
  if (nexar_comm_rank(comm) == 0)
    printf("final step=%lld ranks=%u checksum=%016llx\n", (long long)st.step, nexar_comm_size(comm),
           (unsigned long long)sum);
  nexar_comm_destroy(comm);
  return 0;
}
