// `fitsum plan`: the flags of `fitsum train` plus --max_memory (default auto) and --format; predicts every
// candidate configuration's peak memory and speed from a short calibration probe of the model and prints the
// table and the chosen plan (docs/memory.md). With --format json, stdout holds only the JSON; logs go to stderr.
#include <iostream>

#include <torch/torch.h>

#include "commands.h"
#include "fitsum/memory/device_memory.h"
#include "fitsum/memory/planner.h"
#include "fitsum/tokenizer/pegasus_tokenizer.h"
#include "fitsum/util/bytes.h"
#include "memory_report.h"
#include "planning.h"

namespace fitsum::cli {

namespace {

struct PlanCommandOptions {
  TrainCommandOptions train;
  std::string format = "table";
};

void run_plan(PlanCommandOptions& p, const CLI::App& command) {
  auto& o = p.train;
  if (p.format != "table" && p.format != "json") {
    throw std::invalid_argument("--format '" + p.format + "' is not one of table, json");
  }
  if (o.training.optim == "auto") o.training.optim = "adamw_torch";  // the planner chooses: not a fixed knob
  if (o.training.output_dir.empty()) o.training.output_dir = ".";    // optional for plan: nothing is written
  o.training.validate();
  if (o.num_threads > 0) at::set_num_threads(o.num_threads);
  const auto cuda_conf = memory::apply_cuda_alloc_conf(o.cuda_alloc_conf);  // before CUDA starts
  const auto device = resolve_device(o.device);
  memory::start_tracking(device);
  const auto budget = memory::resolve_memory_budget(o.max_memory.empty() ? "auto" : o.max_memory, device);

  auto loaded = io::load_model(o.model, static_cast<std::uint64_t>(o.training.seed));
  auto& model = *loaded.model;
  for (const auto& warning : data::clamp_lengths_to_model(o.data, model.config().max_position_embeddings)) {
    std::cerr << "fitsum: warning: " << warning << "\n";
  }
  o.data.validate();
  std::vector<data::Example> examples;
  if (!o.train_file.empty()) {
    std::optional<tokenizer::PegasusTokenizer> tokenizer;
    if (!loaded.tokenizer_dir.empty()) {
      tokenizer.emplace(tokenizer::PegasusTokenizer::from_folder(loaded.tokenizer_dir));
    }
    examples = data::read_examples(o.train_file, tokenizer ? &*tokenizer : nullptr, model.config().vocab_size, o.data,
                                   o.data.max_train_samples);
  }
  const auto worst = worst_batch_shape(examples, o.data);
  std::cerr << "fitsum: " << loaded.description << "; worst batch " << worst.source << " source x " << worst.target
            << " target tokens per example" << (examples.empty() ? " (from the max lengths)" : " (from the data)")
            << "\n";
  model.to(device);
  memory::CalibrationOptions calibration_options;
  calibration_options.max_source_length = worst.source;
  calibration_options.max_target_length = worst.target;
  calibration_options.bf16 = o.training.bf16;
  calibration_options.label_smoothing = o.training.label_smoothing_factor;
  const auto calibration = memory::calibrate(model, calibration_options);
  std::cerr << "fitsum: calibration probe: " << calibration.samples.size() << " passes in "
            << static_cast<int>(calibration.probe_seconds * 1000) << " ms\n";
  // On CUDA the budget caps reserved memory; on the CPU --cuda_alloc_conf asks what the plan would reserve there.
  const bool cuda_terms = device.is_cuda() || !o.cuda_alloc_conf.empty();
  const auto cuda = cuda_planning(model, cuda_conf, device, worst);
  auto request = make_plan_request(command, o, worst, budget);
  if (device.is_cuda()) budget_reserved_bytes(request, cuda);
  const auto plan = memory::choose_plan(calibration, request);
  if (p.format == "json") {
    auto json = plan_json(plan, budget);
    if (cuda_terms) add_cuda_breakdown(json, plan, cuda);
    std::cout << json.dump(2) << "\n";
  } else {
    std::cout << plan_table(plan, calibration, budget) << (cuda_terms ? cuda_summary(plan, cuda) : "");
    if (plan.chosen) {
      std::cout << "flags: "
                << plan_flags(plan.candidates[*plan.chosen],
                              std::max(calibration.encoder_layers, calibration.decoder_layers))
                << "\n";
    }
  }
  std::cout.flush();
  if (!o.memory_report.empty()) {
    write_memory_report(o.memory_report, plan, std::max(calibration.encoder_layers, calibration.decoder_layers), budget,
                        {});
    std::cerr << "fitsum: wrote " << o.memory_report << "\n";
  }
  if (!plan.chosen) throw ExitStatus{3};
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanCommandOptions>();
  auto* cmd = app.add_subcommand("plan",
                                 "Predict peak memory and speed of training configurations and choose the fastest "
                                 "that fits --max_memory (same flags as train)");
  add_training_flags(*cmd, options->train);
  cmd->add_option("--format", options->format, "table or json (stdout holds only the JSON)")->capture_default_str();
  cmd->callback([options, cmd]() { run_plan(*options, *cmd); });
}

}  // namespace fitsum::cli
