/*
 * A data-parallel training loop that survives the loss of a rank.
 *
 *   nexar-seed --world-size 4 &            (or any way of starting 4 ranks
 *   NEXAR_SEED=host:port NEXAR_RANK=r nexar-resilient-training   that does
 *                                          not stop them all when one dies)
 *
 * Each step averages the ranks' gradients with an allreduce. When a rank dies
 * (kill -9 one of them), the survivors' allreduce fails with
 * NEXAR_ERR_PEER_FAILED naming it; each survivor revokes the communicator (so
 * every rank leaves whatever it waits in), shrinks it to the survivors and
 * redoes the step with them. See docs/failures.md.
 */
#include <nexar.h>
#include <stdio.h>
#include <string.h>

enum { kParams = 1024, kSteps = 200 };

int main(void) {
  nexar_comm_t *comm = NULL;
  if (nexar_comm_init_from_env(&comm) != NEXAR_OK) {
    fprintf(stderr, "init: %s\n", nexar_last_error_message());
    return 1;
  }
  float weights[kParams], grad[kParams];
  memset(weights, 0, sizeof weights);
  for (int step = 0; step < kSteps;) {
    for (int i = 0; i < kParams; ++i) /* this rank's "gradient" */
      grad[i] = (float)(nexar_comm_rank(comm) + 1);
    nexar_status_t s =
        nexar_allreduce(comm, grad, grad, kParams, NEXAR_DTYPE_F32, NEXAR_OP_SUM, NULL, NULL);
    if (s == NEXAR_OK) {
      const float n = (float)nexar_comm_size(comm);
      for (int i = 0; i < kParams; ++i)
        weights[i] -= 0.01f * grad[i] / n;
      ++step;
      continue;
    }
    if (s == NEXAR_ERR_EXCLUDED) { /* the others went on without this rank */
      fprintf(stderr, "excluded: %s\n", nexar_last_error_message());
      break;
    }
    fprintf(stderr, "rank %u: step %d failed: %s\n", nexar_comm_rank(comm), step,
            nexar_last_error_message());
    nexar_comm_revoke(comm);
    nexar_comm_t *survivors = NULL;
    if (nexar_comm_shrink(comm, &survivors, NULL, NULL) != NEXAR_OK) {
      fprintf(stderr, "shrink: %s\n", nexar_last_error_message());
      break;
    }
    nexar_comm_destroy(comm);
    comm = survivors;
    printf("continuing with %u ranks (this one is now rank %u)\n", nexar_comm_size(comm),
           nexar_comm_rank(comm));
  }
  printf("rank %u done, weights[0] = %f\n", nexar_comm_rank(comm), weights[0]);
  nexar_comm_destroy(comm);
  return 0;
}
