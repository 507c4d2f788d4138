"""One Seq2SeqTrainer run for test_train_order.py, in this process or in each of several started with torchrun's
variables (RANK, WORLD_SIZE, MASTER_ADDR, ...: `python order_worker.py CONFIG.json`): trains the HF folder on
the records and writes, per process, every micro-batch's mean loss, label tokens, examples and the optimizer step it
belongs to, with the logged history, to CONFIG's `out` (`micro-<rank>.json`)."""
import json
import os
import sys

import torch
import transformers
from packaging.version import Version
from transformers import Seq2SeqTrainingArguments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from families import FAMILIES  # noqa: E402
from test_train import Records, RecordingTrainer, collate  # noqa: E402

# accelerate 1.2.1 places a CPU process of a multi-process run with torch.cpu.device_count() and set_device(), which
# torch 2.x added; on torch 1.13 there is one CPU device and nothing to set.
if not hasattr(torch.cpu, "device_count"):
    torch.cpu.device_count = lambda: 1
    torch.cpu.set_device = lambda device: None

# transformers 5 names the sampler with train_sampling_strategy; 4.x had the group_by_length switch.
HAS_SAMPLING_STRATEGY = Version(transformers.__version__) >= Version("5.0")


class OrderRecordingTrainer(RecordingTrainer):
    """Records (mean loss, label tokens, example indices, step) of each micro-batch: the model's own mean loss,
    whatever the Trainer then scales it by."""

    def __init__(self, *args, rows=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows = rows  # unpadded input_ids -> example index
        self.order = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        if self.loss_func is not None:
            loss = self.loss_func(outputs, inputs["labels"], num_items_in_batch)
        else:
            loss = outputs["loss"]
        examples = [self.rows[tuple(ids[m.bool()].tolist())] for ids, m in zip(inputs["input_ids"],
                                                                                 inputs["attention_mask"])]
        tokens = int(inputs["labels"].ne(-100).sum())
        self.order.append({"loss": float(outputs["loss"].detach()), "tokens": tokens, "examples": examples,
                           "step": self.state.global_step + 1})
        return (loss, outputs) if return_outputs else loss


def token_weighted(outputs, labels, num_items_in_batch):
    """transformers' loss for models with loss kwargs: the micro-batch's summed token loss over the step's label
    tokens, which is what fitsum computes."""
    logits = outputs["logits"]
    total = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100,
                                              reduction="sum")
    return total / num_items_in_batch


def run(config):
    family = FAMILIES[config["family"]]
    with open(config["records"]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    rows = {tuple(r["input_ids"]): i for i, r in enumerate(records)}
    assert len(rows) == len(records), "the records' sources must tell them apart"
    k = dict(config["args"])
    if k.pop("group_by_length", False):
        if HAS_SAMPLING_STRATEGY:
            k["train_sampling_strategy"] = "group_by_length"
        else:
            k["group_by_length"] = True
    args = Seq2SeqTrainingArguments(output_dir=config["hf_out"], report_to=[], use_cpu=True, disable_tqdm=True,
                                    logging_steps=1, **k)
    model = family.model_class.from_pretrained(config["model"])
    trainer = OrderRecordingTrainer(model=model, args=args, train_dataset=Records(records),
                                    data_collator=lambda features: collate(features, family.pad()),
                                    loss_func=token_weighted if config.get("token_weighted") else None, rows=rows)
    trainer.train(resume_from_checkpoint=config.get("resume"))
    rank = int(os.environ.get("RANK", "0"))
    result = {"micro": trainer.order, "log_history": trainer.state.log_history}
    with open(os.path.join(config["out"], f"micro-{rank}.json"), "w") as f:
        json.dump(result, f)
    return trainer, result


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run(json.load(f))
