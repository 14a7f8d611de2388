"""Training datasets: one record per build job and the artifact it leaves.

A :class:`Dataset` is both the job (queued → running → succeeded | failed | cancelled, with progress and a
cancel flag the worker reads) and, once it succeeded, the artifact the training jobs pick by id: a folder under
``HAT_DATA_DIR/datasets/<id>/`` written by :func:`training_jobs.hsa.dataset.write_dataset` (``dataset/`` in
Hugging Face ``datasets`` format, ``recipe.json``, ``stats.json``, ``harnesses.jsonl``) plus the canonical samples
before augmentation (``samples.jsonl``, ``base_harnesses.jsonl``) for the sample browser. The folder appears
under its final name only when everything in it is written.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.db import models

from console.jobs import Job


class Dataset(Job):
    """A dataset build (the job: console.jobs) and, once it succeeded, its artifact."""

    class Kind(models.TextChoices):
        HSA = "hsa", "HSA (augmented)"
        FIXED_HARNESS = "fixed_harness", "Fixed harness (baseline)"

    job_kind = "dataset"
    job_noun = "build"
    job_task = "training_jobs.tasks.dataset_build"
    job_queue = "gpu"  # batch work (CPU-bound for hours): beside training and evaluations, never before turns

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HSA, db_index=True)
    recipe = models.JSONField(default=dict, blank=True,
                              help_text="training_jobs.hsa.dataset.Recipe as JSON (the augmentation; unused by a "
                                        "fixed-harness build except for its name)")
    sources = models.JSONField(default=dict, blank=True, help_text="training_jobs.schemas.Sources as JSON")
    baseline_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="baselines",
                                    help_text="the HSA dataset this fixed-harness baseline shares its samples with")
    split = models.CharField(max_length=16, default="train",
                             help_text="'train' (training names) or 'heldout' (Harness-Variant evaluation)")

    stats = models.JSONField(default=dict, blank=True,
                             help_text="BuildStats: rows, dropped, per operator applied / dropped / mean prompt "
                                       "tokens")
    sample_count = models.PositiveIntegerField(default=0, help_text="canonical samples the build started from")
    row_counts = models.JSONField(default=dict, blank=True, help_text="rows per split, e.g. {'train': 480}")
    artifact_path = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="dataset_status_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display().lower()}, {self.status})"

    # --- the job lifecycle (console.jobs) -----------------------------------------------------------------

    def finish_audit_data(self, status: str) -> dict:
        return {"rows": self.row_counts} if status == self.Status.SUCCEEDED else {}

    def on_stalled(self) -> None:
        """The half-written folder of a build whose worker died."""
        for tmp in (Path(settings.ENV.data_dir) / "datasets").glob(f".tmp-{self.pk}-*"):
            shutil.rmtree(tmp, ignore_errors=True)

    def stalled_message(self, last, now) -> str:
        return super().stalled_message(last, now) + " Nothing was kept; start the build again."

    @property
    def is_ready(self) -> bool:
        """Succeeded, with its artifact on disk: what a training job may use."""
        return self.status == self.Status.SUCCEEDED and bool(self.artifact_path) and self.artifact_dir.is_dir()

    @property
    def artifact_dir(self) -> Path:
        return Path(self.artifact_path)

    @property
    def rows(self) -> int:
        return sum(int(n) for n in (self.row_counts or {}).values())


class TrainedModel(models.Model):
    """A model directory the console knows, with its lineage: a base model (the project's tiny demo model, a
    local base model on a GPU host) or the output of a training stage (parent → stage → stage). The directory is
    what a server loads as it is (weights, tokenizer, chat template)."""

    class Kind(models.TextChoices):
        BASE = "base", "Base model"
        SFT = "sft", "HSA-SFT"
        BASELINE_SFT = "baseline_sft", "Fixed-harness SFT (baseline)"
        DISTILL = "distill", "On-policy distillation"
        RL = "rl", "Agentic RL"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    path = models.CharField(max_length=500, help_text="the model directory (absolute)")
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children",
                               help_text="the model this one was trained from")
    is_adapter = models.BooleanField(default=False, help_text="a LoRA adapter of its parent (adapter_config.json + "
                                                              "adapter_model.safetensors), not a full model: loaded "
                                                              "into a vLLM server that serves the parent")
    job = models.ForeignKey("TrainingJob", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    recipe = models.JSONField(default=dict, blank=True, help_text="the dataset's recipe (snapshot)")
    config = models.JSONField(default=dict, blank=True, help_text="the stage config (snapshot)")
    metrics = models.JSONField(default=dict, blank=True, help_text="final metrics of the stage")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # attached to a local OpenAI-compatible server on a worker host: its endpoint is pickable in the preview room
    endpoint = models.ForeignKey("streams.ModelEndpoint", on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="+")
    serve_pid = models.IntegerField(null=True, blank=True, help_text="the server process on serve_host")
    serve_host = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    def vllm_command(self) -> str:
        """How to serve this model with vLLM on a GPU host (the serve profile's command line); an adapter: its base
        with the adapter loaded at start (or at run time: the server pages). On loopback, as a serve profile is unless
        an administrator allows more (HAT_SERVE_LISTEN_HOSTS): vLLM's API, adapter loading included, has no
        authentication."""
        from streams.serve_profiles import LoraAdapter, ServeProfile

        if self.is_adapter and self.parent is not None:
            return ServeProfile(name=self.name, kind="vllm", model=self.parent.path,
                                served_model_name=f"hat-{self.parent.pk}", host="127.0.0.1", enable_lora=True,
                                max_lora_rank=max(16, self.lora_rank or 0), runtime_lora_updating=True,
                                lora_adapters=[LoraAdapter(name=f"hat-{self.pk}", path=self.path)]).command_line()
        return ServeProfile(name=self.name, kind="vllm", model=self.path, served_model_name=f"hat-{self.pk}",
                            host="127.0.0.1").command_line()

    @property
    def lora_rank(self) -> int | None:
        """An adapter's rank r (from its stage config snapshot): a server loads it only up to its --max-lora-rank."""
        lora = (self.config or {}).get("lora") if self.is_adapter else None
        return int(lora["r"]) if isinstance(lora, dict) and isinstance(lora.get("r"), int) else None

    @property
    def directory(self) -> Path:
        return Path(self.path)

    def lineage(self) -> list[TrainedModel]:
        """This model and its ancestors, base first."""
        chain, seen, node = [], set(), self
        while node is not None and node.pk not in seen:
            chain.append(node)
            seen.add(node.pk)
            node = node.parent
        return list(reversed(chain))


class TrainingJob(Job):
    """One HAT training job: a stage (or the pipeline of stages) run by a worker on the ``gpu`` queue, with its
    config snapshot, the dataset and model it starts from, live progress, a log tail, and the models it
    registers. ``output_dir`` keeps its checkpoints: a cancelled or failed job resumes from the latest one."""

    class Kind(models.TextChoices):
        SFT = "sft", "HSA-SFT"
        BASELINE_SFT = "baseline_sft", "Fixed-harness SFT (baseline)"
        DISTILL = "distill", "On-policy distillation"
        RL = "rl", "Agentic RL"
        PIPELINE = "pipeline", "Pipeline: HSA-SFT → distillation → RL"

    job_kind = "training"
    job_task = "training_jobs.tasks.training_job"
    job_queue = "gpu"
    job_resumable = True  # from the latest checkpoint in output_dir
    job_progress_every_s = 2.0  # the pages refresh as often
    job_cancel_check_every_s = 2.0

    # The datasets each kind trains on (None: it needs none); RL rolls out over the canonical samples of its
    # dataset. The service enforces it; the launch form offers only these.
    DATASET_KINDS: dict[str, tuple[str, ...] | None] = {
        Kind.SFT: (Dataset.Kind.HSA,), Kind.BASELINE_SFT: (Dataset.Kind.FIXED_HARNESS,), Kind.DISTILL: None,
        Kind.RL: (Dataset.Kind.HSA, Dataset.Kind.FIXED_HARNESS), Kind.PIPELINE: (Dataset.Kind.HSA,)}

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    config = models.JSONField(default=dict, help_text="the stage config as validated (training_jobs.hat.config)")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    base_model = models.ForeignKey(TrainedModel, on_delete=models.PROTECT, related_name="+",
                                   help_text="the model the job starts from (its parent checkpoint)")
    metrics = models.JSONField(default=list, blank=True, help_text="progress points: step, loss, learning rate, "
                                                                   "tokens/s, reward components, ETA")
    log_tail = models.TextField(blank=True, help_text="the last lines of the job's log")
    output_dir = models.CharField(max_length=500, blank=True)
    result = models.JSONField(default=dict, blank=True, help_text="the stage result: steps, metrics, directories")
    evaluate = models.JSONField(default=list, blank=True,
                                help_text="evaluations of the last model when the job succeeds: [{eval_set, harness, "
                                          "max_cases, k}] (training_jobs.eval_run_services.validate_auto_evaluations)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="trainingjob_status_recent")]
        permissions = [("run_trainingjob", "Can launch, cancel and resume training jobs"),
                       ("manage_any_trainingjob", "Can cancel and resume other people's training jobs and "
                                                  "dataset builds (ML lead)")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()}, {self.status})"

    # --- the job lifecycle (console.jobs) -----------------------------------------------------------------

    def on_revoked(self, waited_s: int) -> None:
        from training_jobs.services.training import job_log_append

        job_log_append(self.pk, f"did not stop within {waited_s} s of the cancel: its task {self.task_id} was "
                                "revoked (terminated); it resumes from its latest checkpoint")

    def stalled_message(self, last, now) -> str:
        return super().stalled_message(last, now) + " Resume it to continue from its latest checkpoint."

    @property
    def latest(self) -> dict:
        return self.metrics[-1] if self.metrics else {}


from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion  # noqa: E402,F401  (eval sets: their own module)
from training_jobs.eval_run_models import EvalResult, EvalRun  # noqa: E402,F401  (evaluation runs: their own module)
from training_jobs.gate_models import GatePolicy, GateRequirement  # noqa: E402,F401  (approval gate policy: its own module)
from training_jobs.latency_models import LatencyReplay  # noqa: E402,F401  (latency replays: their own module)
from training_jobs.label_models import HumanLabel  # noqa: E402,F401  (human labels of eval results: their own module)
from training_jobs.reproduce_models import ReproductionRun  # noqa: E402,F401  (reproduction runs: their own module)
from training_jobs.tag_models import ObjectNote, ObjectTag  # noqa: E402,F401  (tags and notes: their own module)
