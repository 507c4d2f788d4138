#!/usr/bin/env python3
"""The Hugging Face baseline: the config.json's model class (AutoModelForSeq2SeqLM: PegasusForConditionalGeneration,
PegasusXForConditionalGeneration, LongT5ForConditionalGeneration, ...; random init) trained by
transformers' Seq2SeqTrainer on random tokens, timed per optimizer step; on CUDA under a cap on memory (bench/gpu.sh),
on the CPU side by side with `fitsum train` (bench/run_side_by_side.py --hf).

    python3 bench/hf_trainer_bench.py --config data/pegasus/config.json --batch 1 --accumulation 64 \\
        --gradient_checkpointing --optim adafactor --max_memory_gib 16 [--bf16]
    build/hf-venv/bin/python bench/hf_trainer_bench.py --device cpu --config configs/pegasus-small/config.json \\
        --batch 2 --accumulation 1 --src_len 256 --tgt_len 64 --steps 3
    build/hf-venv-pip/bin/python bench/hf_trainer_bench.py --device cpu --config configs/pegasus-base/config.json \\
        --batch 2 --accumulation 1 --lora_r 16 --lora_target_modules q_proj,v_proj   # PEFT's LoRA on a frozen base

Prints one JSON line with the fields of `fitsum bench train`: impl, step_s_median, samples_per_s, tokens_per_s,
loss_last, and on CUDA peak_allocated_mib / peak_reserved_mib (torch.cuda.max_memory_allocated / _reserved), on the
CPU peak_rss_mib (the process's VmHWM) and first_step_s (process start to the end of the first optimizer step); or,
when the CUDA cap is too small, {"impl": "hf-trainer", "error": "out of memory", ...}.
"""
import argparse
import inspect
import json
import os
import statistics
import tempfile
import time

import torch


def seconds_since_process_start():
    """What a user waits for the first step: from the kernel's start time of this process (as fitsum bench)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        now = float(f.read().split()[0])
    return now - start_ticks / os.sysconf("SC_CLK_TCK")


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class RandomTokens(torch.utils.data.Dataset):
    """Random ids above the special tokens, every position real (as fitsum bench train draws them)."""

    def __init__(self, n, src_len, tgt_len, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.src = torch.randint(103, vocab, (n, src_len), generator=g)
        self.tgt = torch.randint(103, vocab, (n, tgt_len), generator=g)

    def __len__(self):
        return self.src.shape[0]

    def __getitem__(self, i):
        return {"input_ids": self.src[i], "attention_mask": torch.ones_like(self.src[i]), "labels": self.tgt[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--accumulation", type=int, default=64)
    ap.add_argument("--src_len", type=int, default=512)
    ap.add_argument("--tgt_len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--optim", default="adafactor")
    ap.add_argument("--gradient_checkpointing", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--max_memory_gib", type=float, default=16.0)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--config_overrides", default="",
                    help="k=v,k=v over the config.json's values (as fitsum's --config_overrides), e.g. "
                         "encoder_layers=2,decoder_layers=2")
    ap.add_argument("--lora_r", type=int, default=0, help="> 0: PEFT LoRA adapters of this rank, the base frozen")
    ap.add_argument("--lora_alpha", type=float, default=8.0, help="LoraConfig.lora_alpha (PEFT's default 8)")
    ap.add_argument("--lora_target_modules", default="q_proj,v_proj",
                    help="LoraConfig.target_modules: comma-separated names, or all-linear")
    a = ap.parse_args()

    from transformers import (AutoConfig, AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                              TrainerCallback, default_data_collator)

    cuda = a.device == "cuda"
    device = torch.device(a.device)
    if cuda:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.max_memory_gib * 2**30 / total), 0)
    torch.manual_seed(0)
    with open(a.config) as f:
        config = AutoConfig.for_model(**json.load(f))
    # Set on the config object, after its aliases were read: config.json's num_hidden_layers (PegasusXConfig's alias of
    # encoder_layers in transformers 5) must not undo an encoder_layers override.
    for item in filter(None, a.config_overrides.split(",")):
        key, _, value = item.partition("=")
        try:
            setattr(config, key.strip(), json.loads(value))
        except json.JSONDecodeError:
            setattr(config, key.strip(), value)  # a bare string: relu
    model = AutoModelForSeq2SeqLM.from_config(config).to(device)
    if a.lora_r > 0:
        from peft import LoraConfig, get_peft_model
        targets = a.lora_target_modules if a.lora_target_modules == "all-linear" else a.lora_target_modules.split(",")
        model = get_peft_model(model, LoraConfig(r=a.lora_r, lora_alpha=a.lora_alpha, target_modules=targets,
                                                 task_type="SEQ_2_SEQ_LM"))
        if a.gradient_checkpointing:
            # Reentrant checkpointing of a frozen base passes no gradient to the adapters inside unless the embeddings'
            # output requires one (peft's prepare_model_for_kbit_training does the same).
            model.enable_input_require_grads()

    steps = a.warmup + a.steps
    dataset = RandomTokens(steps * a.accumulation * a.batch, a.src_len, a.tgt_len, config.vocab_size, seed=0)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.start)
            if len(self.times) == 1:
                self.first_step_s = seconds_since_process_start()

    wanted = dict(output_dir=tempfile.mkdtemp(prefix="hf-bench-"), per_device_train_batch_size=a.batch,
                  gradient_accumulation_steps=a.accumulation, max_steps=steps, learning_rate=1e-3,
                  weight_decay=0.01, optim=a.optim, gradient_checkpointing=a.gradient_checkpointing, bf16=a.bf16,
                  logging_steps=1, save_strategy="no", report_to="none", dataloader_num_workers=0,
                  disable_tqdm=True, seed=0, remove_unused_columns=False, use_cpu=not cuda)
    accepted = inspect.signature(Seq2SeqTrainingArguments.__init__).parameters
    args = Seq2SeqTrainingArguments(**{k: v for k, v in wanted.items() if k in accepted})
    timer = StepTimer()
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=dataset, data_collator=default_data_collator,
                             callbacks=[timer])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = {"impl": "hf-trainer", "model": type(model).__name__, "encoder_layers": getattr(config, "encoder_layers", None),
           "decoder_layers": getattr(config, "decoder_layers", None), "batch": a.batch, "gradient_accumulation_steps": a.accumulation,
           "src_len": a.src_len, "tgt_len": a.tgt_len, "optim": a.optim,
           "gradient_checkpointing": a.gradient_checkpointing, "bf16": a.bf16, "max_memory_gib": a.max_memory_gib,
           "lora_r": a.lora_r, "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    if a.lora_r > 0:
        import peft
        out.update(lora_alpha=a.lora_alpha, lora_target_modules=a.lora_target_modules, peft=peft.__version__)
    try:
        result = trainer.train()
    except torch.cuda.OutOfMemoryError as e:
        out.update(error="out of memory", detail=str(e)[:300],
                   peak_allocated_mib=torch.cuda.max_memory_allocated() / 2**20,
                   peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
        print(json.dumps(out))
        return
    timed = timer.times[a.warmup:] or timer.times
    step = statistics.median(timed)
    samples = a.batch * a.accumulation
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    out.update(step_s_median=step, step_s_all=timer.times, samples_per_s=samples / step,
               tokens_per_s=samples * (a.src_len + a.tgt_len) / step,
               loss_last=losses[-1] if losses else result.training_loss)
    if cuda:
        out.update(peak_allocated_mib=torch.cuda.max_memory_allocated() / 2**20,
                   peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
    else:
        import transformers
        out.update(peak_rss_mib=peak_rss_mib(), first_step_s=timer.first_step_s, torch=torch.__version__,
                   transformers=transformers.__version__, intra_op_threads=torch.get_num_threads())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
