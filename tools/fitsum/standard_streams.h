// What every fitsum process sets up before its command runs and checks after it: standard descriptors that stay
// what they are, writes past `ulimit -f` that fail (EFBIG) instead of killing the process, temporary files removed
// on SIGINT / SIGTERM / SIGHUP, and standard output that was really written.
#pragma once

namespace fitsum::cli {

// Before the command: a closed standard descriptor (`>&-`) is held by a read-only /dev/null, so that writes to it
// fail as before while the first file fitsum opens cannot take its number (printf would then write into that file);
// SIGXFSZ is ignored, so that a write past the file size limit fails with EFBIG and is reported like a full disk;
// util::remove_temporary_files_on_signals.
void prepare_process();

// After a command that succeeded: flushes standard output (stdio and std::cout) and returns 0 when every write to it
// succeeded, else prints "fitsum: error: cannot write to standard output: <why>" and returns 1. A reader that
// closed its pipe (`fitsum train ... | head`) is not a failure: training ignores SIGPIPE so that it goes on, and
// ends with status 0 (docs/robustness.md).
int finish_standard_output();

}  // namespace fitsum::cli
