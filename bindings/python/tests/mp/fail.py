"""Rank 1 raises; the others would wait in a barrier for its 30 s timeout."""
import nexar

comm = nexar.init()
comm.barrier()
if comm.rank == 1:
    raise RuntimeError("boom on rank 1")
comm.barrier()
print(f"rank {comm.rank} passed a barrier rank 1 never entered")
