// The flags that say where a model named by Hub id ("org/name") is looked up, for every command that takes a model
// (run_summarization.py's ModelArguments names), and the download progress drawn on stderr.
#pragma once

#include <CLI/CLI.hpp>

#include "fitsum/io/hub.h"
#include "fitsum/io/model_loader.h"

namespace fitsum::cli {

// --revision (alias --model_revision), --cache_dir, --token: into the source's fields of the same meaning.
void add_hub_flags(CLI::App& command, io::ModelSource& source);

// The lookup options of `source`, with download progress on stderr unless `quiet`.
io::HubOptions hub_options(const io::ModelSource& source, bool quiet = false);

// Draws each file's download on stderr as huggingface_hub's tqdm bar does ("model.safetensors: 45%|####  |
// 1.08G/2.28G [00:12<00:13, 90.1MB/s]"): redrawn in place on a terminal, one line per finished file otherwise.
io::HubProgressFn download_progress();

}  // namespace fitsum::cli
