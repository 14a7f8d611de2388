"""Writes of the streams app, one module per seam: :mod:`.catalog` (live rooms, scenarios, model endpoints),
:mod:`.preview` (preview rooms, their events, comments, clock steps, members, turns), :mod:`.play` (the clock
running by itself: ticks, pause, close, the play sweep), :mod:`.runs` (scenario runs: jobs of :mod:`console.jobs`).
The public names are re-exported here: ``from streams import services; services.preview_open(...)``."""

from streams.services import catalog, play, preview, runs
from streams.services.catalog import (
    DEFAULT_ENDPOINT_NAME,
    DEMO_ROOM_PATH,
    DEMO_ROOM_SLUG,
    IMPORT_SCENARIO,
    catalog_seed_demo,
    live_room_load,
    model_endpoint_ensure_default,
    model_endpoint_ensure_flagship,
    scenario_import,
    scenarios_seed_demo,
)
from streams.services.play import (
    ASAP,
    LOST_TURN_S,
    MAX_PLAY_SPEED,
    STALLED_TICK_S,
    WAIT_TICK_S,
    preview_clock_tick,
    preview_close,
    preview_pause,
    preview_play,
    preview_play_nudge,
    preview_play_sweep_stalled,
    preview_resume,
)
from streams.services.preview import (
    COMMENTS_PER_TURN,
    MAX_STEP_MINUTES,
    MAX_VIEWER_COMMENT_CHARS,
    USE_PREVIEW,
    preview_clock_step,
    preview_comment_post,
    preview_event_append,
    preview_member_add,
    preview_member_remove,
    preview_open,
    preview_turn_run,
    preview_version_switch,
)
from streams.services.runs import run_ended, scenario_run_cancel, scenario_run_execute, scenario_run_start

__all__ = [
    "catalog", "play", "preview", "runs", "DEFAULT_ENDPOINT_NAME", "DEMO_ROOM_PATH", "DEMO_ROOM_SLUG",
    "IMPORT_SCENARIO", "catalog_seed_demo", "live_room_load", "model_endpoint_ensure_default",
    "model_endpoint_ensure_flagship", "scenario_import",
    "scenarios_seed_demo", "ASAP", "LOST_TURN_S", "MAX_PLAY_SPEED", "STALLED_TICK_S", "WAIT_TICK_S",
    "preview_clock_tick", "preview_close", "preview_pause", "preview_play", "preview_play_nudge",
    "preview_play_sweep_stalled", "preview_resume", "COMMENTS_PER_TURN", "MAX_STEP_MINUTES",
    "MAX_VIEWER_COMMENT_CHARS", "USE_PREVIEW", "preview_clock_step", "preview_comment_post", "preview_event_append",
    "preview_member_add", "preview_member_remove", "preview_open", "preview_turn_run", "preview_version_switch",
    "run_ended", "scenario_run_cancel", "scenario_run_execute", "scenario_run_start",
]
