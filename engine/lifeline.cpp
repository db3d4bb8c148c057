// The engine's ties to its parent and its output; see lifeline.hpp.
#include "engine/lifeline.hpp"

#include <csignal>
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::engine {

void tie_to_parent() {
    std::signal(SIGPIPE, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
}

void output_lost(int err) {
    std::fprintf(stderr, "loom-engine: cannot write to stdout (%s); nobody reads the results: stopping\n",
                 std::strerror(err));
    std::_Exit(1);
}

}  // namespace loom::engine
