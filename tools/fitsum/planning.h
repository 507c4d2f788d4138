// What `fitsum plan` and `fitsum train --max_memory` share: turning the flags into a planner request (knobs the
// user set explicitly stay fixed), applying the chosen plan to the training arguments, and printing it as a table
// or as JSON.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "fitsum/data/dataset.h"
#include "fitsum/memory/cuda_allocator_model.h"
#include "fitsum/memory/planner.h"
#include "train_flags.h"

namespace fitsum::cli {

torch::Device resolve_device(const std::string& name);

// The longest source and target the data can produce after truncation (rounded up to pad_to_multiple_of), or the
// --max_source_length / --max_target_length when there are no examples.
memory::BatchShape worst_batch_shape(const std::vector<data::Example>& examples, const data::DataOptions& data);

// `command` tells which flags were given (CLI11 counts; a JSON args file expands to flags, so it counts too).
memory::PlanRequest make_plan_request(const CLI::App& command, const TrainCommandOptions& options,
                                      const memory::BatchShape& worst, std::uint64_t budget);

// Sets micro-batch, accumulation, checkpointing and optimizer of `args` to the candidate's.
void apply_plan(train::TrainingArguments& args, const memory::Candidate& candidate, std::int64_t layers);

// The flags that select `candidate`, e.g. "--per_device_train_batch_size 4 --gradient_accumulation_steps 2
// --gradient_checkpointing --optim adafactor".
std::string plan_flags(const memory::Candidate& candidate, std::int64_t layers);

std::string plan_table(const memory::Plan& plan, const memory::Calibration& calibration, std::uint64_t budget);
nlohmann::ordered_json candidate_json(const memory::Candidate& candidate);
nlohmann::ordered_json plan_json(const memory::Plan& plan, std::uint64_t budget);

// ---- CUDA: reserved memory (docs/memory.md, "On CUDA") ----

// What the CUDA memory model needs for `model` on `device` (the CPU stands for an H100 / H200).
struct CudaPlanning {
  memory::CudaModelTensors tensors;
  memory::CudaAllocConf conf;
  memory::CudaDeviceFacts device;
  memory::BatchShape worst;
  memory::CudaMemoryTerms terms(const memory::Candidate& candidate) const;
};
CudaPlanning cuda_planning(model::Seq2SeqLMImpl& model, const memory::CudaAllocConf& conf, const torch::Device& device,
                           const memory::BatchShape& worst);
// On CUDA the budget caps reserved bytes: makes the request count them instead of the predicted peak.
void budget_reserved_bytes(memory::PlanRequest& request, const CudaPlanning& cuda);
// Adds each candidate's CUDA terms under breakdown.cuda, and the allocator configuration, to plan_json's output.
void add_cuda_breakdown(nlohmann::ordered_json& json, const memory::Plan& plan, const CudaPlanning& cuda);
// One line for the table: the chosen candidate's allocated, reserved and device bytes and the terms between them.
std::string cuda_summary(const memory::Plan& plan, const CudaPlanning& cuda);

}  // namespace fitsum::cli
