# nexar-bench's own checks (included from tests/CMakeLists.txt, where testing
# is enabled). Small sizes, few iterations, 2 ranks; figures are never
# asserted: bench/check_bench_output.py checks rows, checks and formats.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "nexar-bench tests: no Python 3, skipped")
  return()
endif()
set(_check ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_bench_output.py
           $<TARGET_FILE:nexar-bench>)

# Every op, nexar only, --json and --csv; and docs/bench/results.md's report
# (scripts/bench.sh) made from those rows.
add_test(NAME bench.every_op_rows_json_csv
         COMMAND ${_check} all --ranks 2 --sizes 8,4K --iters 5 --warmup 1 --timeout 120
                 --report)
set_tests_properties(bench.every_op_rows_json_csv PROPERTIES TIMEOUT 600)

# --plot writes a PNG (one quick row); skipped (77) without matplotlib, which
# ctest cannot install (scripts/test.sh does).
add_test(NAME bench.plot_writes_png
         COMMAND ${_check} barrier --ranks 2 --iters 3 --warmup 1 --timeout 120 --plot plot.png)
set_tests_properties(bench.plot_writes_png PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# --rounds: nexar and nexar-spin (no peer packages needed) take turns three
# times; the rows are combined (one per size) and the ratios paired by round.
add_test(NAME bench.rounds_combine_rows_and_pair_ratios
         COMMAND ${_check} allreduce,barrier --ranks 2 --sizes 8,4K --iters 5 --warmup 1
                 --timeout 120 --rounds 3 --compare nexar-spin)
set_tests_properties(bench.rounds_combine_rows_and_pair_ratios PROPERTIES TIMEOUT 600)

# --bind-to core (every library's ranks pinned, through nexar-run) and the
# nexar-bound variant: 3 ranks on the runner's cores, rows ok, tables say so.
add_test(NAME bench.bind_to_core_rows
         COMMAND ${_check} allreduce,broadcast --ranks 3 --sizes 8,4K --iters 5 --warmup 1
                 --timeout 120 --bind-to core --compare nexar-bound)
set_tests_properties(bench.bind_to_core_rows PROPERTIES TIMEOUT 600)

# A worker that hangs is killed after --timeout; its rows are reported failed.
add_test(NAME bench.stalled_worker_is_killed_and_reported
         COMMAND ${_check} --mode timeout allreduce --ranks 2 --sizes 8,4K --iters 3 --timeout 3)
set_tests_properties(bench.stalled_worker_is_killed_and_reported PROPERTIES TIMEOUT 120)

# One --compare row against Open MPI (TCP); skipped (77) when the peers'
# packages are missing. The peer programs are built once into the build tree.
add_test(NAME bench.compare_openmpi_one_row
         COMMAND ${_check} allreduce --ranks 2 --sizes 4K --iters 5 --warmup 1 --timeout 120
                 --compare openmpi)
set_tests_properties(bench.compare_openmpi_one_row PROPERTIES
  TIMEOUT 900 SKIP_RETURN_CODE 77
  ENVIRONMENT "NEXAR_BENCH_CACHE=${CMAKE_BINARY_DIR}/bench-peers")
