"""report_to tensorboard: the event file `fitsum train` writes under logging_dir is read back by TensorBoard's own
reader (EventAccumulator), with the tags HF's TensorBoardCallback gives the same log entries (transformers'
rewrite_logs) and the logged values at their global steps. report_to none writes no event file."""
import glob
import os

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers.integrations.integration_utils import rewrite_logs

from harness import assert_close, fitsum, read_json, shared_path, write_jsonl


def copy_records():
    """Eight pre-tokenized copy-task records within the tiny fixture's vocabulary (eos last)."""
    records = []
    for i in range(8):
        ids = [103 + (i * 13 + j * 7) % 64 for j in range(3 + (i * 5) % 9)] + [1]
        labels = [103 + (i * 11 + j * 5) % 64 for j in range(2 + (i * 3) % 6)] + [1]
        records.append({"input_ids": ids, "labels": labels})
    return records


def train(tmp_path, *extra):
    data = write_jsonl(tmp_path / "records.jsonl", copy_records())
    out = tmp_path / "out"
    fitsum("train", "--model_name_or_path", shared_path("fixtures", "tiny-pegasus"), "--train_file", data,
           "--validation_file", data, "--output_dir", out, "--optim", "adafactor", "--learning_rate", "1e-3",
           "--per_device_train_batch_size", "4", "--max_steps", "3", "--logging_steps", "1", "--eval_strategy",
           "steps", "--eval_steps", "2", "--save_strategy", "no", "--disable_tqdm", *extra)
    return out


def test_event_file_reads_back_with_hf_tags_and_values(tmp_path):
    out = train(tmp_path, "--report_to", "tensorboard")
    files = glob.glob(str(out / "runs" / "*" / "events.out.tfevents.*"))
    assert len(files) == 1, files
    accumulator = EventAccumulator(os.path.dirname(files[0]))
    accumulator.Reload()
    scalars = set(accumulator.Tags()["scalars"])

    expected = {}  # tag -> [(step, value)], as HF's TensorBoardCallback.on_log would write the same entries
    for entry in read_json(out / "trainer_state.json")["log_history"]:
        step = entry["step"]
        logs = {k: v for k, v in entry.items() if k != "step" and isinstance(v, (int, float))}
        for tag, value in rewrite_logs(logs).items():
            expected.setdefault(tag, []).append((step, value))
    for tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/epoch", "eval/loss",
                "train/train_loss", "train/train_runtime"):
        assert tag in expected, tag
    assert scalars == set(expected), (sorted(scalars), sorted(expected))
    for tag, points in expected.items():
        events = accumulator.Scalars(tag)
        assert [e.step for e in events] == [s for s, _ in points], tag
        for event, (step, value) in zip(events, points):
            assert_close(event.value, value, 1e-6, f"{tag} at step {step}")  # simple_value is a float32
    print("read back:", {tag: [(e.step, round(e.value, 6)) for e in accumulator.Scalars(tag)]
                         for tag in ("train/loss", "eval/loss", "train/learning_rate")})


def test_logging_dir_is_honoured_and_report_to_none_writes_nothing(tmp_path):
    logs = tmp_path / "tb"
    out = train(tmp_path, "--report_to", "all", "--logging_dir", logs)
    assert len(glob.glob(str(logs / "events.out.tfevents.*"))) == 1
    assert not (out / "runs").exists()
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    out = train(quiet, "--report_to", "none")
    assert not (out / "runs").exists()
    assert glob.glob(str(quiet / "**" / "events.out.tfevents.*"), recursive=True) == []
