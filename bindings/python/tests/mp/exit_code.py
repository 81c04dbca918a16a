"""One rank that joins, outlives the world's formation, then exits with status 3."""
import sys
import time

import nexar

with nexar.init() as comm:
    comm.barrier()
    time.sleep(1)  # the launcher sees the world formed while this rank still runs
sys.exit(3)
