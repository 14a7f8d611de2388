"""The roles of the console and what each may do.

Roles are Django groups; what a role may do is a set of Django permissions, so the admin, views, APIs
and (later) WebSocket consumers all ask the same question: ``user.has_perm(...)``. This table is the
source of truth; ``sync_role_groups`` runs after every migrate and makes the groups match it.
"""

from __future__ import annotations

from django.apps import apps as django_apps
from django.contrib.auth.management import create_permissions

CAMPAIGN_MANAGER = "campaign manager"
COMPLIANCE_REVIEWER = "compliance reviewer"
ML_STAFF = "ML staff"
ML_LEAD = "ML lead"  # ML staff who may also cancel and resume other people's jobs and builds
OPERATOR = "operator"
COMPLIANCE_LEAD = "compliance lead"  # a compliance reviewer who may also override a failing evaluation gate
ROLES = (CAMPAIGN_MANAGER, COMPLIANCE_REVIEWER, ML_STAFF, ML_LEAD, OPERATOR, COMPLIANCE_LEAD)

# Permission code names used by views and APIs (app_label.codename).
VIEW_HARNESS = "harness_editor.view_harness"
ADD_HARNESS = "harness_editor.add_harness"
EDIT_DRAFT = "harness_editor.change_harnessversion"
SUBMIT_VERSION = "harness_editor.submit_harnessversion"
REVIEW_VERSION = "harness_editor.review_harnessversion"
# approve a version whose evaluation gate fails, with a written reason (audited): harness_editor.gate
OVERRIDE_GATE = "harness_editor.override_gate"
MOVE_LABEL = "harness_editor.move_label"
SET_REVIEW_CHECKLIST = "harness_editor.set_review_checklist"  # the items reviewers tick before approving
VIEW_AUDIT = "console.view_auditevent"
USE_PREVIEW = "streams.use_previewroom"
VIEW_DATASETS = "training_jobs.view_dataset"  # dataset jobs, statistics and the sample browser
BUILD_DATASET = "training_jobs.add_dataset"  # compose a recipe, launch dataset builds, cancel one's own
VIEW_TRAINING = "training_jobs.view_trainingjob"  # training jobs, their curves and logs
RUN_TRAINING = "training_jobs.run_trainingjob"  # launch training jobs, cancel and resume one's own
VIEW_MODELS = "training_jobs.view_trainedmodel"  # the model registry and lineage
# cancel and resume other people's training jobs and dataset builds, stop servers others started: without it, only
# the person who started a job or build (or a model's server) may stop or resume it
MANAGE_ANY_TRAINING = "training_jobs.manage_any_trainingjob"
VIEW_EVAL_SETS = "training_jobs.view_evalset"  # browse eval sets, their versions and cases; download a version
IMPORT_EVAL_SET = "training_jobs.add_evalset"  # import an eval set (a new set or a new version) from JSON lines
SAVE_EVAL_CASE = "training_jobs.add_evalcase"  # save a preview or scenario-run turn as a case ("save as eval case")
PIN_EVAL_SET = "training_jobs.pin_evalset"  # pin the version of a set the approval gate evaluates on
VIEW_EVAL_RUNS = "training_jobs.view_evalrun"  # evaluation runs, their scores, cases and comparisons (evidence)
RUN_EVAL = "training_jobs.run_evalrun"  # launch evaluation runs, cancel and resume one's own
# label a sample of an evaluation run's cases blind (human labels; the agreement pages compare them with the rules
# and the judge models): compliance reviewers and ML staff
LABEL_EVAL = "training_jobs.label_evalresult"
# Serving and deployments (streams.live_models)
VIEW_SERVING = "streams.view_serveprofile"  # serve profiles, servers (which profile served which model when), metrics
MANAGE_SERVING = "streams.manage_serving"  # launch and stop servers from profiles, load and unload LoRA adapters
VIEW_DEPLOYMENTS = "streams.view_deployment"  # deployments, their revisions and rollback history
PROPOSE_DEPLOYMENT = "streams.propose_deployment"  # create a deployment or propose a change to one
REVIEW_DEPLOYMENT = "streams.review_deployment"  # approve / reject a deployment change someone else proposed
ROLLBACK_DEPLOYMENT = "streams.rollback_deployment"  # roll a deployment back to its previous approved revision
# Live sessions
VIEW_LIVE = "streams.view_livesession"  # watch live sessions (transcript, queue, metrics), read recordings
RUN_LIVE = "streams.run_livesession"  # start, steer (mute, take over, approve, skip, pin) and end live sessions

_EVERYONE = {VIEW_HARNESS, VIEW_AUDIT, VIEW_EVAL_SETS, VIEW_EVAL_RUNS, VIEW_DEPLOYMENTS, VIEW_LIVE, VIEW_SERVING}
_ML = _EVERYONE | {USE_PREVIEW, VIEW_DATASETS, BUILD_DATASET, VIEW_TRAINING, RUN_TRAINING, VIEW_MODELS,
                   IMPORT_EVAL_SET, SAVE_EVAL_CASE, RUN_EVAL, LABEL_EVAL, MANAGE_SERVING, PROPOSE_DEPLOYMENT}
_REVIEW = {REVIEW_VERSION, MOVE_LABEL, USE_PREVIEW, VIEW_MODELS, LABEL_EVAL, REVIEW_DEPLOYMENT, ROLLBACK_DEPLOYMENT}
ROLE_PERMISSIONS: dict[str, set[str]] = {
    CAMPAIGN_MANAGER: _EVERYONE | {ADD_HARNESS, EDIT_DRAFT, SUBMIT_VERSION, MOVE_LABEL, USE_PREVIEW, VIEW_DATASETS,
                                   VIEW_MODELS, SAVE_EVAL_CASE, PROPOSE_DEPLOYMENT},
    COMPLIANCE_REVIEWER: _EVERYONE | _REVIEW,
    ML_STAFF: set(_ML),
    ML_LEAD: _ML | {MANAGE_ANY_TRAINING, PIN_EVAL_SET, REVIEW_DEPLOYMENT, ROLLBACK_DEPLOYMENT},
    OPERATOR: _EVERYONE | {RUN_LIVE, ROLLBACK_DEPLOYMENT},
    COMPLIANCE_LEAD: _EVERYONE | _REVIEW | {OVERRIDE_GATE, SET_REVIEW_CHECKLIST},
}


def sync_role_groups(using: str = "default", **_: object) -> None:
    from django.contrib.auth.models import Group, Permission

    # post_migrate fires per app; make sure every app's permissions exist before assigning them.
    for app_config in django_apps.get_app_configs():
        create_permissions(app_config, verbosity=0, using=using)
    for role, perms in ROLE_PERMISSIONS.items():
        group, _created = Group.objects.using(using).get_or_create(name=role)
        wanted = []
        for perm in sorted(perms):
            app_label, codename = perm.split(".", 1)
            wanted.append(
                Permission.objects.using(using).get(content_type__app_label=app_label, codename=codename)
            )
        group.permissions.set(wanted)


def roles_with(perm: str) -> list[str]:
    """The roles that hold ``perm`` (app_label.codename), in the order of ROLES: what a 403 page names."""
    return [role for role in ROLES if perm in ROLE_PERMISSIONS[role]]


def user_roles(user) -> list[str]:
    if not user.is_authenticated:
        return []
    if user.is_superuser:
        return list(ROLES)
    return sorted(g.name for g in user.groups.all() if g.name in ROLES)
