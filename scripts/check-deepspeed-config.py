#!/usr/bin/env python3
"""DeepSpeed's own config validator on what `tessel export --to deepspeed` writes.

Every examples/*.json plan, and a 1D tensor-parallel plan DeepSpeed takes as AutoTP, is
exported and handed to deepspeed.runtime.config.DeepSpeedConfig (the class
deepspeed.initialize builds) with the data-parallel size the plan runs on, so its batch
rule, section schemas and ZeRO checks judge the file. Exit 77 (skipped) where deepspeed
does not import; TESSEL_VALIDATOR_PYTHON names an interpreter that has it.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile


def import_deepspeed_config():
    try:
        from deepspeed.runtime import config as ds_config  # noqa: PLC0415

        return ds_config
    except Exception as error:  # torch or deepspeed missing or broken: say which
        other = os.environ.get("TESSEL_VALIDATOR_PYTHON")
        if other and not os.environ.get("TESSEL_VALIDATOR_RAN"):
            os.environ["TESSEL_VALIDATOR_RAN"] = "1"
            os.execv(other, [other, *sys.argv])
        print(f"skipped: deepspeed does not import here ({type(error).__name__}: {error}); "
              "set TESSEL_VALIDATOR_PYTHON to a python with deepspeed")
        sys.exit(77)


class DataParallelGroup:
    """The one thing DeepSpeedConfig asks a model-parallel unit: the data-parallel size."""

    def __init__(self, size):
        self.size = size

    def get_data_parallel_world_size(self):
        return self.size


def plans(source_dir, scratch):
    yield from sorted((source_dir / "examples").glob("*.json"))
    autotp = scratch / "autotp-llama2-7b.json"
    autotp.write_text(json.dumps({
        "model": "llama2-7b", "cluster": "dgx-h100", "nodes": 1,
        "train": {"global_batch": 32, "precision": "bf16", "optimizer": "adamw"},
        "parallel": {"dp": 2, "tp": 4, "tp_mode": "1d", "zero": 2, "micro_batch": 4}}))
    yield autotp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessel", required=True)
    parser.add_argument("--source-dir", default=str(pathlib.Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    ds_config = import_deepspeed_config()
    ds_config.dist.get_rank = lambda: 0  # no process group: the size comes from the plan
    source_dir = pathlib.Path(args.source_dir)
    failures = 0
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = pathlib.Path(scratch_name)
        for plan_path in plans(source_dir, scratch):
            out = scratch / (plan_path.stem + ".ds_config.json")
            export = subprocess.run([args.tessel, "export", "--plan", str(plan_path), "--to", "deepspeed",
                                     "--allow-oom", "--out", str(out)], capture_output=True, text=True)
            if export.returncode == 2 and export.stderr.count("\n") == 1:  # a plan DeepSpeed cannot run at all
                print(f"{plan_path.name}: not written, tessel refuses it: {export.stderr.strip()}")
                continue
            if export.returncode != 0:
                print(f"{plan_path.name}: tessel export failed: {export.stderr.strip()}")
                failures += 1
                continue
            written = json.loads(out.read_text())
            parallel = json.loads(plan_path.read_text())["parallel"]
            world = parallel.get("dp", 1) * parallel.get("pp", 1) * parallel.get("tp", 1) * parallel.get("sp", 1)
            data_parallel = world // written.get("tensor_parallel", {}).get("autotp_size", 1)
            try:
                ds_config.DeepSpeedConfig(written, mpu=DataParallelGroup(data_parallel))
                print(f"{plan_path.name}: DeepSpeedConfig accepts it (data-parallel size {data_parallel})")
            except Exception as error:
                print(f"{plan_path.name}: DeepSpeedConfig refuses it: {type(error).__name__}: {error}")
                failures += 1
        # The validator has teeth: a key ZeRO's schema does not have is refused.
        try:
            ds_config.DeepSpeedConfig({"train_batch_size": 8, "zero_optimization": {"stage": 1, "stages": 2}},
                                      mpu=DataParallelGroup(8))
            print("control: DeepSpeedConfig accepted an unknown zero_optimization key")
            failures += 1
        except Exception as error:
            print(f"control: an unknown zero_optimization key is refused ({type(error).__name__})")
    print(f"{failures} refused")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
