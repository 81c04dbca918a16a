"""A data-parallel training loop that survives the loss of a rank.

Start 4 ranks in a way that does not stop them all when one dies (a seed and
NEXAR_SEED / NEXAR_RANK in each rank's environment), then kill -9 one: the
survivors' all_reduce raises PeerFailedError naming it; each survivor revokes
the communicator, shrinks it to the survivors and redoes the step. See
docs/failures.md.
"""
import sys

import numpy as np

import nexar


def main(steps: int = 200, params: int = 1024) -> None:
    comm = nexar.init()
    comm.set_failure_callback(
        lambda rank, cause: print(f"lost rank {rank} ({cause})", file=sys.stderr))
    weights = np.zeros(params, np.float32)
    step = 0
    while step < steps:
        grad = np.full(params, comm.rank + 1, np.float32)
        try:
            comm.all_reduce(grad)
        except nexar.ExcludedError:
            print("the others went on without this rank", file=sys.stderr)
            break
        except (nexar.PeerFailedError, nexar.RevokedError, nexar.AbortedError) as e:
            print(f"step {step} failed: {e}", file=sys.stderr)
            comm.revoke()
            survivors = comm.shrink()
            comm.close()
            comm = survivors
            print(f"continuing with {comm.size} ranks (now rank {comm.rank})")
            continue
        weights -= 0.01 * grad / comm.size
        step += 1
    print(f"rank {comm.rank} done, weights[0] = {weights[0]}")
    comm.close()


if __name__ == "__main__":
    main()
