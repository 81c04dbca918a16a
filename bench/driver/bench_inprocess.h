// The quick mode (--in-process): every rank an engine inside this process.
#pragma once

namespace nexar_bench {

// argv[0] is ignored, argv[1] the operation (p2p or a collective), then its
// options. Returns the exit status.
int run_in_process(int argc, char **argv);

}  // namespace nexar_bench
