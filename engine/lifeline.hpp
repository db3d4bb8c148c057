// Ties an engine process to the one that reads its output, so that an orphaned engine
// never goes on generating into a pipe nobody reads.
//
// Source: Linux prctl(2) PR_SET_PDEATHSIG; POSIX signal(7) (an ignored SIGPIPE is
// inherited across exec, so a gateway that ignores it would leave its engine deaf to a
// closed pipe).
#pragma once

namespace loom::engine {

/// Call first in an engine's main(): restores SIGPIPE's default action, so a write to a
/// stdout whose reader is gone ends the engine at once; and asks the kernel to send it
/// SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG; a parent that
/// starts engines must do so from a thread that lives as long as it wants them).
void tie_to_parent();

/// What the serve loop does when a write or flush of its output fails (EPIPE, EBADF,
/// ENOSPC...): nobody can receive the results any more, so the engine says why on
/// stderr and exits at once with status 1. `err` is the errno of the failure.
[[noreturn]] void output_lost(int err);

}  // namespace loom::engine
