"""Create the demo users (one per role), the demo harness with a short history, the tiny-room harness, the
order-desk harness (a customer-service agent from outside the live room, fixture-bound tools) with its scenario,
register the committed demo model as a base model for training jobs (and the SmolLM2-135M base built by make
install, with its serve profile vllm-cpu-smollm2, and the committed glow-gadget adapter of it behind the endpoint
flagship, make run's second vLLM server, with a preview room of glow-gadget@production on it for alice), import the
eval sets the project ships (T1–T3 from data/evals, T4 from data/ifeval) as their first versions, register make
run's vLLM-CPU server (profile vllm-cpu, endpoint local) and the live deployment tiny-room-live
(tiny-room@production, the demo model; proposed by ivan, approved by carol), and set the approval gate of the demo
harness (a finished T1 run on the local model, compared with production:
training_jobs.gate_services.gate_policy_seed_demo).

Idempotent: users are created or have their password reset to the demo one; the harness is created only
when missing. Everything goes through the real services, so the audit timeline shows the history too.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from console import roles
from harness_editor import services
from harness_editor.models import Harness
from harness_editor.schemas import manifest_from_yaml
from streams import services as stream_services
from training_jobs import eval_services, gate_services
from training_jobs import services as training_services

DEMO_DIR = Path(__file__).resolve().parents[3] / "harness_editor" / "demo"
DEMO_USERS = [
    ("alice", roles.CAMPAIGN_MANAGER, "Alice (campaign manager)"),
    ("bob", roles.CAMPAIGN_MANAGER, "Bob (campaign manager)"),
    ("carol", roles.COMPLIANCE_REVIEWER, "Carol (compliance reviewer)"),
    ("dave", roles.COMPLIANCE_REVIEWER, "Dave (compliance reviewer)"),
    ("erin", roles.ML_STAFF, "Erin (ML staff)"),
    ("ivan", roles.ML_LEAD, "Ivan (ML lead)"),
    ("frank", roles.OPERATOR, "Frank (operator)"),
    ("grace", roles.COMPLIANCE_LEAD, "Grace (compliance lead)"),
]
DEMO_SLUG = "glow-gadget"
# The lean harness the committed demo model (models/demo-tiny) was trained on: pick it in the preview room
# to see the local CPU model reply in distribution (the glow-gadget harness is far longer than it ever saw).
TINY_SLUG = "tiny-room"
# make run's vLLM-CPU server as a serve profile (LoRA adapters loadable at run time) and the live deployment on it
DEMO_PROFILE = "vllm-cpu"
DEMO_PROFILE_SPEC = {"kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True}
DEMO_DEPLOYMENT = "tiny-room-live"
# make run's second server: SmolLM2-135M with the glow-gadget adapter merged in, under the adapter's name
FLAGSHIP_PROFILE = "vllm-cpu-flagship"
# A harness from outside the live room (issue 13): a customer-service agent whose 16 tools answer from fixtures, so
# it previews and plays its support-shift scenario without the shop's backend.
ORDER_DESK_SLUG = "order-desk"
ORDER_DESK_SCENARIO = Path(__file__).resolve().parents[3] / "data" / "harnesses" / "order_desk_scenarios" / \
    "order-desk-day.yaml"


def _demo(name: str):
    return manifest_from_yaml((DEMO_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


class Command(BaseCommand):
    help = ("Create demo users for every role, the demo harness (v1 production, v2 staging, v3 in review), "
            "the tiny-room and order-desk harnesses, the demo live-room catalog, the demo scenarios, the demo base "
            "model, the SmolLM2-135M base and the glow-gadget adapter behind the endpoint flagship (when built), "
            "the shipped eval sets and the demo harness's approval gate.")

    def add_arguments(self, parser):
        parser.add_argument("--password", default=os.environ.get("HAT_DEMO_PASSWORD", "demo-pass-2026"),
                            help="password for every demo user (default: $HAT_DEMO_PASSWORD or demo-pass-2026)")

    def handle(self, *args, password: str, **options):
        User = get_user_model()
        users = {}
        with transaction.atomic():
            for username, role, first_name in DEMO_USERS:
                user, _ = User.objects.get_or_create(username=username, defaults={"first_name": first_name})
                user.set_password(password)
                user.save()
                user.groups.set([Group.objects.get(name=role)])
                users[username] = user
            admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True,
                                                                               "is_superuser": True})
            admin.is_staff = admin.is_superuser = True
            admin.set_password(password)
            admin.save()
        if not Harness.objects.filter(slug=DEMO_SLUG).exists():
            self._seed_harness(users)
        if not Harness.objects.filter(slug=TINY_SLUG).exists():
            self._seed_tiny_harness(users)
        if not Harness.objects.filter(slug=ORDER_DESK_SLUG).exists():
            self._seed_order_desk(users)
        stream_services.catalog_seed_demo()
        stream_services.scenarios_seed_demo()
        # the order desk's own scenario (kept out of streams/scenarios: those are the live room's demo scenarios,
        # which HSA answers with the live-commerce reference policy); unchanged text is not rewritten
        stream_services.scenario_import(yaml_text=ORDER_DESK_SCENARIO.read_text(encoding="utf-8"),
                                        user=users["alice"])
        stream_services.model_endpoint_ensure_default()
        # the real pretrained base built at install, registered before demo-tiny so that the tiny model stays the
        # newest base (the training form's default: the fast base for the CPU demo)
        smol = self._seed_smollm2(users)
        base = training_services.demo_base_model()  # idempotent: one registry row per model directory
        self.stdout.write(self.style.SUCCESS(f"Base model for training jobs: {base.name}"))
        for version in eval_services.eval_sets_seed_demo():  # idempotent: a changed file adds a version
            self.stdout.write(self.style.SUCCESS(f"Eval set {version.eval_set.name} v{version.number}: "
                                                 f"{version.case_count} cases"))
        self._seed_serving_and_deployment(users, base)
        if smol is not None:
            self._seed_flagship_model(users, smol)
        if gate_services.gate_policy_seed_demo(harness_slug=DEMO_SLUG):  # idempotent: only when it has none
            self.stdout.write(self.style.SUCCESS(f"Approval gate for '{DEMO_SLUG}': a finished "
                                                 f"{gate_services.DEMO_GATE_SET} run on the local model, compared "
                                                 "with production"))
        self.stdout.write(self.style.SUCCESS("Demo users (password: %s):" % password))
        for username, role, _ in DEMO_USERS:
            self.stdout.write(f"  {username:<8} {role}")
        self.stdout.write("  admin    superuser (Django admin at /admin/)")

    def _seed_smollm2(self, users):
        """SmolLM2-135M (models/smollm2-135m, built by make install) as a base model, and its vLLM-CPU serve
        profile. A machine without the build still seeds everything else, and says how to build it."""
        from training_jobs.base_models.smollm2 import SERVE_PROFILE_NAME, BaseModelError
        from training_jobs.services import base_models

        base_models.smollm2_serve_profile(user=users["ivan"])
        try:
            smol = base_models.smollm2_base_model()
        except BaseModelError as exc:
            self.stdout.write(self.style.WARNING(f"SmolLM2-135M base not registered: {exc}"))
            return None
        self.stdout.write(self.style.SUCCESS(f"Base model: {smol.name} (serve profile {SERVE_PROFILE_NAME})"))
        return smol

    def _seed_flagship_model(self, users, smol) -> None:
        """The model that answers on glow-gadget: the committed adapter of SmolLM2 (models/glow-gadget-smollm2),
        registered with what it was trained on, behind the endpoint ``flagship`` (make run's second vLLM-CPU server,
        which serves it merged into the base under the adapter's name), and one preview room of
        glow-gadget@production on it for alice."""
        from streams.models import PreviewRoom, ServeProfile
        from streams.serve_profiles import ServeSpec
        from streams.services.serving import server_register
        from training_jobs.base_models import glow_adapter
        from training_jobs.model_artefacts import PROVIDER
        from training_jobs.services import base_models

        try:
            adapter = base_models.glow_adapter_model(base=smol, user=users["ivan"])
        except ValueError as exc:
            self.stdout.write(self.style.WARNING(f"glow-gadget demo adapter not registered: {exc}"))
            return
        endpoint = stream_services.model_endpoint_ensure_flagship()
        spec = ServeSpec(kind="vllm", served_model_name=glow_adapter.ADAPTER_NAME,
                         max_model_len=glow_adapter.MAX_MODEL_LEN)  # validated like any stored profile
        profile, _ = ServeProfile.objects.get_or_create(name=FLAGSHIP_PROFILE, defaults={
            "spec": spec.model_dump(exclude_defaults=True), "created_by": users["ivan"]})
        server = server_register(profile=profile, endpoint=endpoint, model=adapter, managed=False)
        PROVIDER.served(adapter.pk, endpoint_id=endpoint.pk, pid=None, host=server.host)
        production = Harness.objects.get(slug=DEMO_SLUG).labels.filter(name="production").first()
        if production is not None and not PreviewRoom.objects.filter(
                endpoint=endpoint, harness_version__harness__slug=DEMO_SLUG).exists():
            stream_services.preview_open(user=users["alice"], version=production.version, endpoint=endpoint)
        self.stdout.write(self.style.SUCCESS(
            f"Model for '{DEMO_SLUG}': {adapter.name}, endpoint {endpoint.name} ({endpoint.base_url}, model "
            f"{endpoint.model}); alice has a preview room of {DEMO_SLUG}@production on it"))

    def _seed_serving_and_deployment(self, users, base) -> None:
        """The vLLM-CPU serve profile, make run's server registered behind the ``local`` endpoint (started outside
        the console: never stopped by it), and tiny-room's live deployment: proposed by ivan, approved by carol."""
        from streams.models import Deployment, ModelEndpoint, ServeProfile, ServerInstance
        from streams.services import deployments

        profile, _ = ServeProfile.objects.get_or_create(name=DEMO_PROFILE, defaults={
            "spec": dict(DEMO_PROFILE_SPEC), "created_by": users["ivan"]})
        endpoint = ModelEndpoint.objects.get(name=stream_services.DEFAULT_ENDPOINT_NAME)
        try:  # helper "serve": streams.services.serving.server_register refreshes the one live record
            from streams.services.serving import server_register
        except ImportError:
            server_register = None
        if server_register is not None:
            server_register(profile=profile, endpoint=endpoint, model=base, managed=False)
        elif not ServerInstance.objects.filter(profile=profile, endpoint=endpoint, managed=False,
                                               status__in=ServerInstance.LIVE).exists():
            ServerInstance.objects.create(profile=profile, endpoint=endpoint, managed=False, model=base,
                                          model_path=base.path, status=ServerInstance.Status.READY,
                                          host="127.0.0.1", port=urlsplit(endpoint.base_url).port)
        if Deployment.objects.filter(name=DEMO_DEPLOYMENT).exists():
            return
        with transaction.atomic():
            deployment = deployments.deployment_create(
                user=users["ivan"], name=DEMO_DEPLOYMENT, title="Tiny room on air", harness=TINY_SLUG,
                label="production", serve_profile=profile, endpoints=[endpoint], model=base,
                note="the demo model on make run's vLLM-CPU server")
            deployments.deployment_approve(user=users["carol"], revision=deployment.revisions.get(number=1),
                                           comment="production harness, the demo model, the local endpoint")
        self.stdout.write(self.style.SUCCESS(f"Deployment '{DEMO_DEPLOYMENT}': {TINY_SLUG}@production, "
                                             f"{base.name}, profile {DEMO_PROFILE}, endpoint "
                                             f"{endpoint.name} (proposed by ivan, approved by carol)"))

    def _seed_harness(self, users) -> None:
        alice, bob, carol, dave = users["alice"], users["bob"], users["carol"], users["dave"]
        with transaction.atomic():
            v1 = services.harness_create(user=alice, slug=DEMO_SLUG, name="Glow & Gadget live room",
                                         description="Skincare and small-appliance shop, evening live room.",
                                         manifest=_demo("skincare_v1"), change_note="First harness for the room")
            services.version_submit(user=alice, version=v1, comment="ready for review")
            v1 = services.version_approve(user=carol, version=v1, comment="claims and coupons checked")
            services.label_move(user=carol, harness=v1.harness, name="production", version=v1,
                                comment="first go-live")
            v2 = services.version_create_draft(user=bob, harness=v1.harness, manifest=_demo("skincare_v2"),
                                               parent=v1, change_note="Bundle skill, reworded coupon strategy")
            services.version_submit(user=bob, version=v2)
            v2 = services.version_approve(user=dave, version=v2, comment="fine for staging")
            services.label_move(user=bob, harness=v1.harness, name="staging", version=v2)
            v3 = services.version_create_draft(user=alice, harness=v1.harness, manifest=_demo("skincare_v3"),
                                               parent=v2, change_note="Rename product tool, stricter stock args")
            services.version_submit(user=alice, version=v3, comment="breaking tool change, please check")
        self.stdout.write(self.style.SUCCESS(f"Seeded harness '{DEMO_SLUG}': v1 production, v2 staging, "
                                             "v3 submitted for review"))

    def _seed_production_harness(self, users, *, slug: str, name: str, description: str, manifest: str,
                                 notes: tuple[str, str, str, str]) -> None:
        """One approved version of a harness, labelled production (alice writes it, carol approves and labels it).
        ``notes``: the change note, the submit comment, the review comment and the label comment."""
        alice, carol = users["alice"], users["carol"]
        change_note, submitted, approved, labelled = notes
        with transaction.atomic():
            v1 = services.harness_create(user=alice, slug=slug, name=name, description=description,
                                         manifest=_demo(manifest), change_note=change_note)
            services.version_submit(user=alice, version=v1, comment=submitted)
            v1 = services.version_approve(user=carol, version=v1, comment=approved)
            services.label_move(user=carol, harness=v1.harness, name="production", version=v1, comment=labelled)

    def _seed_order_desk(self, users) -> None:
        self._seed_production_harness(
            users, slug=ORDER_DESK_SLUG, name="Order desk",
            description="A customer-service agent brought in from outside the live room: orders, returns, refunds, "
                        "under a written policy; its tools answer from fixtures.",
            manifest="order_desk", notes=("Brought in with fixture bindings", "policy and fixtures in place",
                                          "identity check before every change", "order desk go-live"))
        self.stdout.write(self.style.SUCCESS(f"Seeded harness '{ORDER_DESK_SLUG}': v1 production (a customer-service "
                                             "harness with fixture-bound tools; scenario order-desk-day)"))

    def _seed_tiny_harness(self, users) -> None:
        self._seed_production_harness(
            users, slug=TINY_SLUG, name="Tiny demo room",
            description="The lean harness the local demo model (models/demo-tiny) was trained on: use it to preview "
                        "with the local model.",
            manifest="tiny_room", notes=("Harness of the demo model", "as trained", "same rules as the trained model",
                                         "demo model go-live"))
        self.stdout.write(self.style.SUCCESS(f"Seeded harness '{TINY_SLUG}': v1 production (the local demo "
                                             "model's harness)"))
