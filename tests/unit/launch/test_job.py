"""The job launch starts, read once into one record (zerokit.launch.job): its kind, what each kind's flags say, and
the command a restart writes from it. Pure functions, tables of cases."""

from __future__ import annotations

import pytest

from zerokit.launch.job import Job, has_final_model, outputs_state, read_job, restarted, resumes_from

PY = "/venv/bin/python"
TRAIN = (PY, "-m", "zerokit", "train")
SCRIPT = (PY, "-m", "zerokit.launch.rank.user_script", "fit.py")


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (TRAIN, "train"),
        ((PY, "-m", "zerokit", "generate", "--model", "m"), "generate"),
        ((PY, "-m", "zerokit", "bench"), "zerokit"),
        (SCRIPT, "script"),
        (("/opt/bin/deepspeed", "fit.py"), "launcher"),
        (("accelerate", "launch", "fit.py"), "launcher"),
        (("sh", "-c", "x"), "command"),
        ((), "command"),  # --check-only runs none
    ],
)
def test_the_kind_of_program(argv, kind):
    assert read_job(argv, {}).kind == kind


def test_train_is_read_with_trains_spellings():
    job = read_job((*TRAIN, "--output-dir", "runs/x", "--resume=auto", "--gradient-accumulation-steps", "4"), {})
    assert (job.output_dir, job.resume, job.accumulation, job.ds_configs) == ("runs/x", "auto", "4", ("zero2",))
    assert read_job(TRAIN, {"ZEROKIT_CONFIG": "zero3"}).ds_configs == ("zero3",)
    assert read_job((*TRAIN, "--config", "none"), {"ZEROKIT_CONFIG": "zero3"}).ds_configs == ("none",)
    assert read_job((*TRAIN, "--deepspeed", "ds.json"), {}).ds_configs == ("zero2",)  # --deepspeed is not train's


def test_a_script_is_read_with_hfs_and_deepspeeds_spellings():
    job = read_job((*SCRIPT, "--deepspeed", "ds.json", "--per_device_train_batch_size", "4", "--output_dir", "o"), {})
    assert (job.hf_deepspeed, job.micro_batch, job.accumulation, job.output_dir) == ("ds.json", "4", None, "o")
    native = read_job(("deepspeed", "fit.py", "--deepspeed", "--deepspeed_config", "ds.json"), {})
    assert (native.ds_configs, native.hf_deepspeed) == (("ds.json",), None)  # DeepSpeed's --deepspeed: a switch


def test_a_restart_resumes_train_and_keeps_its_global_batch_on_fewer_nodes():
    job = read_job((*TRAIN, "--gradient_accumulation_steps", "2"), {})
    again = restarted(job, 2, 3)
    assert again.argv == (*TRAIN, "--gradient_accumulation_steps", "3", "--resume", "auto")
    assert (again.resume, again.accumulation) == ("auto", "3")
    assert restarted(job, 3, 3).argv == (*TRAIN, "--gradient_accumulation_steps", "2", "--resume", "auto")
    assert restarted(again, 2, 2) == again  # written once: a second restart on as many nodes changes nothing
    script = read_job((*SCRIPT, "--gradient_accumulation_steps", "2"), {})
    assert restarted(script, 2, 3) is script  # any other program runs again as given


def test_what_a_job_resumes_from_and_whether_its_outputs_are_complete(tmp_path):
    out = tmp_path / "out"
    job = Job("train", TRAIN, output_dir=str(out), resume="auto")
    assert resumes_from(job) is None  # no checkpoint yet: from step 0
    assert resumes_from(Job("command", ("x",), resume="ckpt")) == "ckpt"
    assert not has_final_model(job)
    assert outputs_state(job) == f"no final model in {out}: the run's outputs are incomplete"
    out.mkdir()
    (out / "model.safetensors").touch()
    assert outputs_state(job) == f"the final model is in {out}: the run's outputs are complete"
    assert outputs_state(Job("command", ("x",))) == "no --output_dir on its command line to check its outputs"
